"""Numba's negative-index tests removed on indices proven nonnegative (adcore/frontend/index_signs.py):
which tests go at the stage level, and kernels whose indices do go negative (Python's
wraparound) keep their primal value and their gradient (hypothesis over the data)."""
import math

import numba
import numpy as np
from hypothesis import given, settings, strategies as st

import adcore
from adcore import Duplicated, ReverseWithPrimal, pipeline
from adcore.analysis.cfg import ControlFlow
from adcore.frontend.index_signs import NonNegative, array_sizes, remove_negative_index_tests
from fdcheck import check


@numba.njit
def triangle(x, w):
    """r starts at c + 1: only the countdown of Numba's range loop bounds it."""
    d = x.shape[0]
    s = 0.0
    for c in range(d):
        for r in range(c + 1, d):
            s += x[r] * w[c]
    return s


@numba.njit
def wrapping(x, w, k):
    """Indices that do go negative, next to ones that cannot: every term must keep Python's
    meaning of a negative index."""
    n = x.shape[0]
    s = 0.0
    for i in range(n):
        s += x[i - 2] * w[i]                 # negative for i < 2
        s += math.sin(x[-1 - i]) * w[i]      # always negative
    for c in range(n):
        for r in range(c - 1, n):            # r = -1 first when c = 0
            s += x[r] * w[c]
        for r in range(c + 1, n):
            s += x[r - k] * x[r] * w[c]      # negative when r < k
    j = k
    while j > -n:                            # counts down through zero
        s += x[j] * w[j]
        j -= 1
    return s


def _layout_of(f, *args):
    argtypes = tuple(numba.typeof(a) for a in args)
    primal = pipeline.primal(f, argtypes)
    anns = [Duplicated(a, np.zeros_like(a)) if isinstance(a, np.ndarray) else a for a in args]
    return primal, pipeline.Layout(primal, adcore.calling.arguments.annotate(anns), argtypes, None, None)


def _negative_tests(func):
    return [i for i in func.instructions() if i.opcode == "icmp" and len(i.operands) == 2
            and i.operands[1].is_const and i.operands[1].ref in ("0", "-1") and " s" in i.text]


def test_counters_started_by_another_counter_lose_their_negative_index_test():
    x = np.ones(4)
    primal, layout = _layout_of(triangle, x, x.copy())
    func = primal.func
    before = _negative_tests(func)
    assert before, "Numba's IR no longer tests this index: the test needs another kernel"
    removed = remove_negative_index_tests(func, ControlFlow(func), array_sizes(layout.groups, layout.arrays))
    assert removed == len(before) and not _negative_tests(func)


def test_indices_that_may_be_negative_keep_their_test():
    x = np.ones(5)
    primal, layout = _layout_of(wrapping, x, x.copy(), 2)
    func = primal.func
    sizes = array_sizes(layout.groups, layout.arrays)
    proven = NonNegative(func, ControlFlow(func), sizes)
    tests = [i for i in _negative_tests(func) if i.text.split()[3] == "slt"]
    kept = [i for i in tests if not proven.holds(i.operands[0])]
    # LLVM settles x[i - 2] and x[-1 - i] itself; r from c - 1, r - k and j stay tested,
    # r from c + 1 is proven
    assert len(kept) == 3 and len(tests) == 4, [i.text for i in tests]


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 6), st.integers(0, 4), st.integers(0, 2**16))
def test_kernels_with_negative_indices_keep_value_and_gradient(n, k, seed):
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal(n + 4), rng.standard_normal(n + 4)
    x, w = x[:max(n, k + 1, 2)], w[:max(n, k + 1, 2)]      # every index in bounds
    dx, dw = np.zeros_like(x), np.zeros_like(w)
    _, value = adcore.autodiff(ReverseWithPrimal, wrapping, Duplicated(x.copy(), dx),
                               Duplicated(w.copy(), dw), k)
    assert value == wrapping(x.copy(), w.copy(), k)
    check(wrapping, x, w, k, rtol=1e-5, atol=1e-7)
    check(triangle, x, w)
