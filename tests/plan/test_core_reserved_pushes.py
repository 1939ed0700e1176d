"""Loops whose pushes are reserved before they run (:class:`adcore.plan.pushes.Reserve`): the
room is the trip count (from the exit test) times the bytes one iteration may push, and the
pushes inside store with no capacity check.  A wrong trip count would write past the stack,
so the bounds, steps and branches here are drawn by hypothesis, with empty loops among them,
inside an outer loop whose trip count varies, each checked against central differences."""
import math

import numba
import numpy as np
from hypothesis import given, strategies as st

import adcore
from adcore import Duplicated, Reverse, ReverseWithPrimal
from adcore.backend import vector_math
from bench.kernels import logsumexp as log_sum_exp
from fdcheck import check
from reverse.test_core_property import examples


@numba.njit
def ranged(x, start, stop, step, rounds):
    """Every iteration keeps ``s`` (a recurrence) and, on one side of a branch, which side
    it took; the inner loop runs ``range(start, stop, step)`` once per outer round."""
    s = 1.0
    for r in range(rounds):
        for i in range(start, stop, step):
            t = s * math.cos(x[i]) + 0.5 * x[i]
            if t > 0.3:
                t = t * math.sin(x[i] + r)
            s = t
    return s


@numba.njit
def counted_down(x):
    """A while loop counting down to zero with a != test."""
    s = 0.5
    i = x.shape[0]
    while i != 0:
        i -= 1
        s = math.tanh(s * x[i] + 0.1)
    return s


@examples()
@given(n=st.integers(1, 12), start=st.integers(-2, 13), stop=st.integers(-2, 13),
       step=st.sampled_from([1, 2, 3, -1, -2]), rounds=st.integers(0, 3), seed=st.integers(0, 99))
def test_reserved_loop_bounds(n, start, stop, step, rounds, seed):
    start, stop = min(max(start, 0), n), min(max(stop, 0), n)
    if step < 0:                       # range(start, stop, -k) reads x[start] first
        start, stop = min(start, n - 1), max(stop, -1)
    x = np.random.default_rng(seed).uniform(-1.0, 1.0, n)
    check(ranged, x, start, stop, step, rounds, rtol=1e-5, atol=1e-7)


def test_the_loops_are_reserved():
    """The recurrence's loop and the while loop push with no capacity check; the call's
    gradient stays right when the stack starts empty (a fresh gradient) and when the
    reserve is larger or smaller than the room left."""
    x = np.linspace(-1.0, 1.0, 7)
    for kernel, args in ((ranged, (x, 0, 7, 1, 2)), (counted_down, (x,))):
        compiled = adcore.compile_gradient(Reverse, kernel, Duplicated(x, np.zeros_like(x)), *args[1:])
        assert "@ad.push.reserved." in compiled.adjoint_ir and "@ad.stack.reserve(" in compiled.adjoint_ir
    check(counted_down, x)
    rng = np.random.default_rng(2)
    for n in (1, 3000, 2, 70000):        # the stack kept from the call before is of another size
        x, v = rng.uniform(-1.0, 1.0, n), rng.standard_normal(n)
        dx = np.zeros(n)
        adcore.autodiff(Reverse, ranged, Duplicated(x, dx), 0, n, 1, 1)
        eps = 1e-6                       # along a random direction: central differences
        fd = (ranged(x + eps * v, 0, n, 1, 1) - ranged(x - eps * v, 0, n, 1, 1)) / (2 * eps)
        assert abs(dx @ v - fd) <= 1e-6 * max(1.0, abs(fd))


def test_in_order_sum_vectorised():
    """``s += exp(x[i] - m)`` keeps the primal's order of additions (the in-order
    reductions): the gradient's primal value is Numba's up to the vector ``exp``'s error,
    and its gradient is softmax(x)."""
    x = np.random.default_rng(1).standard_normal(1001)
    dx = np.zeros_like(x)
    _, value = adcore.autodiff(ReverseWithPrimal, log_sum_exp, Duplicated(x, dx))
    assert abs(value - log_sum_exp(x)) <= 1e-14 * abs(value)
    e = np.exp(x - x.max())
    np.testing.assert_allclose(dx, e / e.sum(), rtol=1e-13, atol=1e-16)
    compiled = adcore.compile_gradient(Reverse, log_sum_exp, Duplicated(x, dx))
    if vector_math.ENABLED:
        assert "_exp(<" in compiled.optimised_ir       # libmvec's vector exp in the forward loop


class _Block:
    def __init__(self):
        self.succ = []


class _Loop:
    def __init__(self, header, blocks):
        self.header, self.blocks = header, blocks


def test_a_loop_whose_blocks_may_run_twice_an_iteration_reserves_nothing():
    """Reserving counts each block's pushes once an iteration: a cycle inside the body
    (one that does not pass the header, as C's goto can make) rules the loop out."""
    from adcore.plan.pushes import _one_pass
    h, a, b, c = _Block(), _Block(), _Block(), _Block()
    h.succ, a.succ, b.succ, c.succ = [a, b], [c], [c], [h]       # a diamond, then back
    assert _one_pass(_Loop(h, [h, a, b, c]))
    a.succ, b.succ = [b, c], [a]                                  # a <-> b inside the body
    assert not _one_pass(_Loop(h, [h, a, b, c]))


def test_hvp_differentiates_reserved_pushes():
    """hvp runs forward mode over the gradient's IR, reserved pushes and all: logsumexp's
    Hessian-vector product against its closed form, diag(p) - p p^T."""
    rng = np.random.default_rng(3)
    x, v = rng.standard_normal(50), rng.standard_normal(50)
    p = np.exp(x - x.max())
    p /= p.sum()
    np.testing.assert_allclose(adcore.hvp(log_sum_exp, x, v), p * v - p * (p @ v), rtol=1e-10, atol=1e-14)
