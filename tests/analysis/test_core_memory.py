"""Finite-difference checks of memory access: layouts, overwrites, scatter, calls."""
import math

import numba
import numpy as np

from fdcheck import check


@numba.njit
def matvec(A, x, y):
    for i in range(A.shape[0]):
        s = 0.0
        for j in range(A.shape[1]):
            s += A[i, j] * x[j]
        y[i] = math.sin(s)


def test_2d_c_layout_mutating_kernel_without_return():
    rng = np.random.default_rng(0)
    check(matvec, rng.standard_normal((3, 4)), rng.standard_normal(4), np.zeros(3))


def test_2d_fortran_layout():
    rng = np.random.default_rng(1)
    check(matvec, np.asfortranarray(rng.standard_normal((3, 4))), rng.standard_normal(4), np.zeros(3))


def test_strided_views():
    rng = np.random.default_rng(2)
    A = rng.standard_normal((6, 8))[::2, 1::2]          # non-contiguous 'A' layout
    x = rng.standard_normal(12)[::3]
    check(matvec, A, x, np.zeros(3))


@numba.njit
def volume(T):
    s = 0.0
    for i in range(T.shape[0]):
        for j in range(T.shape[1]):
            for k in range(T.shape[2]):
                s += T[i, j, k] ** 2 * (i + 1) - math.cos(T[i, j, k])
    return s


def test_3d_array():
    check(volume, np.random.default_rng(3).standard_normal((2, 3, 2)))


@numba.njit
def overwrite(x, a):
    for i in range(x.shape[0]):
        x[i] = x[i] * x[i] * a          # the old x[i] is needed in reverse but overwritten
    for i in range(x.shape[0] - 1):
        x[i + 1] = math.sin(x[i]) + x[i + 1]
    return x[x.shape[0] - 1] * x[0]


def test_in_place_overwrite_keeps_needed_values():
    check(overwrite, np.random.default_rng(4).uniform(-1, 1, 6), 0.8)


@numba.njit
def repeated_overwrite(x, steps):
    for t in range(steps):
        for i in range(x.shape[0]):
            x[i] = math.tanh(x[i] * 1.5 + 0.1)


def test_repeated_nonlinear_overwrite():
    check(repeated_overwrite, np.random.default_rng(5).uniform(-1, 1, 5), 4)


@numba.njit
def accumulate(x, out):
    for i in range(x.shape[0]):
        out[0] += x[i] * x[i]
        out[i % 2 + 1] += math.exp(x[i])


def test_accumulation_into_the_same_element():
    check(accumulate, np.random.default_rng(6).uniform(-1, 1, 7), np.zeros(3))


@numba.njit
def scatter_gather(values, idx, out, w):
    for i in range(idx.shape[0]):
        out[idx[i]] += values[i] * w[idx[i]]


def test_integer_index_arrays():
    rng = np.random.default_rng(7)
    idx = np.array([0, 2, 2, 1, 0, 2])
    check(scatter_gather, rng.standard_normal(6), idx, rng.standard_normal(3), rng.standard_normal(3))


@numba.njit
def helper_square(v):
    return v * v + math.sin(v)


@numba.njit
def helper_norm(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += helper_square(x[i])
    return math.sqrt(s)


@numba.njit
def calls_other_njit(x, y):
    return helper_norm(x) * helper_norm(y) + helper_square(x[0])


def test_calls_to_other_njit_functions():
    rng = np.random.default_rng(8)
    check(calls_other_njit, rng.uniform(0.5, 1, 4), rng.uniform(0.5, 1, 3))


@numba.njit
def uses_array_method(x, out):
    for i in range(x.shape[0]):
        out[i] = x[i] * x[i]
    return out.sum() + x.sum()


def test_numba_array_methods_inlined():
    check(uses_array_method, np.random.default_rng(9).standard_normal(5), np.zeros(5))


def test_in_place_stencil():
    from bench.kernels import stencil          # reads u after overwriting it in place
    check(stencil, np.random.default_rng(10).standard_normal(8), 3)
