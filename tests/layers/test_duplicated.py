"""Duplicated(model): gradients from the LLVM-level engine agree with the tape engine, and
the Flux/Enzyme conventions (zero, aux outputs, shared shadow memory, printing) hold."""
import math
import re

import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import adcore
import layers as L
from adcore import Const, Duplicated
from adcore.tree import leaves
from layers import Chain, Dense, Embedding, gradient, kernel_call, only, withgradient
from layers.staging import program
from layers.staging.trace import ValueDependentError

RNG = np.random.default_rng(0)
ACTIVATIONS = [L.identity, L.relu, L.leakyrelu, L.elu, L.gelu, L.swish, L.softplus, L.sigmoid,
               L.tanh, L.softmax, L.logsoftmax, L.logsigmoid]


def assert_same(g_tape, g_dup, rtol=2e-4):
    """Two gradient trees have the same structure and agree to float32 tolerance."""
    assert [p for p, _ in leaves(g_tape)] == [p for p, _ in leaves(g_dup)]
    for (path, a), (_, b) in zip(leaves(g_tape), leaves(g_dup)):
        assert a.shape == b.shape and a.dtype == b.dtype, path
        scale = max(float(np.max(np.abs(a))), 1e-3)
        np.testing.assert_allclose(b, a, rtol=rtol, atol=rtol * scale, err_msg=str(path))


def both(loss, model, *args):
    """Gradients of ``loss`` from the tape engine and from ``Duplicated``."""
    return gradient(loss, model, *args)[0], gradient(loss, Duplicated(model), *args)[0]


# -- every activation, loss and layer ------------------------------------------------------
WEIGHTS = [RNG.standard_normal(5).astype(np.float32) for _ in ACTIVATIONS]


def all_activations(m, x):
    h = m(x)
    return sum(np.sum(act(h) * w) for act, w in zip(ACTIVATIONS, WEIGHTS))


@pytest.mark.parametrize("shape", [(3,), (4, 3)], ids=["unbatched", "batched"])
def test_every_activation_same_gradient(shape):
    model = Chain(Dense(3, 6, L.tanh, rng=1), Dense(6, 5, rng=2))
    x = RNG.standard_normal(shape).astype(np.float32)
    assert_same(*both(all_activations, model, x))


def all_losses(m, x, y, p, b):
    h = m(x)
    return (L.mse(h, y) + L.mae(h, y) + L.huber_loss(2 * h, y)
            + L.crossentropy(L.softmax(h), p) + L.logitcrossentropy(h, p)
            + L.binarycrossentropy(L.sigmoid(h), b) + L.logitbinarycrossentropy(h, b)
            + L.kldivergence(L.softmax(h), p))


@pytest.mark.parametrize("batch", [(), (4,)], ids=["unbatched", "batched"])
def test_every_loss_same_gradient(batch):
    model = Chain(Dense(3, 5, L.relu, rng=3), Dense(5, 4, rng=4))
    x = RNG.standard_normal(batch + (3,)).astype(np.float32)
    y = RNG.standard_normal(batch + (4,)).astype(np.float32)
    p = RNG.random(batch + (4,)).astype(np.float32)
    p /= p.sum(-1, keepdims=True)
    p[..., 0] = 0                      # kldivergence's 0 log 0
    b = (RNG.random(batch + (4,)) > 0.5).astype(np.float32)
    assert_same(*both(all_losses, model, x, y, p, b))


def test_dense_without_bias_named_chain_and_float64():
    model = Chain(enc=Dense(3, 4, L.swish, bias=False, rng=5, dtype=np.float64),
                  dec=Dense(4, 2, rng=6, dtype=np.float64))
    x = RNG.standard_normal((5, 3))
    g_tape, g_dup = both(lambda m, x: np.sum(m(x) ** 2), model, x)
    assert g_dup["layers"]["enc"]["bias"] is None and g_dup["layers"]["enc"]["weight"].dtype == np.float64
    assert_same(g_tape, g_dup, rtol=1e-10)


def test_embedding_index_argument_is_not_baked_in():
    model = Chain(Embedding(7, 3, rng=7), Dense(3, 1, L.tanh, rng=8))
    loss = lambda m, idx: np.sum(m(idx))
    dup = Duplicated(model)
    for idx in (np.array([1, 4, 4]), np.array([0, 6, 2]), np.array([-1, 3, 3])):
        assert_same(gradient(loss, model, idx)[0], gradient(loss, dup, idx)[0])
    assert len(program._cache[program.cache_key(loss)]) == 1


def test_flux_docs_embedding_withgradient_and_aux():
    model = Chain(Embedding(np.array([[1.1, 2.2, 3.3]])), Dense(np.array([[4.4]])), only)
    dup = Duplicated(model)
    val, grad = withgradient(lambda m: m(2), dup)
    assert val == pytest.approx(14.52)
    g = grad[0]["layers"]
    np.testing.assert_allclose(g[0]["weight"], [[0, 0, 4.4]])
    np.testing.assert_allclose(g[1]["weight"], [[3.3]])
    np.testing.assert_allclose(g[1]["bias"], [1.0])
    assert g[2] is None
    val, grad2 = withgradient(lambda m: (m(2), "aux"), dup)
    assert val[0] == pytest.approx(14.52) and val[1] == "aux"
    np.testing.assert_allclose(grad2[0]["layers"][1]["weight"], [[3.3]])


def test_aux_dict_with_arrays_is_recomputed_each_call():
    model = Dense(2, 3, L.tanh, rng=9)
    dup = Duplicated(model)
    f = lambda m, x: {"loss": np.sum(m(x)), "out": m(x), "tag": "t"}
    for x in (np.ones(2, np.float32), np.array([0.5, -2.0], np.float32)):
        val, grad = withgradient(f, dup, x)
        np.testing.assert_allclose(val["out"], model(x), rtol=1e-6)
        assert val["loss"] == pytest.approx(float(np.sum(model(x))), rel=1e-5)
        assert val["tag"] == "t"
        assert_same(gradient(f, model, x)[0], grad[0])


@numba.njit
def scale_kernel(out, x, s):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = x[i, j] * s[j] + math.sin(x[i, j])


class Scale(L.Layer):
    __tree_fields__ = ("s",)

    def __init__(self, n):
        self.s = np.linspace(0.5, 1.5, n).astype(np.float32)

    def __call__(self, x):
        return kernel_call(scale_kernel, x.shape, x, self.s)


class NumpyScale(Scale):
    def __call__(self, x):
        return x * self.s + np.sin(x)


@pytest.fixture
def tape_rules():
    """Leave the tape's rule table as found (``kernel_call`` registers its op on first use;
    the tape's own tests check the table holds exactly the built-in rules)."""
    from adcore.tape import RULES
    before = dict(RULES)
    yield
    RULES.clear()
    RULES.update(before)


def test_njit_layer_both_engines_match_numpy_definition(tape_rules):
    x = RNG.standard_normal((5, 3)).astype(np.float32)
    loss = lambda m, x: np.mean(m(x) ** 2)
    make = lambda layer: Chain(Dense(3, 4, L.tanh, rng=10), layer, Dense(4, 1, rng=11))
    ref = gradient(loss, make(NumpyScale(4)), x)[0]
    model = make(Scale(4))
    np.testing.assert_allclose(model(x), make(NumpyScale(4))(x), rtol=1e-6)
    assert_same(ref, gradient(loss, model, x)[0])              # tape: adcore as the VJP
    assert_same(ref, gradient(loss, Duplicated(model), x)[0])  # compiled program


@numba.njit
def positive_part_kernel(out, x):          # writes only where x > 0: out starts at zero
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            if x[i, j] > 0:
                out[i, j] = x[i, j] ** 2


class PositivePart(L.Layer):
    def __call__(self, x):
        return kernel_call(positive_part_kernel, x.shape, x)


def test_njit_layer_output_starts_at_zero_on_every_call(tape_rules):
    """The compiled program reuses its buffers: a kernel that skips entries must still
    see a zero output at the second call (where other entries were written before)."""
    model = Chain(Dense(3, 4, rng=12), PositivePart(), Dense(4, 1, rng=13))
    loss = lambda m, x: np.sum(m(x))
    dup = Duplicated(model)
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((6, 3)).astype(np.float32)
        val, g = withgradient(loss, dup, x)
        assert val == pytest.approx(float(loss(model, x)), rel=1e-5)
        assert_same(gradient(loss, model, x)[0], g[0])


# -- random chains -----------------------------------------------------------------------
@st.composite
def chains(draw):
    sizes = draw(st.lists(st.integers(1, 4), min_size=2, max_size=4))
    acts = [draw(st.sampled_from(ACTIVATIONS)) for _ in sizes[1:]]
    bias = [draw(st.booleans()) for _ in sizes[1:]]
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    batch = draw(st.sampled_from([(), (1,), (3,)]))
    seed = draw(st.integers(0, 2 ** 16))
    layers = [Dense(i, o, a, bias=b, rng=seed + k, dtype=dtype)
              for k, (i, o, a, b) in enumerate(zip(sizes, sizes[1:], acts, bias))]
    x = np.random.default_rng(seed).standard_normal(batch + (sizes[0],)).astype(dtype)
    return Chain(*layers), x


def _chain_loss(m, x):
    return np.sum(np.sin(m(x)) + m(x) ** 2)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chains())
def test_random_chains_same_gradient(case):
    model, x = case
    assert_same(*both(_chain_loss, model, x), rtol=3e-4)


# -- Flux / Enzyme conventions -----------------------------------------------------------
def sum_abs2(m, x):
    return np.sum(m(x) ** 2)


def test_flux_docs_gradient_zero_false_and_printing():
    model = Chain(Dense(np.array([[3.0]])))
    dup = Duplicated(model)
    assert "# norm(∇) ≈ 0.0" in repr(dup)
    g = gradient(sum_abs2, dup, Const(np.array([1.0])))
    assert g[1] is None
    np.testing.assert_allclose(g[0]["layers"][0]["weight"], [[6.0]])
    np.testing.assert_allclose(g[0]["layers"][0]["bias"], [6.0])
    text = repr(dup)
    assert text.startswith("Duplicated(\n  Chain(\n    Dense(1 => 1),")
    assert re.search(r"# 2 parameters\n  \),\n  # norm\(∇\) ≈ 8\.49\n\)$", text)
    g2 = gradient(sum_abs2, dup, np.array([1.0]), zero=False)     # plain arg: Const
    np.testing.assert_allclose(g2[0]["layers"][0]["weight"], [[12.0]])
    np.testing.assert_allclose(dup.dval.layers[0].bias, [12.0])
    gradient(sum_abs2, dup, np.array([1.0]))                       # zeroed again
    np.testing.assert_allclose(dup.dval.layers[0].bias, [6.0])


def test_gradient_shares_memory_with_stored_shadow():
    model = Chain(Dense(2, 3, L.relu, rng=12), Dense(3, 1, rng=13), only)
    dup = Duplicated(model)
    g = gradient(lambda m, x: m(x) ** 2, dup, np.ones(2, np.float32))[0]
    for (path, a), (_, b) in zip(leaves(g), leaves(dup.dval)):
        assert a is b, path
    total = math.sqrt(sum(float(np.sum(a.astype(np.float64) ** 2)) for _, a in leaves(g)))
    assert f"# norm(∇) ≈ {float(f'{total:.3g}')!r}" in repr(dup)
    assert repr(dup).endswith("# Total: 4 arrays, 13 parameters, 104 bytes.")


def test_shape_change_compiles_again_and_stays_correct():
    model = Chain(Dense(3, 2, L.sigmoid, rng=14))
    loss = lambda m, x: np.sum(m(x))
    dup = Duplicated(model)
    for shape in [(4, 3), (5, 3), (3,), (4, 3)]:
        x = RNG.standard_normal(shape).astype(np.float32)
        assert_same(gradient(loss, model, x)[0], gradient(loss, dup, x)[0])
    assert len(program._cache[program.cache_key(loss)]) == 3
    model.layers[0].activation = L.tanh          # static structure is part of the key
    x = RNG.standard_normal(3).astype(np.float32)
    assert_same(gradient(loss, model, x)[0], gradient(loss, dup, x)[0])
    assert len(program._cache[program.cache_key(loss)]) == 4


def test_closures_share_programs_and_see_rebound_variables():
    model = Dense(2, 1, rng=18)
    dup = Duplicated(model)
    grads = []
    for scale in (1.0, 1.0, 3.0):
        g = gradient(lambda m: np.sum(m(np.ones(2, np.float32)) * scale), dup)[0]
        grads.append(g["bias"].copy())
    np.testing.assert_allclose(grads, [[1.0], [1.0], [3.0]])


@pytest.mark.parametrize("loss, tape_ok", [
    (lambda m, x: np.sum(m(x)) if np.sum(m(x)) > 0 else -np.sum(m(x)), True),
    (lambda m, x: float(np.sum(m(x))) * np.sum(m(x)), False),   # the tape refuses float()
    (lambda m, x: np.sum(m(x)[np.argmax(m(x))]), True),
], ids=["if", "float", "argmax"])
def test_value_dependent_python_raises(loss, tape_ok):
    dup = Duplicated(Dense(2, 3, rng=15))
    with pytest.raises(ValueDependentError, match="depends on the values of traced arrays"):
        gradient(loss, dup, np.ones(2, np.float32))
    assert issubclass(ValueDependentError, adcore.ADError)
    if tape_ok:
        gradient(loss, Dense(2, 3, rng=15), np.ones(2, np.float32))
    else:
        with pytest.raises(adcore.UnsupportedError):
            gradient(loss, Dense(2, 3, rng=15), np.ones(2, np.float32))


@pytest.mark.parametrize("loss", [
    lambda m, x: np.sum(m(x) * (m(x) // 1)),
    lambda m, x: np.sum(np.where(np.isposinf(m(x)), 0, m(x))),
], ids=["floordiv", "isposinf"])
def test_plain_values_the_lowering_cannot_recompute_are_refused_not_baked(loss):
    """Every plain value computed from traced ones reaches the trace (adcore.tape.observe)."""
    with pytest.raises(adcore.ADError, match="traced arrays"):
        gradient(loss, Duplicated(Dense(2, 3, rng=15)), np.ones(2, np.float32))


def test_where_on_comparisons_is_recomputed_not_baked():
    loss = lambda m, x: np.sum(np.where(m(x) > 0, m(x), 0.1 * m(x)) + (x < 0) * m(x))
    model = Dense(2, 2, rng=16)
    dup = Duplicated(model)
    for x in (np.array([1.0, -1.0], np.float32), np.array([-3.0, 2.0], np.float32)):
        assert_same(gradient(loss, model, x)[0], gradient(loss, dup, x)[0])


def test_non_scalar_loss_raises():
    with pytest.raises(adcore.ADError, match="scalar"):
        gradient(lambda m, x: m(x), Duplicated(Dense(2, 3, rng=17)), np.ones(2, np.float32))
