"""A kept value the forward pass stores into memory that nothing writes again is loaded back
by the reverse pass instead of pushed (values.Values.stored_copy): the same numbers, no
bytes cached for it; and where the memory may change, the value is kept as before."""
import math

import numba
import numpy as np
import pytest

import adcore
from adcore import Const, Duplicated, Reverse
from bench import kernels
from fdcheck import check


@numba.njit
def stored(x, y):
    for i in range(x.shape[0]):
        y[i] = math.tanh(x[i])
    s = 0.0
    for i in range(y.shape[0]):
        s += y[i] * y[i]
    return s


@numba.njit
def overwritten_later(x, y):
    for i in range(x.shape[0]):
        y[i] = math.tanh(x[i])
    s = 0.0
    for i in range(y.shape[0]):
        s += y[i] * x[i]
        y[i] = 0.5 * x[i]              # the stored tanh is gone before the reverse pass
    return s


@numba.njit
def nested(x, y, steps):
    s = 0.0
    for t in range(steps):             # the same addresses each step
        for i in range(x.shape[0]):
            y[i] = math.exp(x[i] * (t + 1) * 0.3)
            s += y[i] * y[i]
    return s


@numba.njit
def also_written_in_the_loop(x, y):
    s = 0.0
    n = x.shape[0]
    for i in range(n):
        y[i] = math.tanh(x[i])
        y[n - 1 - i] = y[n - 1 - i] * 0.5 + x[i]
        s += y[i] * y[i]
    return s


@numba.njit
def every_other(x, y):
    s = 0.0
    for i in range(x.shape[0] // 2):
        y[2 * i] = math.exp(x[i])       # not the loop counter itself: kept
        s += y[2 * i] * x[i]
    return s


@numba.njit
def scratch_row(x, y, out):
    for i in range(x.shape[0]):
        y[0] = math.tanh(x[i])          # one address, every iteration
        out[i] = y[0] * y[0]
    return out.sum()


def _values(n=6, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n) * 0.7, rng.standard_normal(n)


def test_a_stored_tanh_is_loaded_back():
    x, y = _values()
    check(stored, x, y)
    adcore.autodiff(Reverse, stored, Duplicated(x, np.zeros(6)), Duplicated(y, np.zeros(6)))
    assert adcore.last_cached_bytes() < 6 * 8


@pytest.mark.parametrize("kernel", [overwritten_later, also_written_in_the_loop, every_other])
def test_memory_that_may_change_keeps_the_value(kernel):
    x, y = _values()
    check(kernel, x, y)


def test_nested_loops_and_scratch_rows_keep_the_value():
    x, y = _values()
    check(nested, x, y, 3)
    check(scratch_row, x, y[:1].copy(), np.zeros(6))


def test_allocating_kernel_caches_nothing_per_element():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(1000), rng.standard_normal(1000)
    da, db = np.zeros(1000), np.zeros(1000)
    adcore.autodiff(Reverse, kernels.allocating, Duplicated(a, da), Duplicated(b, db))
    assert adcore.last_cached_bytes() < 1000
    t = np.tanh(a * b + 0.5)
    g = 2.0 * t * (1.0 - t * t)
    np.testing.assert_allclose(da, g * b, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(db, g * a, rtol=1e-12, atol=1e-14)


def test_a_const_output_array_is_loaded_back_too():
    x, y = _values()
    dx = np.zeros(6)
    adcore.autodiff(Reverse, stored, Duplicated(x, dx), Const(y))
    t = np.tanh(x)
    np.testing.assert_allclose(dx, 2 * t * (1 - t * t), rtol=1e-12)
