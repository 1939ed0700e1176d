"""Property-based test: random kernels, written as Python source and compiled with Numba,
differentiated by adcore and checked against central finite differences."""
import itertools
import os

import numba
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from fdcheck import check

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


@settings(max_examples=int(os.environ.get("ADCORE_PROPERTY_EXAMPLES", 25)), deadline=None, suppress_health_check=[HealthCheck.too_slow])
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


@settings(max_examples=int(os.environ.get("ADCORE_PROPERTY_EXAMPLES", 25)), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(source=array_kernels(), seed=st.integers(0, 2 ** 16))
def test_random_array_kernels_against_finite_differences(source, seed):
    check_source(source, seed)
