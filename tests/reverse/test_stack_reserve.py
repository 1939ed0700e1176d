"""A gradient function keeps its value stack, its stack of final contents and its buffer
of operand copies for its next call (:data:`adcore.reverse.value_stack.RESERVED`): calls
after the first start on memory an earlier call filled, of another size, possibly from
another thread; each must still give the right gradient."""
import math
import threading

import numba
import numpy as np
import pytest
from numba import prange

import adcore
from adcore import Const, Reverse
from fdcheck import check


@numba.njit
def chained(x):
    """Every iteration's value is needed by the reverse: the value stack grows with n."""
    s = 1.0
    for i in range(x.shape[0]):
        s = s * math.cos(x[i]) + 0.5 * x[i]
    return s


def time_steps(u, v, steps):
    """``u`` is read by the first loop and overwritten by the second: the forward pass copies
    it before each first loop (the buffer of operand copies)."""
    n = u.shape[0]
    for _ in range(steps):
        for i in prange(1, n - 1):
            v[i] = u[i] + 0.2 * (u[i - 1] - 2.0 * u[i] + u[i + 1]) + 0.01 * math.sin(u[i])
        for i in prange(1, n - 1):
            u[i] = v[i]
    return np.sum(u * u)


PARALLEL, SERIAL = numba.njit(parallel=True)(time_steps), numba.njit(time_steps)


@pytest.mark.parametrize("sizes", [(3000, 20, 6000, 7)])
def test_the_value_stack_kept_between_calls_of_other_sizes(sizes):
    rng = np.random.default_rng(1)
    for n in sizes:
        check(chained, rng.random(n) * 0.5, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_operand_copies_kept_between_calls_of_other_sizes():
    rng = np.random.default_rng(2)
    for n, steps in [(400, 6), (40, 2), (2000, 9), (400, 6)]:
        u = rng.random(n)
        got = adcore.gradient(Reverse, PARALLEL, u.copy(), Const(np.zeros(n)), Const(steps))[0]
        expected = adcore.gradient(Reverse, SERIAL, u.copy(), Const(np.zeros(n)), Const(steps))[0]
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_calls_from_several_threads_at_once():
    rng = np.random.default_rng(3)
    inputs = [rng.random(n) * 0.5 for n in (5000, 300, 8000, 1000) * 3]
    expected = [adcore.gradient(Reverse, chained, x.copy())[0] for x in inputs]
    got = [None] * len(inputs)

    def run(k):
        got[k] = adcore.gradient(Reverse, chained, inputs[k].copy())[0]
    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)


def test_the_pieces_of_parallel_loops_keep_their_buffers_between_calls():
    """Every piece of every call of a parallel loop in one gradient (here 12 time steps of at
    least 8 pieces) keeps its value-stack buffer for the next call: none is freed and drawn
    anew as fresh memory, and the gradients stay those of the serial build."""
    from adcore.reverse import parallel_loops
    pooled = numba.njit(parallel=True)(time_steps)       # loops of its own: tapes of its own
    rng = np.random.default_rng(4)
    u, steps = rng.random(400), 12
    before = set(parallel_loops._tapes)
    expected = adcore.gradient(Reverse, SERIAL, u.copy(), Const(np.zeros(400)), Const(steps))[0]
    for _ in range(3):
        got = adcore.gradient(Reverse, pooled, u.copy(), Const(np.zeros(400)), Const(steps))[0]
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
        pools = [t.pool for k, t in parallel_loops._tapes.items() if k not in before and t is not None]
        assert max(np.count_nonzero(p) for p in pools) >= steps * 8
