"""Differential tests (issue 10): random programs through both engines must agree.

(a) Random numpy-style kernels, generated as Python source: the same Python function is
    differentiated by the LLVM engine (``adcore.gradient`` on ``numba.njit(fn)``) and by the
    tape engine (``adcore.tape.gradient(fn)``); the two must agree to 1e-7, and the LLVM
    result must match central finite differences, so that both being wrong the same way
    fails too.
(b) Random small models (``Chain`` of ``Dense`` with random sizes, activations, biases,
    dtypes) under random losses: ``layers.gradient`` on the model (tape) and on
    ``Duplicated(model)`` (LLVM) must agree, and float64 models must match finite
    differences.

A disagreement is a failure, never a skip.  What the generator leaves out, and why:
- ``w[i] += v`` (and any element update of an array after an element of it was read):
  the tape refuses it with ``UnsupportedError`` (reading ``w[i]`` counts as a view of
  ``w``), so element loops write ``w[i] = ...`` into a fresh array without reading it, and
  accumulation into an intermediate uses whole-array ``w += ...`` / ``w[:] = ...``.
- In-place updates of the arguments: the tape refuses them; the LLVM engine's handling of
  overwritten arguments is covered against finite differences in test_core_property.py.
- ``math.*`` on array elements: the tape refuses them (it used to drop their gradient
  silently: the regression test at the end), so the kernels use ``np.sin`` etc. on scalars.
- float32: Numba and NumPy promote ``python_float * float32_array`` differently (float64
  against float32), and Numba's ``@`` refuses mixed dtypes, so the same source would not be
  the same program in both engines; the kernels are float64 (models cover float32).
- Singular points: ``log`` and ``sqrt`` only of ``1 + e**2``, division only by
  ``2 + cos(e)``, ``max`` only of ``e + 0.1 * x`` (no ties), values squashed before they
  are stored in a temporary (no overflow).

The example budget comes from ``ADCORE_PROPERTY_EXAMPLES`` as in the other property tests;
examples are derandomised so that CI runs the same programs every time.
"""
import math
import os

import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, note, settings, strategies as st

import adcore
import layers as L
from adcore import Duplicated, Reverse, tape
from adcore.tree import leaves
from fdcheck import fd_gradient
from layers import Chain, Dense
from reverse.test_core_property import expressions
from test_duplicated import ACTIVATIONS, assert_same

EXAMPLES = int(os.environ.get("ADCORE_PROPERTY_EXAMPLES", 25))


def budget(share):
    """Hypothesis settings for ``share`` of the example budget (at least 2 examples).
    No shrinking: every step recompiles a kernel, so shrinking takes many minutes; a failing
    program is printed whole (``note``) and reduced by hand into a regression test."""
    return settings(max_examples=max(2, round(EXAMPLES * share)), deadline=None,
                    derandomize=True, database=None, phases=(Phase.explicit, Phase.generate),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def assert_close(actual, expected, rtol, what):
    """Gradient trees (tuples of arrays/floats) agree to ``rtol``, relative to each leaf's
    largest entry."""
    assert len(actual) == len(expected), what
    for k, (a, e) in enumerate(zip(actual, expected)):
        scale = max(float(np.max(np.abs(e))), 1.0)
        np.testing.assert_allclose(a, e, rtol=rtol, atol=rtol * scale,
                                   err_msg=f"{what}: argument {k}")


# -- (a) random kernels ----------------------------------------------------------------------
# kernel(x, y, A, B, a): x, y of length n, A (n, n), B (m, n), a a float.
# Temporaries: t, u (length n), v (length m), M (n, n), w (length n, rebuilt per statement).
PROLOGUE = ["def kernel(x, y, A, B, a):",
            "    n = x.shape[0]",
            "    s = 0.0",
            "    t = x * y",
            "    u = np.sin(x) + y",
            "    v = B @ y",
            "    M = np.tanh(A)"]
EPILOGUE = ["    return s + np.sum(t * u)"]

UNARY = ["np.sin({})", "np.cos({})", "np.tanh({})", "np.exp(np.sin({}))",
         "np.log(1.0 + ({}) ** 2)", "np.sqrt(1.0 + ({}) ** 2)", "({}) ** 2", "-({})"]
BINARY = ["({} + {})", "({} - {})", "({} * {})", "({} / (2.0 + np.cos({})))"]
SQUASH = ["np.tanh({})", "np.sin({})", "np.cos({})", "({0}) / (1.0 + ({0}) ** 2)"]
VECTOR_LEAVES = ["x", "y", "t", "u", "(a * x)", "(A @ x)", "(A @ t)", "(M @ u)", "(B.T @ v)",
                 "(x[::-1] * y)"]          # parenthesised: u * B.T @ v would be (u * B.T) @ v
SCALAR_LEAVES = ["x[i]", "y[i]", "t[i]", "u[i]", "a", "x[(i + 1) % n]", "0.5 * s"]
MATRICES = ["np.tanh(A @ M)", "np.tanh(M @ M)", "np.sin(M) * A", "0.5 * (M + A.T)",
            "np.tanh(a * A + M)", "np.tanh(np.outer(t, u))"]
MATRIX_SCALARS = ["np.sum(M * A)", "np.mean(M @ M)", "np.max(M + 0.1 * A)", "np.sum(M @ A.T)"]

VEXPR = expressions(2, VECTOR_LEAVES, UNARY, BINARY)
SEXPR = expressions(2, SCALAR_LEAVES, UNARY, BINARY)


@st.composite
def statements(draw):
    """One statement of a kernel, as lines of source (indented for the kernel's body)."""
    kind = draw(st.sampled_from(sorted(STATEMENTS)))
    e1, e2 = draw(VEXPR), draw(VEXPR)
    s1, s2 = draw(SEXPR), draw(SEXPR)
    squash = draw(st.sampled_from(SQUASH))
    mat, mscalar = draw(st.sampled_from(MATRICES)), draw(st.sampled_from(MATRIX_SCALARS))
    lines = STATEMENTS[kind](e1=e1, e2=e2, s1=s1, s2=s2, mat=mat, mscalar=mscalar,
                             sq1=squash.format(e1), sq2=squash.format(e2))
    return ["    " + line for line in lines]


STATEMENTS = {
    "temp t": lambda sq1, **_: [f"t = {sq1}"],
    "temp u": lambda sq1, **_: [f"u = 0.5 * u + {sq1}"],
    "temp v": lambda e1, **_: [f"v = np.tanh(B @ ({e1}))"],
    "matrix": lambda mat, **_: [f"M = {mat}"],
    "matrix reduction": lambda mscalar, **_: [f"s += {mscalar}"],
    "sum": lambda e1, **_: [f"s += np.sum({e1})"],
    "mean": lambda e1, **_: [f"s += np.mean({e1})"],
    "max": lambda e1, **_: [f"s += np.max({e1} + 0.1 * x)"],
    "dot": lambda e1, e2, **_: [f"s += ({e1}) @ ({e2})"],
    # BLAS results read only by other BLAS calls (issue 10, case 5)
    "blas square": lambda e1, **_: [f"w = A @ ({e1})", "s += w @ w"],
    "blas chain": lambda e1, **_: [f"s += np.sum(M @ (A @ ({e1})))"],
    "blas rectangular": lambda e1, **_: [f"w = B.T @ (B @ ({e1}))", "s += (B @ w) @ v + np.sum(w * x)"],
    "blas twice": lambda sq1, **_: [f"w = {sq1}", "s += np.sum(A @ w) + w @ (A @ w)"],
    # in-place updates of intermediates
    "overwrite": lambda e1, **_: ["w = x * 0.0", f"w[:] = {e1}", "s += w @ y"],
    "accumulate": lambda e1, sq2, **_: ["w = t * 1.0", f"w += {e1}", f"w *= {sq2}",
                                         "s += np.sum(w * u)"],
    "element loop": lambda s1, **_: ["w = x * 0.0", "for i in range(n):",
                                     f"    w[i] = {s1}", "s += np.sum(np.tanh(A @ w))"],
    "scalar loop": lambda s1, **_: ["for i in range(n):", f"    s += {s1}"],
    "triangular loop": lambda s1, **_: ["for i in range(n):", "    for j in range(i + 1):",
                                        f"        s += A[i, j] * {s1}"],
    "while loop": lambda s1, **_: ["i = 0", "while i < n and s < 3.0:",
                                   f"    s = 0.9 * s + {s1}", "    i += 1"],
    # branches on data
    "branch": lambda e1, s1, s2, **_: [f"if np.sum({e1}) > 0.0:", f"    s += np.sum({e1} * x)",
                                       "else:", f"    s -= 0.5 * np.sum({e1} * y)"],
    "loop branch": lambda s1, s2, **_: ["for i in range(n):", "    if t[i] > u[i]:",
                                        f"        s += {s1}", "    else:",
                                        f"        s -= 0.5 * {s2}"],
}


@st.composite
def kernels(draw):
    body = [line for stmt in draw(st.lists(statements(), min_size=1, max_size=4)) for line in stmt]
    return "\n".join(PROLOGUE + body + EPILOGUE)


def python_kernel(source):
    scope = {"np": np}
    exec(source, scope)
    return scope["kernel"]


def random_inputs(seed, n, m):
    """Arguments ``(x, y, A, B, a)`` of a kernel, entries in [-1, 1]."""
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, n), rng.uniform(-1, 1, n), rng.uniform(-1, 1, (n, n)),
            rng.uniform(-1, 1, (m, n)), float(rng.uniform(-1, 1)))


def check_both_engines(source, points):
    """The LLVM engine and the tape agree on ``kernel``'s gradient, and match finite
    differences, at each of ``points`` (argument tuples; one compile serves them all)."""
    fn = python_kernel(source)
    compiled = numba.njit(fn)
    for inputs in points:
        copy = lambda: [v.copy() if isinstance(v, np.ndarray) else v for v in inputs]
        g_llvm = adcore.gradient(Reverse, compiled, *copy())
        g_tape = tape.gradient(fn, *copy())
        assert_close(g_llvm, g_tape, 1e-7, "LLVM engine vs tape")
        assert_close(g_llvm, fd_gradient(fn, copy(), {}), 1e-5, "LLVM engine vs finite differences")


POINTS = st.lists(st.tuples(st.integers(0, 2 ** 16), st.integers(2, 5), st.integers(1, 4)),
                  min_size=2, max_size=2)


@budget(0.24)
@given(source=kernels(), points=POINTS)
def test_random_kernels_both_engines_agree(source, points):
    """Each program at two random sizes and inputs: x, y of length n, A (n, n), B (m, n)."""
    note(source)
    check_both_engines(source, [random_inputs(*p) for p in points])


# Every statement kind in every run, whatever the budget: the kinds in groups, one kernel each.
FIXED = dict(e1="np.tanh(A @ t) * (u + a * x)", e2="np.exp(np.sin(B.T @ v)) - (x[::-1] * y)",
             s1="np.sin(x[i]) * t[(i + 1) % n] + a", s2="np.sqrt(1.0 + (u[i] - 0.5 * s) ** 2)",
             mat="np.tanh(M @ M)", mscalar="np.mean(M @ M)",
             sq1="np.tanh(np.tanh(A @ t) * (u + a * x))", sq2="np.sin(x * y + t)")
KINDS = sorted(STATEMENTS)
GROUPS = [KINDS[k::4] for k in range(4)]


@pytest.mark.parametrize("kinds", GROUPS, ids=[",".join(g).replace(" ", "-") for g in GROUPS])
def test_every_statement_kind_both_engines_agree(kinds):
    body = ["    " + line for kind in kinds for line in STATEMENTS[kind](**FIXED)]
    check_both_engines("\n".join(PROLOGUE + body + EPILOGUE),
                       [random_inputs(3, 4, 3), random_inputs(4, 2, 1)])


# -- (b) random models ----------------------------------------------------------------------
# loss(m, x, y, p, b): y a regression target, p a probability vector per sample, b 0/1 labels.
LOSSES = {
    "mse": lambda h, y, p, b, agg: L.mse(h, y, agg=agg),
    "mae": lambda h, y, p, b, agg: L.mae(h, y, agg=agg),
    "huber": lambda h, y, p, b, agg: L.huber_loss(2 * h, y, agg=agg),
    "crossentropy": lambda h, y, p, b, agg: L.crossentropy(L.softmax(h), p, agg=agg),
    "logitcrossentropy": lambda h, y, p, b, agg: L.logitcrossentropy(h, p, agg=agg),
    "binarycrossentropy": lambda h, y, p, b, agg: L.binarycrossentropy(L.sigmoid(h), b, agg=agg),
    "logitbinarycrossentropy": lambda h, y, p, b, agg: L.logitbinarycrossentropy(h, b, agg=agg),
    "kldivergence": lambda h, y, p, b, agg: L.kldivergence(L.softmax(h), p, agg=agg),
}
AGGREGATES = {"mean": np.mean, "sum": np.sum}


@st.composite
def models(draw):
    sizes = draw(st.lists(st.integers(1, 5), min_size=2, max_size=4))
    acts = draw(st.lists(st.sampled_from(ACTIVATIONS), min_size=len(sizes) - 1,
                         max_size=len(sizes) - 1))
    bias = draw(st.lists(st.booleans(), min_size=len(sizes) - 1, max_size=len(sizes) - 1))
    dtype = draw(st.sampled_from([np.float64, np.float32]))
    seed = draw(st.integers(0, 2 ** 16))
    return Chain(*[Dense(i, o, act, bias=b, rng=seed + k, dtype=dtype)
                   for k, (i, o, act, b) in enumerate(zip(sizes, sizes[1:], acts, bias))])


def model_data(model, batch, seed):
    nin = model.layers[0].weight.shape[1]
    nout = model.layers[-1].weight.shape[0]
    dtype = model.layers[0].weight.dtype
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(batch + (nin,)).astype(dtype)
    y = rng.standard_normal(batch + (nout,)).astype(dtype)
    p = rng.uniform(0.1, 1.0, batch + (nout,)).astype(dtype)
    p /= p.sum(-1, keepdims=True)
    b = (rng.random(batch + (nout,)) > 0.5).astype(dtype)
    return x, y, p, b


def model_fd_gradient(loss, model, data, eps=1e-6):
    """Central differences of ``loss(model, *data)`` w.r.t. every parameter, as a list in
    the order of ``adcore.tree.leaves``."""
    grads = []
    for _, arr in leaves(model):
        g = np.zeros(arr.shape)
        for idx in np.ndindex(arr.shape):
            old = arr[idx]
            arr[idx] = old + eps
            plus = float(loss(model, *data))
            arr[idx] = old - eps
            minus = float(loss(model, *data))
            arr[idx] = old
            g[idx] = (plus - minus) / (2 * eps)
        grads.append(g)
    return grads


@budget(0.16)
@given(model=models(), loss_name=st.sampled_from(sorted(LOSSES)),
       agg=st.sampled_from(sorted(AGGREGATES)), batch=st.sampled_from([(), (1,), (3,)]),
       seed=st.integers(0, 2 ** 16))
def test_random_models_both_engines_agree(model, loss_name, agg, batch, seed):
    note(f"{model!r}\nloss={loss_name} agg={agg} batch={batch}")
    aggregate, head = AGGREGATES[agg], LOSSES[loss_name]

    def loss(m, x, y, p, b):
        return head(m(x), y, p, b, aggregate)

    data = model_data(model, batch, seed)
    g_tape = L.gradient(loss, model, *data)[0]
    g_llvm = L.gradient(loss, Duplicated(model), *data)[0]
    float64 = model.layers[0].weight.dtype == np.float64
    assert_same(g_tape, g_llvm, rtol=1e-7 if float64 else 2e-4)
    if float64:
        expected = model_fd_gradient(loss, model, data)
        assert_close([a for _, a in leaves(g_tape)], expected, 1e-5, "tape vs finite differences")


# -- disagreements found by the generator, reduced --------------------------------------------
def implicit_float(x):
    return math.sin(x[0]) + x[1] * math.exp(x[1])


def test_math_functions_on_tracked_elements_agree_or_refuse():
    """Found by this file: the tape used to drop the gradient through ``math.*`` of tracked
    elements (implicit ``__float__``: d/dx0 = 0).  It must differentiate or refuse."""
    x = np.array([0.5, -0.75])
    expected = [np.cos(x[0]), (1 + x[1]) * np.exp(x[1])]                       # closed form
    (g_llvm,) = adcore.gradient(Reverse, numba.njit(implicit_float), x.copy())
    np.testing.assert_allclose(g_llvm, expected, rtol=1e-14)
    try:
        (g_tape,) = tape.gradient(implicit_float, x.copy())
    except adcore.ADError:
        return                                                     # a refusal is correct too
    np.testing.assert_allclose(g_tape, expected, rtol=1e-14)
