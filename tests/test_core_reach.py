"""Kernels as people write and declare them (issue 11): print of differentiated floats,
declared signatures, Numba's options, Numba's own errors wrapped, slice stores, and
refusals that name the Python construct and its line."""
import inspect
import math
import os

import numba
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from numba.typed import List

import adcore
from adcore import Active, CompileError, Const, Duplicated, Reverse, UnsupportedError
from fdcheck import check

EXAMPLES = int(os.environ.get("ADCORE_PROPERTY_EXAMPLES", 25))


def line_of(f, text):
    """The source line of ``f`` containing ``text``."""
    lines, start = inspect.getsourcelines(getattr(f, "py_func", f))
    return start + next(k for k, line in enumerate(lines) if text in line)


# -- print: run once in the forward pass, no reverse ---------------------------------------
@numba.njit
def _printed_twice(v):
    print("inner", v)
    return 2.0 * v


@numba.njit
def print_sum(x, a):
    s = 0.0
    for i in range(x.size):
        s += a * x[i] ** 2
        print(i, s, np.float32(s))
    print("total", s)
    return _printed_twice(s)


def test_print_of_differentiated_floats_runs_once_and_differentiates(capfd):
    x = np.array([0.5, -1.5, 2.0])
    capfd.readouterr()
    (gx, ga), value = adcore.gradient(adcore.ReverseWithPrimal, print_sum, x, 0.7)
    out = capfd.readouterr().out.splitlines()
    partial = np.cumsum(0.7 * x ** 2)
    assert out == [f"{i} {partial[i]} {np.float32(partial[i])}" for i in range(3)] + \
        [f"total {partial[-1]}", f"inner {partial[-1]}"]
    np.testing.assert_allclose(gx, 2 * 0.7 * 2 * x, rtol=1e-12)
    np.testing.assert_allclose(ga, 2 * np.sum(x ** 2), rtol=1e-12)
    np.testing.assert_allclose(value, 2 * partial[-1], rtol=1e-12)


def test_print_against_finite_differences(capfd):
    check(print_sum, np.array([0.25, 1.5, -0.75]), 1.3)


# -- declared signatures ---------------------------------------------------------------------
@numba.njit("f8(f8[:], f8)")
def declared(x, a):
    s = 0.0
    for i in range(x.size):
        s += math.sin(a * x[i]) * x[i]
    return s


@numba.njit(["float64(float64)", "float32(float32)"])
def declared_scalar(a):
    return a * a * math.exp(a)


@numba.njit("f4(f4[::1], f4[::1])", cache=True)
def declared_dot(x, y):
    s = np.float32(0)
    for i in range(x.size):
        s += x[i] * y[i] * y[i]
    return s


@numba.njit("f8(f8[:], f8, i8)")
def declared_defaults(x, tol=1e-3, maxiter=3):
    s = 0.0
    for k in range(maxiter):
        for i in range(x.size):
            s += tol * x[i] ** 3
    return s


def test_declared_layout_a_accepts_c_and_strided_arrays():
    check(declared, np.array([0.5, -1.0, 2.0]), 0.3)
    check(declared, np.linspace(-1, 1, 8)[::3], 0.3)


def test_declared_signature_list_picks_the_matching_overload():
    (g64,) = adcore.gradient(Reverse, declared_scalar, 0.5)
    np.testing.assert_allclose(g64, (2 * 0.5 + 0.5 ** 2) * math.exp(0.5), rtol=1e-12)
    (g32,) = adcore.autodiff(Reverse, declared_scalar, Active(np.float32(0.5)))
    assert g32 != g64 and float(np.float32(g32)) == g32     # computed by the float32 overload
    np.testing.assert_allclose(g32, (2 * 0.5 + 0.5 ** 2) * math.exp(0.5), rtol=1e-6)


def test_declared_float32_with_cache():
    x, y = np.arange(1, 4, dtype=np.float32), np.array([0.5, -1, 2], np.float32)
    gx, gy = adcore.gradient(Reverse, declared_dot, x, y)
    assert gx.dtype == np.float32
    np.testing.assert_allclose(gx, y * y, rtol=1e-6)
    np.testing.assert_allclose(gy, 2 * x * y, rtol=1e-6)


def test_declared_signature_with_default_arguments():
    x = np.array([0.5, -1.0, 2.0])
    (gx,) = adcore.gradient(Reverse, declared_defaults, x)
    np.testing.assert_allclose(gx, 3 * 1e-3 * 3 * x ** 2, rtol=1e-12)
    check(declared_defaults, x, 0.01, 2)


def test_declared_signature_mismatch_lists_the_signatures():
    with pytest.raises(adcore.ActivityError, match=r"declares the signatures \(array\(float32, 1d, C\), "
                                                   r"array\(float32, 1d, C\)\) -> float32; none accepts"):
        adcore.gradient(Reverse, declared_dot, np.ones(3), np.ones(3))


# -- Numba's options -----------------------------------------------------------------------
def _mixed(x, a):
    s = 0.0
    for i in range(x.size):
        s += math.sqrt(x[i] * x[i] + a) / (1.0 + x[i] ** 2) + math.exp(-x[i]) * a
    return s


@pytest.mark.parametrize("decorate", [
    numba.njit(fastmath=True), numba.njit(fastmath={"nnan", "ninf", "nsz", "reassoc"}),
    numba.njit(locals={"s": numba.float64}), numba.njit(cache=True), numba.njit(boundscheck=True),
    numba.njit(error_model="numpy"), numba.jit(nopython=True)],
    ids=["fastmath", "fastmath-flags", "locals", "cache", "boundscheck", "error_model", "jit"])
def test_numba_options(decorate):
    check(decorate(_mixed), np.array([0.3, -1.2, 2.0, 0.0]), 0.7)


def _sqrt_at_zero(x):
    return x[1] + x[2] * math.sqrt(x[0]) + x[2] * math.log(x[0])


@pytest.mark.parametrize("fastmath", [False, True])
def test_fastmath_keeps_zero_safe_adjoints(fastmath):
    # d/dx0 = x2 (1/(2 sqrt x0) + 1/x0) with x2 = 0: zero (adjoint 0 times an infinite
    # partial is 0, as in Enzyme); nnan/ninf on the primal must not change that
    (g,) = adcore.gradient(Reverse, numba.njit(fastmath=fastmath)(_sqrt_at_zero), np.array([0.0, 1.0, 0.0]))
    assert g[0] == 0.0 and g[1] == 1.0 and g[2] == -np.inf


# -- Numba's own errors --------------------------------------------------------------------
@numba.njit
def _adds(x, y):
    return (x + y).sum()


@numba.njit
def _attribute(x):
    return x.no_such_attribute


def test_numba_errors_are_compile_errors():
    assert issubclass(CompileError, adcore.ADError)
    with pytest.raises(CompileError, match="expected a numba.njit function .* lambda x: np.sum"):
        adcore.gradient(Reverse, np.sum, np.ones(3))
    with pytest.raises(CompileError, match=r"argument 1 is None.*\n.*nopython"):
        adcore.gradient(Reverse, _adds, np.ones(2), None)
    with pytest.raises(CompileError, match="argument 1: Numba cannot pass a value of type object"):
        adcore.gradient(Reverse, _adds, np.ones(2), object())
    with pytest.raises(CompileError, match="Unknown attribute 'no_such_attribute'") as info:
        adcore.primal_ir(_attribute, np.ones(2))
    assert "\x1b[" not in str(info.value)


# -- refusals in the user's words ----------------------------------------------------------
@numba.njit(parallel=True)
def parallel_loop(x):
    s = 0.0
    for i in numba.prange(x.size):
        s += x[i] ** 2
    return s


@numba.njit
def list_of_arrays(x):
    arrays = [x, 2.0 * x]
    s = 0.0
    for a in arrays:
        s += a.sum()
    return s


@numba.njit
def typed_list(x):
    values = List()
    for i in range(x.size):
        values.append(x[i])
    return values[0]


@numba.njit
def dict_of_floats(x):
    d = {}
    for i in range(x.size):
        d[i] = x[i]
    return d[0]


@numba.njit
def print_array(x):
    y = 2.0 * x
    print(y)
    return y.sum()


@numba.njit
def slice_store_2d(A, out):
    out[:, :] = A * 2.0
    return out.sum()


@pytest.mark.parametrize("kernel, words, line", [
    (parallel_loop, "a parallel=True loop (prange.*parallel=False", "numba.prange"),
    (list_of_arrays, r"a list \(for example a list of arrays\).*tuple of arrays", "arrays = ["),
    (typed_list, r"a typed list \(numba.typed.List\)", "values = List()"),
    (dict_of_floats, "a dict.*arrays indexed by integers", "d = {}"),
    (print_array, "print of a non-float object", "print(y)"),
    (slice_store_2d, r"a slice assignment of an array of 2 or more dimensions.*out\[i, :\] = A\[i\]",
     "out[:, :] ="),
])
def test_refusals_name_the_construct_and_line(kernel, words, line):
    args = [np.ones((2, 3)), np.zeros((2, 3))] if kernel is slice_store_2d else [np.arange(3.0)]
    with pytest.raises(UnsupportedError, match=words) as info:
        adcore.gradient(Reverse, kernel, *args)
    assert info.value.location == ("test_core_reach.py", line_of(kernel, line))
    assert "%" not in str(info.value)            # no LLVM value names


def test_list_argument_is_named():
    with pytest.raises(UnsupportedError, match=r"a list .*\(argument 1\)"):
        adcore.gradient(Reverse, numba.njit(lambda x, l: x.sum() + l[0]), np.ones(2), Const([1.0]))


# -- slice stores: arrays of 1-4 dimensions, any steps and fixed indices ---------------------
@numba.njit
def store_1(x, out, i, j, k, a, b, s):
    out[a:b:s] = np.sin(x) * 2.0
    return (out * out).sum()


@numba.njit
def store_2_last(x, out, i, j, k, a, b, s):
    out[i, a:b:s] = np.sin(x) * 2.0
    return (out * out).sum()


@numba.njit
def store_2_first(x, out, i, j, k, a, b, s):
    out[a:b:s, i] = np.sin(x) * 2.0
    return (out * out).sum()


@numba.njit
def store_3_middle(x, out, i, j, k, a, b, s):
    out[i, a:b:s, j] = np.sin(x) * 2.0
    return (out * out).sum()


@numba.njit
def store_4_last(x, out, i, j, k, a, b, s):
    out[i, j, k, a:b:s] = np.sin(x) * 2.0
    return (out * out).sum()


STORES = {1: [(store_1, 0)], 2: [(store_2_last, 1), (store_2_first, 0)], 3: [(store_3_middle, 1)],
          4: [(store_4_last, 3)]}     # ndim -> (kernel, sliced axis)


@st.composite
def slice_stores(draw):
    ndim = draw(st.integers(1, 4))
    kernel, axis = draw(st.sampled_from(STORES[ndim]))
    shape = tuple(draw(st.integers(1, 3)) if d != axis else draw(st.integers(2, 6)) for d in range(ndim))
    n = shape[axis]
    step = draw(st.sampled_from([1, 2, 3, -1, -2]))
    a, b = draw(st.integers(-n, n)), draw(st.integers(-n, n))
    fixed = [draw(st.integers(-shape[d], shape[d] - 1)) for d in range(ndim) if d != axis] + [0, 0, 0]
    strided = draw(st.booleans())
    return kernel, shape, axis, fixed[:3], (a, b, step), strided


@settings(max_examples=max(5, EXAMPLES // 2), deadline=None)
@given(slice_stores(), st.integers(0, 2 ** 16))
def test_slice_stores_against_finite_differences(case, seed):
    kernel, shape, axis, (i, j, k), (a, b, s), strided = case
    rng = np.random.default_rng(seed)
    m = len(range(*slice(a, b, s).indices(shape[axis])))
    x = rng.standard_normal(m)
    big = rng.standard_normal(tuple(2 * d for d in shape))
    out = big[tuple(slice(None, None, 2) for _ in shape)] if strided else big[tuple(slice(d) for d in shape)].copy()
    check(kernel, x, out, i, j, k, a, b, s)
