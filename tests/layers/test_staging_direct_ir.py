"""Staged programs written straight to LLVM IR (``layers.staging.direct_ir``): the values
and gradients of Numba's compile of the same source, bit for bit for snippets of each
construct and for the seed model (for random MLPs the loss bit for bit, the gradient but
for the order of adcore's adjoint sums), and no Numba compile in a fresh process;
anything outside the subset is left to Numba."""
import math
import os
import pathlib
import subprocess
import sys

import numba
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import layers
from adcore import Duplicated, ReverseWithPrimal, autodiff
from adcore.tree import leaves
from layers import vector_kernels
from layers.staging import direct_ir, program as staged_program

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = min(int(os.environ.get("ADCORE_PROPERTY_EXAMPLES", "25")), 10)
SCOPE = {"np": np, "math": math, "K": layers.kernels, "S": layers.kernels.S,
         "vector_tanh_float32": vector_kernels.vector_op("tanh", np.float32),
         "vector_exp_float64": vector_kernels.vector_op("exp", np.float64),
         "vector_tanh_float32_first5": vector_kernels.vector_op("tanh", np.float32, 5),
         "vector_exp_float64_first3": vector_kernels.vector_op("exp", np.float64, 3)}


def _both(source, *arrays):
    """``((value, grads) by the translation, (value, grads) by Numba)`` of ``program``."""
    argtypes = [numba.typeof(a) for a in arrays]
    direct = direct_ir.translated(source, SCOPE, argtypes)
    assert direct is not None, "not translated"
    scope = dict(SCOPE)
    exec(source, scope)
    jitted = numba.njit(error_model="numpy")(scope["program"])
    out = []
    for f in (direct, jitted):
        args = [Duplicated(a.copy(), np.zeros_like(a)) if a.dtype.kind == "f" else a for a in arrays]
        _, value = autodiff(ReverseWithPrimal, f, *args)
        out.append((value, [a.dval for a in args if isinstance(a, Duplicated)]))
    return out


def _same_bits(a, b):
    assert np.asarray(a).dtype == np.asarray(b).dtype
    assert np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True), (a, b)


SNIPPETS = {
    # float32 arithmetic with int and float64 literals, true division of ints, negation
    "arithmetic": ("""
def program(A, D, W):
    acc = 0.0
    for i in range(1, 6):
        acc += A[i] * 2 + A[i - 1] / A[i] - D[i] * 0.5
        W[i] = -A[i] * A[i] + i / 3
    W[0] = acc / 7
    return W[0] + np.float32(acc)
""", np.float32, np.float64, np.float32),
    # an accumulator of float32 values, while loops, negative indices, empty ranges
    "loops": ("""
def program(A, W):
    m = A[0]
    for l in range(1, 7):
        v = A[l]
        if v > m:
            m = v
    e = 0
    while e + 2 <= 6:
        W[e] = A[-1 - e] * m
        e += 2
    for k in range(5, 2):
        W[k] = 1.0
    s = 0.0
    for k in range(6):
        s += np.float32(W[k] * A[k])
    return s
""", np.float32, np.float32),
    # conditional expressions unifying float32 and float64, math functions, abs, isfinite
    "math": ("""
def program(A, D, W):
    for i in range(6):
        shift = A[i] if math.isfinite(A[i]) else 0.0
        W[i] = math.exp(A[i] - shift) + math.log(abs(D[i]) + 1.0) + math.tanh(A[i]) \
            + math.sqrt(D[i] * D[i]) + math.exp(i)
        if A[i] >= 0:
            W[i] = W[i] * A[i]
        else:
            W[i] = 0.0
    return W[0] + W[5]
""", np.float32, np.float64, np.float32),
    # njit helpers Numba inlines (a closure's float32 constant, early returns)
    "inlined": ("""
def program(A, D, W):
    for i in range(6):
        W[i] = K.sigmoid_float32(A[i] * 3) + K.sigmoid_float64(D[i]) + S.softplus(A[i]) \
            - S.sigmoid(A[i] - 1)
    return W[2]
""", np.float32, np.float64, np.float32),
    # the vector kernels of layers.vector_kernels, whole and the first elements of one
    "vectors": ("""
def program(A, D, W, V):
    vector_tanh_float32(W, 0, A, 1)
    vector_tanh_float32_first5(W, 8, A, 9)
    vector_exp_float64(V, 2, D, 0)
    vector_exp_float64_first3(V, 6, D, 4)
    acc = 0.0
    for i in range(11):
        acc += W[i] * V[i]
    return acc
""", np.float32, np.float64, np.float32, np.float64),
}


@pytest.mark.parametrize("name", sorted(SNIPPETS))
def test_each_construct_computes_what_numba_computes(name):
    source, *dtypes = SNIPPETS[name]
    rng = np.random.default_rng(len(name))
    arrays = [(rng.standard_normal(12) + 0.1).astype(t) for t in dtypes]
    (value, grads), (numba_value, numba_grads) = _both(source, *arrays)
    _same_bits(value, numba_value)
    for g, h in zip(grads, numba_grads):
        _same_bits(g, h)


@pytest.mark.parametrize("source", [
    "def program(A, W):\n    K.dot_into(A, A, W)\n    return W[0]\n",            # a callee
    "def program(A, W):\n    x = A[0]\n    x = 1.0\n    return x\n",            # a type change
    "def program(A, W):\n    W[0] += A[0]\n    return W[0]\n",                  # item update
    "def program(A, W):\n    W[0] = A[3 // 2]\n    return W[0]\n",              # floor division
    "def program(A, W):\n    for i in range(0, 4, 2):\n        W[i] = A[i]\n    return W[0]\n",
    "def program(A, W):\n    return A[0] ** 2\n",
    "def program(A, W):\n    W[0] = A[0] if A[0] > 0 and A[1] > 0 else 0.0\n    return W[0]\n",
    "def program(A, W):\n    return float('inf')\n",
    "def program(A, W):\n    return S.logaddexp(A[0], A[1])\n",            # two arguments
])
def test_a_construct_outside_the_subset_is_left_to_numba(source):
    arrays = [numba.typeof(np.zeros(4, np.float32))] * 2
    assert direct_ir.translated(source, SCOPE, arrays) is None


def _mlp(sizes, act, dtype, seed):
    dense = [layers.Dense(a, b, act if k < len(sizes) - 2 else layers.identity, rng=seed + k)
             for k, (a, b) in enumerate(zip(sizes, sizes[1:]))]
    model = layers.Chain(*dense)
    return model if dtype == np.float32 else layers.f64(model)


def _staged_gradients(loss, model, *data):
    """``{path: (program kind, loss, gradient leaves)}`` for the translated and the Numba path."""
    out = {}
    for path in (True, False):
        direct_ir.ENABLED = path
        try:
            staged_program._cache.clear()
            value, grads = layers.withgradient(loss, Duplicated(model), *data)
            entry, _ = staged_program.lookup(loss, (Duplicated(model),) + data)
        finally:
            direct_ir.ENABLED = True
            staged_program._cache.clear()
        out[path] = (type(entry.program), value, [np.array(a) for _, a in leaves(grads[0])])
    return out


def _same_sums(a, b):
    """Equal but for the order of adjoint sums, which adcore leaves to LLVM (their
    ``reassoc`` flag, ``adcore.ir.writer.SUM``): a few units in the last place of the largest."""
    assert a.dtype == b.dtype
    eps = np.finfo(a.dtype).eps
    assert np.allclose(a, b, rtol=8 * eps, atol=8 * eps * float(np.max(np.abs(b), initial=0))), (a, b)


def _check_identical(loss, model, *data, exact=True):
    """The kind of program the translation made; the loss bit for bit as Numba's path
    computes it, and the gradient too (``exact``) or but for the order of its sums."""
    got = _staged_gradients(loss, model, *data)
    (kind, value, grads), (numba_kind, numba_value, numba_grads) = got[True], got[False]
    assert numba_kind is not direct_ir.DirectProgram
    _same_bits(value, numba_value)
    assert len(grads) == len(numba_grads) > 0
    for g, h in zip(grads, numba_grads):
        (_same_bits if exact else _same_sums)(g, h)
    return kind


def test_the_seed_model_is_translated_with_numbas_gradient():
    model = _mlp([1, 23, 1], layers.tanh, np.float32, 0)
    x = np.linspace(-1, 1, 41, dtype=np.float32)[None, :].T
    y = np.zeros((41, 1), np.float32)
    kind = _check_identical(lambda m, x, y: layers.mse(m(x), y), model, x, y)
    assert kind is direct_ir.DirectProgram


def test_a_classifier_with_logitcrossentropy_is_translated():
    model = _mlp([5, 9, 7, 4], layers.relu, np.float64, 3)
    model.layers[1].activation = layers.sigmoid
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((7, 5)), np.eye(4)[rng.integers(0, 4, 7)]
    kind = _check_identical(lambda m, x, y: layers.logitcrossentropy(m(x), y), model, x, y)
    assert kind is direct_ir.DirectProgram


def test_a_program_with_a_large_product_is_compiled_by_numba():
    model = _mlp([64, 80, 2], layers.tanh, np.float32, 5)      # 80 * 64 * 80 products: BLAS
    x, y = np.ones((80, 64), np.float32), np.zeros((80, 2), np.float32)
    kind = _check_identical(lambda m, x, y: layers.mse(m(x), y), model, x, y)
    assert kind is not direct_ir.DirectProgram


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(st.integers(1, 11), min_size=2, max_size=4),
       st.sampled_from(["tanh", "relu", "identity", "softplus", "sigmoid", "elu", "swish", "gelu"]),
       st.sampled_from([np.float32, np.float64]), st.integers(1, 9),
       st.sampled_from(["mse", "logitcrossentropy"]))
def test_staged_mlps_get_numbas_loss_and_gradient(sizes, act, dtype, batch, loss_name):
    model = _mlp(sizes, getattr(layers, act), dtype, batch)
    rng = np.random.default_rng(batch)
    x = rng.standard_normal((batch, sizes[0])).astype(dtype)
    y = rng.standard_normal((batch, sizes[-1])).astype(dtype)
    loss_fn = getattr(layers, loss_name)
    _check_identical(lambda m, x, y: loss_fn(m(x), y), model, x, y, exact=False)


FIRST_GRADIENT = """
import numpy as np, numba, layers
from adcore import Duplicated
from numba.core.base import BaseContext
refreshed = []
refresh = BaseContext.refresh
BaseContext.refresh = lambda self: (refreshed.append(1), refresh(self))[1]
model = layers.Chain(layers.Dense(1, 23, layers.tanh, rng=0), layers.Dense(23, 1, rng=1))
x, y = np.linspace(-1, 1, 41, dtype=np.float32)[:, None], np.zeros((41, 1), np.float32)
g = layers.gradient(lambda m, x, y: layers.mse(m(x), y), Duplicated(model), x, y)
from adcore.tree import leaves
assert all(np.isfinite(a).all() for _, a in leaves(g[0]))
assert not refreshed, "Numba's compiler started"
import optim
dup = Duplicated(model)
data = [(x[k], y[k]) for k in range(0, 41, 5)]
losses = layers.train(lambda m, x, y: layers.mse(m(x), y), dup, data, optim.setup(optim.Adam(), dup))
assert len(losses) == 9 and np.isfinite(losses).all()
assert not refreshed, "Numba's compiler started for train's loop"
"""


def test_a_translated_programs_first_gradient_starts_no_numba_compile():
    """Numba's first compile in a process refreshes its target context (0.25-0.35 s): not
    for a translated program's first gradient, nor for the first ``train`` call after it
    (Adam's kernel translated too, ``direct_ir.kernel_ir``)."""
    run = subprocess.run([sys.executable, "-c", FIRST_GRADIENT], capture_output=True, text=True,
                         timeout=300, cwd=ROOT, env=dict(os.environ, ADCORE_CACHE="0",
                                                         PYTHONPATH=str(ROOT)))
    assert run.returncode == 0, run.stderr
