"""Property-based tests: random kernels (Python source compiled with Numba, C compiled by
clang), random views and aliased arguments, differentiated by adcore and checked against
central finite differences.  ``ADCORE_PROPERTY_EXAMPLES`` sets the examples per test."""
import functools
import itertools
import math
import os

import numba
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import adcore
from adcore import Duplicated, Reverse
from c_ir import c_to_llvm
from fdcheck import check

EXAMPLES = int(os.environ.get("ADCORE_PROPERTY_EXAMPLES", 25))


def examples(n=EXAMPLES):
    """Hypothesis settings for ``n`` examples (each compiles a kernel: no deadline)."""
    return settings(max_examples=n, deadline=None, suppress_health_check=[HealthCheck.too_slow])

UNARY = ["math.sin({})", "math.cos({})", "math.tanh({})", "math.atan({})",
         "math.sqrt(1.0 + ({}) ** 2)", "math.exp(math.sin({}))", "math.log(1.0 + ({}) ** 2)",
         "({}) ** 3", "({}) ** 2", "-({})"]
BINARY = ["({} + {})", "({} - {})", "({} * {})", "({} / (1.5 + math.cos({})))"]
LEAVES = ["x[i]", "y[i]", "a", "math.tanh(s)", "0.5", "x[(i + 1) % n]"]


def expressions(depth, leaves, unary, binary):
    """Expression trees (as source text) of at most ``depth`` levels."""
    leaf = st.sampled_from(leaves)
    if depth == 0:
        return leaf
    sub = expressions(depth - 1, leaves, unary, binary)
    return st.one_of(
        leaf,
        st.tuples(st.sampled_from(unary), sub).map(lambda t: t[0].format(t[1])),
        st.tuples(st.sampled_from(binary), sub, sub).map(lambda t: t[0].format(t[1], t[2])),
    )


EXPR = expressions(3, LEAVES, UNARY, BINARY)


@st.composite
def statements(draw, indent="        "):
    kind = draw(st.sampled_from(["acc", "out", "inplace", "branch", "inner", "while"]))
    e1, e2 = draw(EXPR), draw(EXPR)
    if kind == "acc":
        return [f"{indent}s += {e1}"]
    if kind == "out":
        return [f"{indent}out[i] = {e1}"]
    if kind == "inplace":
        return [f"{indent}x[i] = 0.5 * x[i] + 0.3 * {e1}"]
    if kind == "branch":
        return [f"{indent}if {e1} > 0.1:", f"{indent}    s += {e2}",
                f"{indent}else:", f"{indent}    s -= 0.5 * {e2}"]
    if kind == "inner":
        return [f"{indent}for j in range(i + 1):", f"{indent}    s += 0.1 * math.sin(y[j] * {e1})"]
    return [f"{indent}k = 0", f"{indent}while k < i % 3:",
            f"{indent}    s = 0.9 * s + 0.1 * {e1}", f"{indent}    k += 1"]


@st.composite
def kernels(draw):
    body = list(itertools.chain.from_iterable(draw(st.lists(statements(), min_size=1, max_size=4))))
    returns = draw(st.booleans())
    lines = ["def kernel(x, y, a, out):", "    n = x.shape[0]", "    s = 0.0",
             "    for i in range(n):"] + body
    lines += ["    return s + out.sum()" if returns else "    out[0] += s"]
    return "\n".join(lines)


_compiled = {}


def compile_kernel(source):
    if source not in _compiled:
        scope = {"math": __import__("math"), "np": np}
        exec(source, scope)
        _compiled[source] = numba.njit(scope["kernel"])
    return _compiled[source]


def check_source(source, seed):
    """Compile ``kernel(x, y, a, out)`` from source and check it at random inputs."""
    rng = np.random.default_rng(seed)
    x, y = rng.uniform(-1, 1, 4), rng.uniform(-1, 1, 4)
    a = float(rng.uniform(-1, 1))
    try:
        check(compile_kernel(source), x, y, a, np.zeros(4), rtol=1e-4, atol=1e-6, seed=seed)
    except AssertionError:
        print(source)
        raise


@examples()
@given(source=kernels(), seed=st.integers(0, 2 ** 16))
def test_random_kernels_against_finite_differences(source, seed):
    check_source(source, seed)


# -- kernels written with array expressions and temporaries ---------------------------------
ARRAY_UNARY = ["np.sin({})", "np.cos({})", "np.tanh({})", "np.exp(np.sin({}))",
               "np.sqrt(1.0 + ({}) ** 2)", "({}) ** 2", "np.log1p(({}) ** 2)"]
ARRAY_BINARY = ["({} + {})", "({} - {})", "({} * {})", "({} / (2.0 + np.cos({})))"]
ARRAY_LEAVES = ["x", "y", "a * x", "t", "x[::-1]", "np.ones_like(x) * a"]


ARRAY_EXPR = expressions(2, ARRAY_LEAVES, ARRAY_UNARY, ARRAY_BINARY)


@st.composite
def array_statements(draw):
    kind = draw(st.sampled_from(["temp", "sum", "mean", "out", "inplace", "copy", "dot"]))
    e = draw(ARRAY_EXPR)
    return {
        "temp": [f"    t = {e}"],
        "sum": [f"    s += np.sum({e} * x)"],
        "mean": [f"    s += np.mean({e})"],
        "out": [f"    out[:] = {e}"],
        "inplace": [f"    x[:] = 0.5 * x + 0.25 * {e}"],
        "copy": ["    u = t.copy()", "    u[0] = 0.5", f"    s += np.sum(u * {e})"],
        "dot": [f"    s += np.dot({e}, y)"],
    }[kind]


@st.composite
def array_kernels(draw):
    body = list(itertools.chain.from_iterable(draw(st.lists(array_statements(), min_size=1, max_size=4))))
    lines = ["def kernel(x, y, a, out):", "    s = 0.0", "    t = x * y"] + body
    lines += ["    return s + np.sum(out * y)"]
    return "\n".join(lines)


@examples()
@given(source=array_kernels(), seed=st.integers(0, 2 ** 16))
def test_random_array_kernels_against_finite_differences(source, seed):
    check_source(source, seed)


# -- BLAS calls with temporaries reused across them -----------------------------------------------
BLAS_STATEMENTS = [
    ["    t = A @ t"], ["    t = A.T @ t"], ["    t = np.tanh(A @ t)"], ["    s += t @ t"],
    ["    s += np.dot(x, A @ t)"], ["    M = A @ B"], ["    M = M @ A"], ["    M = M.T @ M"],
    ["    s += np.sum(M * B)"], ["    s += np.linalg.norm(t)"], ["    s += np.sum(M @ t)"],
    ["    x[:] = 0.5 * x + 0.1 * (A @ t)"], ["    t = M @ (A @ x)"], ["    s += np.sum(t * x)"],
]


@st.composite
def blas_kernels(draw):
    body = list(itertools.chain.from_iterable(
        draw(st.lists(st.sampled_from(BLAS_STATEMENTS), min_size=1, max_size=5))))
    lines = ["def kernel(A, B, x):", "    s = 0.0", "    t = x.copy()", "    M = A.copy()"] + body
    return "\n".join(lines + ["    return s + np.sum(t) + np.sum(M)"])


@examples(max(5, EXAMPLES // 2))
@given(source=blas_kernels(), seed=st.integers(0, 2 ** 16))
def test_random_blas_kernels_against_finite_differences(source, seed):
    rng = np.random.default_rng(seed)
    A, B, x = 0.5 * rng.standard_normal((3, 3)), rng.standard_normal((3, 3)), rng.standard_normal(3)
    try:
        check(compile_kernel(source), A, B, x, rtol=1e-4, atol=1e-6, seed=seed)
    except AssertionError:
        print(source)
        raise


# -- views of every stride kind, and arguments that alias ------------------------------------------
@numba.njit
def view_kernel(v, w):
    s = 0.0
    for i in range(v.shape[0]):
        for j in range(v.shape[1]):
            s += math.sin(v[i, j]) * w[j]
            v[i, j] = 0.5 * v[i, j] + 0.25 * v[i, j] ** 2 * w[j]
    return s


@st.composite
def views(draw):
    """A 2-D view of a random base: slices with any step (negative too), slices of slices,
    transposes and Fortran order."""
    base = np.random.default_rng(draw(st.integers(0, 99))).uniform(-1, 1, (7, 8))
    if draw(st.booleans()):
        base = np.asfortranarray(base)
    view = base
    for _ in range(draw(st.integers(1, 2))):
        index = []
        for n in view.shape:
            step = draw(st.sampled_from([1, 2, -1, -2, 3]))
            start = draw(st.integers(0, max(0, n // 2 - 1)))
            index.append(slice(start, None, step) if step > 0 else slice(n - 1 - start, None, step))
        view = view[tuple(index)]
    return view.T if draw(st.booleans()) else view


@examples()
@given(view=views())
def test_views_of_every_stride_kind(view):
    w = np.linspace(-1, 1, view.shape[1])
    check(view_kernel, view, w)


@numba.njit
def overlapping_update(x, y):
    s = 0.0
    for i in range(x.shape[0]):
        y[i] = math.tanh(x[i]) + 0.5 * y[i]
        s += x[i] * y[i]
    return s


@examples()
@given(n=st.integers(1, 5), i=st.integers(0, 3), j=st.integers(0, 3), seed=st.integers(0, 99))
def test_aliased_operands_with_mirrored_shadows(n, i, j, seed):
    """x = z[i:i+n] and y = z[j:j+n] overlap (or not): the derivative with respect to all of
    z, through shadows dz[i:i+n] and dz[j:j+n], matches central differences."""
    def whole(z):
        z = z.copy()
        return overlapping_update.py_func(z[i:i + n], z[j:j + n])
    z0 = np.random.default_rng(seed).uniform(-1, 1, 9)
    z, dz = z0.copy(), np.zeros(9)
    adcore.autodiff(Reverse, overlapping_update, Duplicated(z[i:i + n], dz[i:i + n]),
                    Duplicated(z[j:j + n], dz[j:j + n]))
    h = 1e-6
    expected = [(whole(z0 + h * e) - whole(z0 - h * e)) / (2 * h) for e in np.eye(9)]
    np.testing.assert_allclose(dz, expected, rtol=1e-5, atol=1e-7)


# -- C kernels with variable-length arrays (dynamic allocas) ----------------------------------------
C_UNARY = ["sin({})", "cos({})", "tanh({})", "exp(0.5 * {})", "sqrt(1.0 + {} * {})", "log(2.0 + {})"]


@st.composite
def c_expressions(draw, depth=2):
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(["x[i]", "x[(i + 1) % n]", "t[i]", "a"]))
    f = draw(st.sampled_from(C_UNARY))
    inner = draw(c_expressions(depth - 1))
    other = draw(c_expressions(depth - 1))
    return draw(st.sampled_from([f.format(inner, inner), f"({inner} * {other})", f"({inner} - {other})"]))


@st.composite
def vla_kernels(draw):
    first, second = draw(c_expressions()).replace("t[i]", "x[i]"), draw(c_expressions())
    inner = draw(st.booleans())          # the VLA inside a loop: stacksave/stackrestore per round
    body = ["double t[n];", "for (int i = 0; i < n; i++) t[i] = " + first + ";",
            "for (int i = 0; i < n; i++) s += " + second + " * t[i];"]
    if inner:
        body = ["for (int r = 0; r < 2; r++) {"] + body + ["}"]
    return ("#include <math.h>\ndouble kernel(const double *x, int n, double a) {\n"
            "double s = 0.0;\n" + "\n".join(body) + "\nreturn s;\n}\n")


@functools.cache
def clang_kernel(source, opt):
    return adcore.from_llvm(c_to_llvm(source, opt), "kernel")


@examples(max(5, EXAMPLES // 2))
@given(source=vla_kernels(), opt=st.sampled_from(["-O0", "-O1", "-O2"]), seed=st.integers(0, 99))
def test_random_c_kernels_with_variable_length_arrays(source, opt, seed):
    rng = np.random.default_rng(seed)
    try:
        check(clang_kernel(source, opt), rng.uniform(-1, 1, 5), 5, float(rng.uniform(-1, 1)),
              rtol=1e-4, atol=1e-6)
    except AssertionError:
        print(source)
        raise
