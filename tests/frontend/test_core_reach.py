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
from numba.experimental import jitclass
from numba.typed import List

import adcore
import adcore.frontend.capture  # noqa: F401  (loads the capture hook first: the declared kernels below compile once)
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


@numba.njit("f8(f8[:], i8)")
def declared_int(x, n):
    return (x ** 2).sum() * n


def test_declared_int_parameter_refuses_a_float():
    with pytest.raises(adcore.ActivityError, match="argument 1 is a float but declared_int declares it int64"):
        adcore.gradient(Reverse, declared_int, np.ones(3), 3.0)
    (gx, gn) = adcore.gradient(Reverse, declared_int, np.ones(3), 3)
    np.testing.assert_allclose(gx, 6.0)
    assert gn is None


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
def _parallel_callee(x):
    s = 0.0
    for i in numba.prange(x.size):
        s += x[i] ** 2
    return s


@numba.njit
def parallel_loop(x):
    return 2.0 * _parallel_callee(x)


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


@pytest.mark.parametrize("kernel, words, line", [
    (parallel_loop, r"a call to a parallel=True function.*parallel=False version", "_parallel_callee(x)"),
    (list_of_arrays, r"a list \(for example a list of arrays\).*tuple of arrays", "arrays = ["),
    (typed_list, r"a typed list \(numba.typed.List\)", "values = List()"),
    (dict_of_floats, "a dict.*arrays indexed by integers", "d = {}"),
    (print_array, "print of a non-float object", "print(y)"),
])
def test_refusals_name_the_construct_and_line(kernel, words, line):
    with pytest.raises(UnsupportedError, match=words) as info:
        adcore.gradient(Reverse, kernel, np.arange(3.0))
    assert info.value.location == ("test_core_reach.py", line_of(kernel, line))
    assert "%" not in str(info.value)            # no LLVM value names


@numba.njit
def diagonal(x):
    A = np.zeros((x.size, x.size))
    for i in range(x.size):
        A[i, i] = x[i] + 2.0
    return A


@numba.njit
def solve_sum(x):
    return np.linalg.solve(diagonal(x), x).sum()


@numba.njit
def det_of_diagonal(x):
    return np.linalg.det(diagonal(x))


def _sum_of(function):
    @numba.njit
    def kernel(x):
        s = 0.0
        for i in range(x.size):
            s += function(x[i] + 1.0)
        return s
    return kernel


log_gamma_sum, gamma_sum = _sum_of(math.lgamma), _sum_of(math.gamma)


@pytest.mark.parametrize("kernel, words, line", [
    (solve_sum, r"np.linalg.solve \(compiled to a call of numba_xgesv\).*register_rule", "np.linalg.solve"),
    (det_of_diagonal, r"np.linalg.inv, det.*numba_xxgetrf.*register_rule", "np.linalg.det"),
    (log_gamma_sum, r"math.lgamma \(compiled to a call of lgamma\).*register_rule", "s += function("),
    (gamma_sum, r"math.gamma \(compiled to a call of numba_gamma\)", "s += function("),
])
def test_calls_without_a_rule_are_named_as_numpy_and_math_functions(kernel, words, line):
    with pytest.raises(UnsupportedError, match=words) as info:
        adcore.gradient(Reverse, kernel, np.arange(1.0, 4.0))
    assert info.value.location == ("test_core_reach.py", line_of(kernel, line))
    assert "%" not in str(info.value)            # no LLVM value names


@numba.njit(debug=True)
def square_debug(v):
    return v * v


@numba.njit(debug=True)
def debug_kernel(x):
    s = 0.0
    for i in range(x.size):
        s += square_debug(x[i])
    return s + np.sum(np.sin(x * x + 1.0))      # an array expression: a function of its own


def test_kernels_compiled_with_debug_info_differentiate():
    """debug=True marks every Numba function noinline; adcore inlines them all the same."""
    x = np.linspace(0.2, 1.4, 5)
    closed_form = 2 * x + 2 * x * np.cos(x * x + 1.0)
    np.testing.assert_allclose(adcore.gradient(Reverse, debug_kernel, x)[0], closed_form, rtol=1e-12)
    v = np.cos(np.arange(5.0))
    tangent = adcore.autodiff(adcore.Forward, debug_kernel, Duplicated(x, v))
    assert tangent == pytest.approx(closed_form @ v, rel=1e-12)


def test_list_argument_is_named():
    with pytest.raises(UnsupportedError, match=r"a list .*\(argument 1\)"):
        adcore.gradient(Reverse, numba.njit(lambda x, l: x.sum() + l[0]), np.ones(2), Const([1.0]))


@jitclass([("w", numba.float64[:])])
class Weights:
    def __init__(self, w):
        self.w = w


def test_jitclass_argument_is_named():
    with pytest.raises(UnsupportedError, match=r"a jitclass instance \(argument 0\).*as arguments") as info:
        adcore.gradient(Reverse, numba.njit(lambda m, x: (m.w * x).sum()), Const(Weights(np.ones(2))), np.ones(2))
    assert "%" not in str(info.value)


# -- slice stores: arrays of 1-4 dimensions, any steps and fixed indices ---------------------
@numba.njit
def slice_zoo(A, B, C, out, k):
    C[:, :] = np.tanh(A @ B)              # a BLAS result into a full slice
    out[0, :, ::-1] = C                   # 2-D into a 3-D slice
    out[1:, :, k] = C * out[0, 0, 0]      # into a slice with a fixed last index
    out[:, ::2, 0] = C[0, 1]              # a scalar into a strided slice
    return (C * C).sum() + (out * out).sum()


def test_slice_stores_of_many_kinds():
    rng = np.random.default_rng(3)
    check(slice_zoo, rng.standard_normal((3, 2)), rng.standard_normal((2, 3)), rng.standard_normal((3, 3)),
          rng.standard_normal((4, 3, 3)), 2)


# declared with layout A: one compile serves contiguous and strided views alike
@numba.njit("f8(f8[:], f8[:], i8, i8, i8)")
def store_1d(x, out, a, b, s):
    out[a:b:s] = np.sin(x) * 2.0
    return (out * out).sum()


@numba.njit("f8(f8[:, :], f8[:, :, :, :], i8, i8, i8, i8, i8, i8, i8, i8)")
def store_4d(x, out, i, j, a, b, s, c, d, t):
    out[i, a:b:s, j, c:d:t] = np.sin(x) * 2.0
    return (out * out).sum()


@st.composite
def slices(draw, n):
    step = draw(st.sampled_from([1, 2, 3, -1, -2]))
    return draw(st.integers(-n - 1, n + 1)), draw(st.integers(-n - 1, n + 1)), step


def strided_view(rng, shape, steps):
    """A random array of ``shape`` seen through a view with ``steps`` (layout A)."""
    base = rng.standard_normal(tuple(n * abs(s) for n, s in zip(shape, steps)))
    return base[tuple(slice(None, None, s) for s in steps)]


@settings(max_examples=max(5, EXAMPLES // 2), deadline=None)
@given(st.data(), st.integers(0, 2 ** 16))
def test_slice_stores_against_finite_differences(data, seed):
    rng = np.random.default_rng(seed)
    if data.draw(st.booleans()):                                  # out[a:b:s] = ...
        n = data.draw(st.integers(1, 6))
        a, b, s = data.draw(slices(n))
        m = len(range(*slice(a, b, s).indices(n)))
        out = strided_view(rng, (n,), data.draw(st.tuples(st.sampled_from([1, 2, -1]))))
        check(store_1d, rng.standard_normal(m), out, a, b, s)
    else:                                                         # out[i, a:b:s, j, c:d:t] = ...
        shape = data.draw(st.tuples(*[st.integers(1, 3)] * 4))
        i, j = data.draw(st.integers(-shape[0], shape[0] - 1)), data.draw(st.integers(-shape[2], shape[2] - 1))
        (a, b, s), (c, d, t) = data.draw(slices(shape[1])), data.draw(slices(shape[3]))
        m = (len(range(*slice(a, b, s).indices(shape[1]))), len(range(*slice(c, d, t).indices(shape[3]))))
        out = strided_view(rng, shape, data.draw(st.tuples(*[st.sampled_from([1, 2, -1])] * 4)))
        check(store_4d, rng.standard_normal(m), out, i, j, a, b, s, c, d, t)
