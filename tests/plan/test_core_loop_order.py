"""Loops whose reverse counts up (adcore/plan/loop_order.py): the choice through
``adcore.cache_report`` on kernels where it is known, gradients against central finite
differences and against the same kernel reversed counting down, random elementwise loops."""
import math

import numba
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import adcore
from adcore import Duplicated, Reverse
from adcore import plan
from fdcheck import check


@numba.njit
def scale_then_sum(x, y, a):
    """The first loop stores y[i] from x[i] alone (counts up); the second carries a sum."""
    for i in range(x.shape[0]):
        y[i] = a[0] * x[i]
    s = 0.0
    for i in range(x.shape[0]):
        s += y[i] * y[i]
    return s


@numba.njit
def rows_in_place(x, z, a):
    """GMM's points layout: z refilled, updated in place and read, per row k."""
    s = 0.0
    for k in range(a.shape[0] - 1):
        for i in range(x.shape[0]):
            z[i] = a[k] * x[i]
        for i in range(x.shape[0]):
            z[i] += a[k + 1] * (x[i] - a[k])
        for i in range(x.shape[0]):
            s += math.sin(z[i]) * x[i]
    return s


@numba.njit
def shifted(x, y, a):
    """y[i] reads y[i - 1]: an iteration depends on the one before (counts down)."""
    y[0] = x[0]
    for i in range(1, x.shape[0]):
        y[i] = a[0] * y[i - 1] + x[i]
    s = 0.0
    for i in range(x.shape[0]):
        s += y[i] * y[i]
    return s


@numba.njit
def two_arrays(x, y, w, a):
    """Stores into y and w, each at the counter: independent when y and w are distinct."""
    for i in range(x.shape[0]):
        y[i] = a[0] * x[i]
        w[i] = y[i] * x[i]
    s = 0.0
    for i in range(x.shape[0]):
        s += w[i] + y[i] * y[i]
    return s


@numba.njit
def kept_value(x, y, a):
    """The loop reads x, which a later loop overwrites: its loads are kept per iteration
    (popped in order: counts down)."""
    for i in range(x.shape[0]):
        y[i] = math.sin(a[0] * x[i]) * x[i]
    for i in range(x.shape[0]):
        x[i] = 0.0
    s = 0.0
    for i in range(x.shape[0]):
        s += y[i] * y[i]
    return s


@numba.njit
def last_value(x, y, a):
    """The last iteration's t is used after the loop (counts down)."""
    t = 0.0
    for i in range(x.shape[0]):
        t = math.sin(x[i] * a[0])
        y[i] = t
    s = 0.0
    for i in range(x.shape[0]):
        s += y[i] * y[i]
    return s + 3.0 * t


@numba.njit
def branch_on_last(x, y, a):
    """A branch after the loop on the last iteration's comparison (counts down)."""
    big = False
    for i in range(x.shape[0]):
        y[i] = x[i] * a[0]
        big = x[i] > 0.0
    s = 0.0
    for i in range(x.shape[0]):
        s += y[i] * y[i]
    if big:
        s = s * a[1]
    return s


def _upward(kernel, *args, passes=None):
    report = adcore.cache_report(kernel, *(Duplicated(v, np.zeros_like(v)) if isinstance(v, np.ndarray)
                                           else v for v in args), passes=passes)
    return len(report.upward)


def _data(seed, n=6):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n), rng.standard_normal(3)


def test_the_choice_on_known_loops():
    x, a = _data(1)
    assert _upward(scale_then_sum, x, np.zeros(6), a) == 1
    assert _upward(rows_in_place, x, np.zeros(6), a) == 2       # the fill and the update
    assert _upward(shifted, x, np.zeros(6), a) == 0
    assert _upward(two_arrays, x, np.zeros(6), np.zeros(6), a) == 1
    assert _upward(kept_value, x, np.zeros(6), a) == 1           # the loop writing x only
    assert _upward(elementwise, x, np.zeros(6), a, 0) == 2
    assert _upward(last_value, x, np.zeros(6), a) == 0
    text = str(adcore.cache_report(scale_then_sum, *(Duplicated(v, np.zeros_like(v))
                                                     for v in (x, np.zeros(6), a))))
    assert "reversed counting up, their iterations independent: 1 loop(s)" in text


def test_gradients_match_finite_differences():
    x, a = _data(2)
    check(scale_then_sum, x, np.zeros(6), a)
    check(rows_in_place, x, np.zeros(6), a)
    check(shifted, x, np.zeros(6), a * 0.5)
    check(two_arrays, x, np.zeros(6), np.zeros(6), a)
    check(kept_value, x.copy(), np.zeros(6), a, rtol=1e-4, atol=1e-5)
    check(last_value, x, np.zeros(6), a)
    for sign in (1.0, -1.0):
        x[-1] = sign * abs(x[-1])
        check(branch_on_last, x, np.zeros(6), a)


@numba.njit
def elementwise(x, z, a, mode):
    """Rows of in-place elementwise updates of z from x, in one of four shapes."""
    s = 0.0
    for k in range(a.shape[0]):
        for i in range(x.shape[0]):
            z[i] = a[k] * x[i] if mode != 1 else math.exp(a[k] * x[i])
        for i in range(x.shape[0]):
            if mode == 2:
                z[i] = z[i] * z[i] + x[i]
            else:
                z[i] += a[k] * math.cos(x[i] - a[k])
        for i in range(x.shape[0]):
            s += z[i] * x[i] if mode != 3 else z[i] * z[i]
    return s


@numba.njit
def counting_down(x, z, a, mode):
    """elementwise, differentiated with the ``loop_order`` pass off: every reverse counts down."""
    return elementwise(x, z, a, mode)


def _gradient(kernel, x, a, mode):
    dx, da = np.zeros_like(x), np.zeros_like(a)
    with plan.using({"loop_order"} if kernel is counting_down else ()):
        adcore.autodiff(Reverse, kernel, Duplicated(x, dx), Duplicated(np.zeros_like(x), np.zeros_like(x)),
                        Duplicated(a, da), mode)
    return np.concatenate([dx, da])


def test_counting_down_has_no_upward_loop():
    x, a = _data(3)
    assert _upward(counting_down, x, np.zeros(6), a, 0, passes={"loop_order": False}) == 0
    assert _upward(elementwise, x, np.zeros(6), a, 0) > 0


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 7), st.integers(1, 3), st.integers(0, 3), st.integers(0, 2**16))
def test_elementwise_rows_match_counting_down(n, m, mode, seed):
    """Against the same kernel compiled with every reverse counting down, and central
    differences."""
    rng = np.random.default_rng(seed)
    x, a = rng.standard_normal(n), 0.5 * rng.standard_normal(m)
    check(elementwise, x, np.zeros(n), a, mode, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(_gradient(elementwise, x, a, mode), _gradient(counting_down, x, a, mode),
                               rtol=1e-12, atol=1e-13)

