"""Finite-difference checks of each arithmetic instruction and math function."""
import math
import os

import numba
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fdcheck import check


def unary(fn):
    """A kernel applying the scalar function ``fn`` to each element and summing
    (a Python lambda is compiled with njit and called as another njit function)."""
    if isinstance(fn, type(lambda: 0)):
        fn = numba.njit(fn)

    @numba.njit
    def kernel(x):
        s = 0.0
        for i in range(x.shape[0]):
            s += fn(x[i])
        return s
    return kernel


# domain of each function: inputs drawn from (lo, hi)
MATH = {
    "exp": (math.exp, -2, 2), "log": (math.log, 0.2, 3), "log2": (math.log2, 0.2, 3),
    "log10": (math.log10, 0.2, 3), "log1p": (math.log1p, -0.5, 3), "expm1": (math.expm1, -2, 2),
    "sin": (math.sin, -3, 3), "cos": (math.cos, -3, 3), "tan": (math.tan, -1.2, 1.2),
    "asin": (math.asin, -0.9, 0.9), "acos": (math.acos, -0.9, 0.9), "atan": (math.atan, -3, 3),
    "sinh": (math.sinh, -2, 2), "cosh": (math.cosh, -2, 2), "tanh": (math.tanh, -2, 2),
    "asinh": (math.asinh, -2, 2), "acosh": (math.acosh, 1.2, 3), "atanh": (math.atanh, -0.9, 0.9),
    "sqrt": (math.sqrt, 0.1, 3), "fabs": (math.fabs, -2, 2), "abs": (abs, -2, 2),
    "erf": (math.erf, -2, 2), "erfc": (math.erfc, -2, 2), "exp2": (lambda v: 2.0 ** v, -2, 2),
    "cube": (lambda v: v ** 3, -2, 2), "pow_half": (lambda v: v ** 0.5, 0.1, 3),
    "square_int_pow": (lambda v: v ** 2, -2, 2), "neg": (lambda v: -v, -2, 2),
    "floor": (lambda v: math.floor(v) * 1.0 + v, -2, 2), "ceil": (lambda v: math.ceil(v) + v * v, -2, 2),
    "trunc": (lambda v: math.trunc(v) + v, -2, 2), "round": (lambda v: round(v) * v, -2, 2),
    "copysign": (lambda v: math.copysign(v * v, v - 0.3), -2, 2),
    "gamma": (lambda v: math.lgamma(2.0) + v, 0.5, 2),
}
KERNELS = {name: unary(fn) for name, (fn, lo, hi) in MATH.items()}


def _away_from_kinks(name, x):
    if name in ("floor", "ceil", "trunc", "round", "fabs", "abs", "copysign"):
        x = x[np.abs(x - np.round(x * 2) / 2) > 0.05]
        x = x[np.abs(x - 0.3) > 0.05]
    return x


@pytest.mark.parametrize("name", sorted(MATH))
def test_math_function(name):
    fn, lo, hi = MATH[name]
    x = np.random.default_rng(1).uniform(lo, hi, 12)
    check(KERNELS[name], _away_from_kinks(name, x))


@numba.njit
def binary_ops(a, b, x, y):
    s = 0.0
    for i in range(x.shape[0]):
        u, v = x[i] * a, y[i] + b
        s += u + v
        s += u - v
        s += u * v
        s += u / v
        s += u % v
        s += -u
        s += math.atan2(u, v) + math.hypot(u, v) + math.pow(v, u)
        s += max(u, v) + min(u, v)
    return s


def test_binary_arithmetic():
    rng = np.random.default_rng(2)
    check(binary_ops, 0.7, 1.3, rng.uniform(0.5, 2, 9), rng.uniform(0.5, 2, 9))


@numba.njit
def integer_power(x, n):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] ** n + x[i] ** 3 + x[i] ** -2
    return s


def test_integer_powers():
    check(integer_power, np.random.default_rng(3).uniform(0.5, 2, 7), 5)


@numba.njit
def conversions(x, k):
    s = 0.0
    for i in range(x.shape[0]):
        j = int(x[i] * 10.0)               # float -> int: inactive
        s += x[i] * float(j % 3 + k)       # int -> float: a constant factor
        s += np.float32(x[i]) * np.float32(2.5)   # float64 -> float32 -> float64
    return s


def test_casts_and_int_float_conversions():
    x = np.random.default_rng(4).uniform(0.05, 0.95, 8)
    x = x[np.abs(x * 10 - np.round(x * 10)) > 0.05]
    check(conversions, x, 2, eps=1e-3, rtol=1e-4, atol=1e-4)


@numba.njit
def float32_kernel(x, w):
    s = np.float32(0.0)
    for i in range(x.shape[0]):
        s += np.float32(math.tanh(x[i] * w[i])) * x[i]
    return s


def test_float32_kernel():
    rng = np.random.default_rng(5)
    x, w = rng.uniform(-1, 1, 6).astype(np.float32), rng.uniform(-1, 1, 6).astype(np.float32)
    check(float32_kernel, x, w, eps=1e-2, rtol=2e-2, atol=2e-3)


@numba.njit
def mixed_precision(x32, y64):
    s = 0.0
    for i in range(x32.shape[0]):
        s += x32[i] * y64[i] + math.exp(x32[i])
        y64[i] = x32[i] * 2.0
    return s


def test_float32_float64_mix():
    rng = np.random.default_rng(6)
    check(mixed_precision, rng.uniform(-1, 1, 5).astype(np.float32), rng.uniform(-1, 1, 5),
          eps=1e-3, rtol=1e-2, atol=1e-3)


# -- singular points: a zero adjoint never becomes NaN ------------------------------------------
def masked(fn):
    """A kernel evaluating ``fn`` at every element, then summing only where ``keep`` is set:
    the skipped elements (singular points) receive a zero adjoint."""
    if isinstance(fn, type(lambda: 0)):
        fn = numba.njit(fn)

    @numba.njit
    def kernel(x, keep):
        y = np.empty_like(x)
        for i in range(x.shape[0]):
            y[i] = fn(x[i])
        s = 0.0
        for i in range(x.shape[0]):
            if keep[i]:
                s += y[i]
        return s
    return kernel


# each function with points where its derivative is infinite or undefined
SINGULAR = {
    "sqrt": (math.sqrt, [0.0]), "cbrt": (np.cbrt, [0.0]), "log": (math.log, [0.0]),
    "log2": (math.log2, [0.0]), "log10": (math.log10, [0.0]), "log1p": (math.log1p, [-1.0]),
    "asin": (math.asin, [1.0, -1.0]), "acos": (math.acos, [1.0, -1.0]),
    "atanh": (math.atanh, [1.0, -1.0]), "acosh": (lambda v: math.acosh(v + 1.0), [0.0]),
    "pow_half": (lambda v: v ** 0.5, [0.0]), "pow_neg": (lambda v: v ** -1.5, [0.0]),
    "inverse": (lambda v: np.divide(1.0, v), [0.0]), "exp_overflow": (math.exp, [800.0]),
    "hypot": (lambda v: math.hypot(v, 0.0), [0.0]), "atan2": (lambda v: math.atan2(v, 0.0), [0.0]),
    "times_log": (lambda v: v * math.log(v), [0.0]), "pow_var": (lambda v: v ** v, [0.0]),
}
MASKED = {name: masked(fn) for name, (fn, _) in SINGULAR.items()}


@pytest.mark.parametrize("name", sorted(SINGULAR))
def test_zero_adjoint_at_a_singular_point_stays_zero(name):
    fn, points = SINGULAR[name]
    regular = np.array([0.3, 0.55, 0.8])
    x = np.concatenate([regular, points])
    keep = np.array([True] * 3 + [False] * len(points))
    (gx, _), args = check(MASKED[name], x, keep, seeded=False)
    assert np.all(np.isfinite(args[0].dval)) and np.all(args[0].dval[3:] == 0)


@settings(max_examples=int(os.environ.get("ADCORE_PROPERTY_EXAMPLES", 25)), deadline=None)
@given(name=st.sampled_from(sorted(SINGULAR)), data=st.data())
def test_branches_skipping_singular_points(name, data):
    """Singular points at random places among regular ones, skipped by a branch."""
    fn, points = SINGULAR[name]
    regular = data.draw(st.lists(st.floats(0.25, 0.9), min_size=1, max_size=4))
    chosen = data.draw(st.lists(st.sampled_from(points), min_size=1, max_size=3))
    order = data.draw(st.permutations(range(len(regular) + len(chosen))))
    x = np.array(regular + chosen)[list(order)]
    keep = np.array([True] * len(regular) + [False] * len(chosen))[list(order)]
    _, args = check(MASKED[name], x, keep, seeded=False)
    assert np.all(args[0].dval[~keep] == 0)


@numba.njit
def root_sum(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += math.sqrt(x[i]) + x[i] ** 0.0 + math.hypot(x[i], 0.0)
    return s


def test_conventions_at_isolated_singular_points():
    """Enzyme's convention: sqrt and hypot have derivative 0 at 0; d/dx x^0 is 0 everywhere."""
    import adcore
    (gx,) = adcore.gradient(adcore.Reverse, root_sum, np.array([0.0, 0.25]))
    np.testing.assert_allclose(gx, [0.0, 0.5 / 0.5 + 1.0])


@numba.njit
def pair_distances(x):
    n = x.shape[0]
    d = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            d[i, j] = math.sqrt((x[i] - x[j]) ** 2)
    s = 0.0
    for i in range(n):
        for j in range(n):
            if i != j:                      # the zero diagonal is computed, then skipped
                s += d[i, j]
    return s


def test_distance_matrix_with_a_skipped_zero_diagonal():
    x = np.array([0.3, 1.2, -0.5, 0.9])
    check(pair_distances, x)
