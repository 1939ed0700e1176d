"""Calls differentiated as calls: recursive functions (self, double, mutual; Numba and C
through clang) get an augmented forward and a reverse, checked against central finite
differences and closed forms."""
import math
import re

import llvmlite.binding as llvm
import numba
import numpy as np
import pytest
from hypothesis import given, strategies as st

import adcore
from adcore import Active, Const, Duplicated, Reverse, UnsupportedError
from c_ir import c_to_llvm
from fdcheck import check, check_forward
from test_core_property import EXAMPLES, examples


# -- Numba: double recursion over an array ----------------------------------------------------
@numba.njit
def fib(x, n):
    if n < 2:
        return x[0] * x[n]
    return fib(x, n - 1) + fib(x, n - 2)


def leaves(n):
    """(leaves reading x[1], leaves reading x[0]) of fib(x, n)."""
    return (1, 0) if n == 1 else (0, 1) if n == 0 else tuple(
        a + b for a, b in zip(leaves(n - 1), leaves(n - 2)))


def test_double_recursion_finite_differences():
    check(fib, np.array([0.7, 1.3, 0.4]), 6)


def test_call_slots_stay_on_the_stack():
    """fib's return and exception slots (and their shadows) stay in the frames of its
    augmented forward and reverse: nothing goes to the arena, no address is pushed."""
    x = np.array([0.7, 1.3, 0.4])
    ir = adcore.compile_gradient(Reverse, fib, Duplicated(x, np.zeros(3)), 6).adjoint_ir
    aug = re.search(r"^define internal i32 @\S+\.aug\.0\(.*?^}", ir, re.M | re.S).group(0)
    assert "@ad.arena.alloc(" not in aug and "@ad.push.ptr(" not in aug


@numba.njit
def squares(x, n):
    """The reverse of each call needs the result its callee stored in the return slot."""
    if n < 1:
        return math.sin(x[0])
    r = squares(x, n - 1)
    return 0.5 * r * r + x[n % x.shape[0]] * r


@numba.njit
def squares_in_loop(x, n):
    """One pair of slots serves every iteration's call."""
    s = 0.0
    for i in range(n):
        s += math.cos(s) * squares(x, i % 4)
    return s


@pytest.mark.parametrize("kernel", [squares, squares_in_loop])
def test_results_of_calls_read_by_the_reverse(kernel):
    check(kernel, np.array([0.3, -0.7, 1.1]), 6)


# -- memory nothing writes is loaded again; memory something writes is kept ----------------
@numba.njit
def power_chain(x, n):
    """Reads x only: its reverse loads x[0] and x[n] again."""
    if n < 1:
        return x[0] * x[0]
    return math.sin(x[n % x.shape[0]]) * power_chain(x, n - 1)


@numba.njit
def written_after(x, n):
    """The kernel writes x between the calls: the first call's loads must be kept."""
    r = power_chain(x, n)
    x[0] = 0.5 * x[1] + r
    return r + power_chain(x, n)


@numba.njit
def square_into(a, b, n):
    """Writes b, reads a: where a and b are one array, a is written too."""
    if n < 0:
        return 0.0
    t = a[n]
    b[n] = t * t
    return a[n] * a[(n + 1) % a.shape[0]] + square_into(a, b, n - 1)


@numba.njit
def aliased(x, n):
    return square_into(x, x, n) + x[0]


@numba.njit
def two_arrays(x, y, n):
    return square_into(x, y, n) + power_chain(x, n)


def test_read_only_memory_is_loaded_again():
    x = np.array([0.7, 1.3, 0.4])
    ir = adcore.compile_gradient(Reverse, power_chain, Duplicated(x, np.zeros(3)), 5).adjoint_ir
    aug = re.search(r"^define internal i32 @\S+\.aug\.0\(.*?^}", ir, re.M | re.S).group(0)
    assert "@ad.push.double" not in aug          # (which way a branch went is still pushed)
    check(power_chain, x, 5)


@pytest.mark.parametrize("kernel,args", [
    (written_after, (np.array([0.7, 1.3, 0.4]), 4)),
    (aliased, (np.array([0.7, -1.3, 0.4, 0.9]), 3)),
    (two_arrays, (np.array([0.7, -1.3, 0.4, 0.9]), np.array([0.2, 0.5, -0.3, 0.1]), 3)),
])
def test_written_memory_is_kept(kernel, args):
    check(kernel, *args)


def test_shared_memory_is_written_memory():
    """two_arrays given one array twice (distinct arrays no longer): x is written through y."""
    x0 = np.array([0.7, -1.3, 0.4, 0.9])
    x, dx = x0.copy(), np.zeros(4)
    adcore.autodiff(Reverse, two_arrays, Duplicated(x, dx), Duplicated(x, dx), 3)

    def shared(v):
        v = v.copy()
        return two_arrays(v, v, 3)

    eps = 1e-6
    expected = [(shared(x0 + eps * e) - shared(x0 - eps * e)) / (2 * eps) for e in np.eye(4)]
    np.testing.assert_allclose(dx, expected, rtol=1e-6, atol=1e-8)


@examples(EXAMPLES)
@given(st.floats(-2, 2), st.floats(-2, 2), st.integers(0, 9))
def test_double_recursion_closed_form(x0, x1, n):
    # fib(x, n) = c1 x0 x1 + c0 x0^2: d/dx0 = c1 x1 + 2 c0 x0, d/dx1 = c1 x0
    dx = np.zeros(2)
    adcore.autodiff(Reverse, fib, Duplicated(np.array([x0, x1]), dx), Const(n))
    c1, c0 = leaves(n)
    np.testing.assert_allclose(dx, [c1 * x1 + 2 * c0 * x0, c1 * x0], rtol=1e-12, atol=1e-12)


# -- a recursive callee with a loop, writing the array it is given ------------------------------
@examples(EXAMPLES)
@given(st.floats(-2, 2), st.floats(-2, 2), st.floats(-2, 2), st.floats(-2, 2), st.integers(0, 9))
def test_double_recursion_forward_closed_form(x0, x1, t0, t1, n):
    # the tangent of c1 x0 x1 + c0 x0^2 along (t0, t1): c1 (t0 x1 + x0 t1) + 2 c0 x0 t0
    c1, c0 = leaves(n)
    dy = adcore.autodiff(adcore.Forward, fib, Duplicated(np.array([x0, x1]), np.array([t0, t1])), Const(n))
    np.testing.assert_allclose(dy, c1 * (t0 * x1 + x0 * t1) + 2 * c0 * x0 * t0, rtol=1e-12, atol=1e-12)


def test_hvp_of_a_recursive_function_is_refused():
    with pytest.raises(UnsupportedError, match="the gradient of a recursive function: hvp cannot"):
        adcore.hvp(fib, np.array([0.7, 1.3, 0.4]), np.ones(3), 5)


@numba.njit
def prefix(x, i, w):
    if i == 0:
        return w * x[0]
    s = 0.0
    for j in range(i):
        s += x[j] * x[i]
    x[i] = s * w
    return math.sin(prefix(x, i - 1, w * 0.9)) + x[i]


@numba.njit
def prefix_twice(x, w):
    return prefix(x, 3, w) * prefix(x, 2, w + 1.0)


def test_recursive_callee_with_loop_writes_its_array():
    check(prefix, np.random.default_rng(0).uniform(0.2, 0.9, 5), 4, 0.7)
    check(prefix_twice, np.random.default_rng(1).uniform(0.2, 0.9, 5), 0.7)


@pytest.mark.parametrize("lanes", [1, 3])
def test_forward_mode_through_recursion(lanes):
    # each callee gets one tangent function per activity pattern, its array's shadows passed in
    check_forward(fib, np.array([0.7, 1.3, 0.4]), 6, lanes=lanes)
    check_forward(prefix, np.random.default_rng(0).uniform(0.2, 0.9, 5), 4, 0.7, lanes=lanes)
    check_forward(prefix_twice, np.random.default_rng(1).uniform(0.2, 0.9, 5), 0.7, lanes=lanes)
    check_forward(three_sites, np.array([0.5, 0.7, 0.2]), np.array([0.3, 0.4, 0.9]), 1.3, lanes=lanes)


# -- mutual recursion carrying a float ----------------------------------------------------------
@numba.njit
def is_even(v, n):
    if n == 0:
        return v
    return is_odd(math.sin(v) * 1.1, n - 1)


@numba.njit
def is_odd(v, n):
    if n == 0:
        return v * v
    return is_even(v + 0.5 * v * v, n - 1)


@pytest.mark.parametrize("n", [5, 6])
def test_mutual_recursion(n):
    check(is_even, 0.3, n)


# -- one callee, several sites, different activities ---------------------------------------------
@numba.njit
def scaled(x, n, a):
    if n < 2:
        return a * x[n]
    return scaled(x, n - 1, a) + scaled(x, n - 2, a * a)


@numba.njit
def three_sites(x, y, a):
    return scaled(x, 3, a) + scaled(y, 2, 1.5) + scaled(x, 2, 2.0) * scaled(y, 3, a)


def test_callee_from_several_sites():
    x, y = np.array([0.5, 0.7, 0.2]), np.array([0.3, 0.4, 0.9])
    check(three_sites, x, y, 1.3)
    ir = adcore.adjoint_ir(Reverse, three_sites, Duplicated(x, np.zeros(3)), Const(y), Active(1.3))
    augmented = re.findall(r"^define internal \S+ @(\S+\.aug\.\d+)\(", ir, re.M)
    # patterns: (x shadowed, a active), (y const, constant a), (x shadowed, constant a),
    # (y const, a active): each generated once, however many sites and recursive calls
    assert len(augmented) == len(set(augmented)) == 4


# -- calls inside loops: what a loop pushes after a call is popped before the call's reverse ----
@numba.njit
def calls_in_loop(x, w):
    s = 0.0
    for i in range(x.shape[0]):
        t = math.sin(s) * w + x[i]
        u = scaled(x, i % 3, t)
        s = t * u + math.cos(u) * s
        if u > 0.3:
            s += scaled(x, 1, s * s)
    return s


@numba.njit
def writes_in_loop(x, y):
    s = 0.0
    for i in range(x.shape[0]):
        y[i] = fib(x, i % 4) * x[i]
        s += y[i] * y[i]
    return s


@numba.njit
def tree(x, n, w):
    if n == 0:
        return w * x[0]
    s = 0.0
    for i in range(2):                  # the recursive call inside a loop
        s += math.sin(tree(x, n - 1, w * x[i + 1])) * x[i]
    return s


def test_calls_inside_loops():
    x = np.random.default_rng(3).uniform(0.1, 0.9, 7)
    check(calls_in_loop, x, 0.8)
    check(writes_in_loop, x, np.zeros(7))
    check(tree, x[:4].copy(), 3, 0.7)


# -- exceptions ---------------------------------------------------------------------------------
@numba.njit
def descend(x, n, w):
    if n < 0:
        raise ValueError("negative depth")
    if n == 0:
        return w * x[0]
    return x[n] * descend(x, n - 2, w * x[n])


def test_exception_in_callee_propagates_and_shadows_untouched():
    x, dx = np.array([0.5, 0.7, 0.9, 1.1]), np.array([1.0, 2.0, 3.0, 4.0])
    with pytest.raises(ValueError, match="negative depth"):
        adcore.autodiff(Reverse, descend, Duplicated(x, dx), Const(3), Active(0.5))
    np.testing.assert_array_equal(dx, [1.0, 2.0, 3.0, 4.0])
    _, _, dw = adcore.autodiff(Reverse, descend, Duplicated(x, dx), Const(2), Active(0.5))
    # descend(x, 2, w) = w x0 x2^2
    np.testing.assert_allclose(dx, [1.0 + 0.5 * 0.81, 2.0, 3.0 + 2 * 0.5 * 0.5 * 0.9, 4.0])
    np.testing.assert_allclose(dw, 0.5 * 0.81)


# -- refusals name the Python function ----------------------------------------------------------
@numba.njit
def gamma_chain(v, n):
    if n == 0:
        return math.gamma(v)
    return gamma_chain(v * 1.1, n - 1)


@numba.njit
def calls_gamma_chain(v):
    return gamma_chain(v, 3) * 2.0


def test_refusal_names_the_callee():
    with pytest.raises(UnsupportedError, match=r"Python function 'test_core_callees\.gamma_chain'") as err:
        adcore.gradient(Reverse, calls_gamma_chain, 1.5)
    assert "_ZN" not in str(err.value)


# -- C through clang ----------------------------------------------------------------------------
C_SOURCE = r"""
#include <math.h>
double rsum(const double *x, long n) {
    if (n == 0) return 0.0;
    return x[n - 1] * x[n - 1] + sin(rsum(x, n - 1));
}
static double odd(double v, int n);
static double even(double v, int n) {
    if (n == 0) return v;
    return odd(v * 1.3 + cos(v), n - 1);
}
static double odd(double v, int n) {
    if (n == 0) return v * v;
    return even(sqrt(v * v + 1.0), n - 1);
}
double parity(double v, int n) { return even(v, n); }
double fibc(const double *x, int n) {
    if (n < 2) return x[0] * x[n];
    return fibc(x, n - 1) + fibc(x, n - 2);
}
static void fill(double *out, const double *x, int n) {
    if (n == 0) return;
    out[n - 1] = x[n - 1] * x[0];
    fill(out, x, n - 1);
    out[n - 1] += out[n - 1] * x[n - 1];
}
double usefill(const double *x, double *tmp, int n) {
    fill(tmp, x, n);
    double s = 0;
    for (int i = 0; i < n; i++) s += tmp[i] * tmp[i];
    return s;
}
"""


def clang_ir(opt):
    return c_to_llvm(C_SOURCE, opt)


X6 = np.random.default_rng(2).uniform(0.2, 0.9, 6)
C_CASES = [("rsum", lambda: (X6.copy(), 6)), ("parity", lambda: (0.4, 5)),
           ("fibc", lambda: (X6[:3].copy(), 6)), ("usefill", lambda: (X6.copy(), np.zeros(6), 6))]


@pytest.mark.parametrize("opt", ["-O0", "-O1"])
@pytest.mark.parametrize("name,args", C_CASES, ids=[c[0] for c in C_CASES])
def test_c_recursion(opt, name, args):
    f = adcore.from_llvm(clang_ir(opt), name)
    check(f, *args())
    check_forward(f, *args(), lanes=2)          # a float result comes back with its tangents


# -- the inlining decision (a stage test on hand-written IR) -----------------------------------
CALL_GRAPH = """
define double @leaf(double %v) {
  %r = fmul double %v, %v
  ret double %r
}
define double @self(double %v, i64 %n) {
entry:
  %stop = icmp eq i64 %n, 0
  br i1 %stop, label %done, label %more
more:
  %m = sub i64 %n, 1
  %r = call double @self(double %v, i64 %m)
  %s = call double @leaf(double %r)
  ret double %s
done:
  ret double %v
}
define double @ping(double %v, i64 %n) {
  %r = call double @pong(double %v, i64 %n)
  ret double %r
}
define double @pong(double %v, i64 %n) {
  %stop = icmp eq i64 %n, 0
  br i1 %stop, label %done, label %more
more:
  %m = sub i64 %n, 1
  %r = call double @ping(double %v, i64 %m)
  ret double %r
done:
  ret double %v
}
define double @kernel(double %v, i64 %n) {
  %a = call double @self(double %v, i64 %n)
  %b = call double @ping(double %a, i64 %n)
  %c = call double @leaf(double %b)
  ret double %c
}
"""


def test_recursive_functions_stay_calls_others_are_inlined():
    from adcore.frontend.callgraph import call_graph, kept_as_calls
    from adcore.frontend.cleanup import clean
    module = llvm.parse_assembly(CALL_GRAPH)
    assert call_graph(module)["kernel"] == {"self", "ping", "leaf"}
    assert kept_as_calls(module) == {"self", "ping", "pong"}
    cleaned = clean(llvm.parse_assembly(CALL_GRAPH), "kernel")
    defined = {fn.name for fn in cleaned.functions if not fn.is_declaration}
    assert "leaf" not in defined and {"kernel", "self", "ping", "pong"} <= defined
    kernel = str(cleaned.get_function("kernel"))
    assert "@self(" in kernel and "@ping(" in kernel and "@leaf(" not in kernel
