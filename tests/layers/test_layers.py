"""layers: every layer, activation and loss against numpy, gradients against finite differences."""
import numpy as np
import pytest

from bench.measure import central_fd

import layers as L
from layers import Chain, Dense, Embedding, gradient, withgradient
from adcore import ADError, make_zero
from adcore.tree import child, leaves

RNG = np.random.default_rng(0)


def fd(fun, x, h=1e-6):
    """Central finite differences of the scalar ``fun()`` with respect to array ``x``."""
    return central_fd(fun, [x], h)[0]


def check_model_gradient(loss, model, *args, rtol=1e-5, atol=1e-7):
    """The tape gradient of ``loss(model, *args)`` against finite differences, every array."""
    g = gradient(loss, model, *args)[0]
    n = 0
    for path, a in leaves(model):
        ga = g
        for k in path:
            ga = child(ga, k)
        np.testing.assert_allclose(ga, fd(lambda: float(loss(model, *args)), a), rtol=rtol, atol=atol,
                                   err_msg=".".join(map(str, path)))
        n += 1
    assert n == len(leaves(model))
    return g


# ---- Dense, Chain, Embedding -------------------------------------------------------------

def test_dense_shapes_and_values():
    d = Dense(3, 2, L.tanh, rng=1)
    assert d.weight.shape == (2, 3) and d.bias.shape == (2,) and d.weight.dtype == np.float32
    d.bias[:] = [0.1, -0.2]
    x = RNG.normal(size=(5, 3)).astype(np.float32)
    np.testing.assert_allclose(d(x), np.tanh(x @ d.weight.T + d.bias), rtol=1e-6)
    np.testing.assert_allclose(d(x[0]), np.tanh(d.weight @ x[0] + d.bias), rtol=1e-6)
    assert d(x).dtype == np.float32 and d(x.astype(np.float64)).dtype == np.float32
    assert d([0.1, 0.2, 0.3]).shape == (2,)
    assert Dense(3, 2, bias=False).bias is None
    assert Dense(3, 2, dtype=np.float64).weight.dtype == np.float64


def test_dense_seedable_and_from_arrays():
    np.testing.assert_array_equal(Dense(4, 5, rng=7).weight, Dense(4, 5, rng=7).weight)
    assert not np.array_equal(Dense(4, 5, rng=7).weight, Dense(4, 5, rng=8).weight)
    w = np.array([[3.0]])
    d = Dense(w, bias=np.array([0.5]))
    assert d.weight is w and d([2.0])[0] == 6.5
    d = Dense(2, 3, init=lambda *s, rng, dtype: np.ones(s, dtype))
    np.testing.assert_array_equal(d.weight, np.ones((3, 2)))
    with pytest.raises(ValueError, match="bias"):
        Dense(w, bias=np.ones(2))


def test_dense_gradient_fd():
    d = Dense(3, 2, L.sigmoid, dtype=np.float64, rng=0)
    d.bias[:] = RNG.normal(size=2)
    x = RNG.normal(size=(4, 3))
    g = check_model_gradient(lambda m, x: np.sum(m(x) ** 2), d, x)
    assert set(g) == {"weight", "bias"}
    check_model_gradient(lambda m, x: np.sum(m(x) ** 2), Dense(3, 2, bias=False, dtype=np.float64), x[0])


def test_chain_forms():
    a, b = Dense(2, 3, L.relu, rng=0), Dense(3, 1, rng=1)
    c = Chain(a, b, L.only)
    x = np.array([0.3, -0.2], np.float32)
    assert c(x) == b(a(x))[0]
    assert len(c) == 3 and list(c) == [a, b, L.only] and c[0] is a and c[-1] is L.only
    assert isinstance(c[:2], Chain) and len(c[:2]) == 2
    n = Chain(enc=a, dec=b)
    assert n["enc"] is a and n.dec is b and len(n) == 2 and list(n) == [a, b]
    np.testing.assert_allclose(n(x), b(a(x)))
    assert Chain(lambda x: 2 * x, np.sum)(np.ones(3)) == 6
    with pytest.raises(TypeError):
        Chain(a, 3)


def test_chain_gradient_structure_and_fd():
    m = L.f64(Chain(Dense(2, 4, L.tanh, rng=0), Chain(Dense(4, 3, rng=1), L.softmax),
                    Dense(3, 1, bias=False, rng=2), L.only))
    x, y = RNG.normal(size=2), 0.7
    g = check_model_gradient(lambda m, x, y: (m(x) - y) ** 2, m, x, y)
    assert isinstance(g["layers"], tuple) and len(g["layers"]) == 4
    assert g["layers"][2]["bias"] is None and g["layers"][3] is None
    assert isinstance(g["layers"][1]["layers"], tuple)
    named = L.f64(Chain(enc=Dense(2, 3, L.relu, rng=3), dec=Dense(3, 2, rng=4)))
    g = check_model_gradient(lambda m, x: np.sum(m(x) ** 2), named, RNG.normal(size=(5, 2)) + 1)
    assert set(g["layers"]) == {"enc", "dec"}


def test_gradient_float32_model():
    m = Chain(Dense(1, 23, L.tanh, rng=0), Dense(23, 1, bias=False, rng=1), L.only)
    g, gx, gy = gradient(lambda m, x, y: (m(x) - y) ** 2, m, np.array([0.5], np.float32), 1.0)
    assert g["layers"][0]["weight"].dtype == np.float32 and g["layers"][0]["weight"].shape == (23, 1)
    assert gx.shape == (1,)
    g64 = gradient(lambda m, x, y: (m(x) - y) ** 2, L.f64(m), np.array([0.5]), 1.0)[0]
    np.testing.assert_allclose(g["layers"][1]["weight"], g64["layers"][1]["weight"], rtol=1e-5)


def test_embedding():
    e = Embedding(5, 3, rng=0)
    assert e.weight.shape == (3, 5)
    np.testing.assert_array_equal(e(2), e.weight[:, 2])
    np.testing.assert_array_equal(e(np.array([4, 0, 4])), e.weight[:, [4, 0, 4]].T)
    e64 = L.f64(e)
    idx = np.array([1, 3, 1])
    g = check_model_gradient(lambda m, i: np.sum(m(i) ** 3), e64, idx)
    np.testing.assert_allclose(g["weight"][:, [0, 2, 4]], 0)
    with pytest.raises(TypeError):
        e(np.array([0.5]))


def test_docs_example_embedding_dense():
    # Flux docs: Chain(Embedding([1.1 2.2 3.3]), Dense([4.4;;]), only); model(3) == 14.52
    m = Chain(Embedding(np.array([[1.1, 2.2, 3.3]])), Dense(np.array([[4.4]])), L.only)
    assert m(2) == pytest.approx(14.52)
    val, (g,) = withgradient(lambda m: m(2), m)
    assert val == pytest.approx(14.52)
    np.testing.assert_allclose(g["layers"][0]["weight"], [[0, 0, 4.4]])
    np.testing.assert_allclose(g["layers"][1]["weight"], [[3.3]])
    np.testing.assert_allclose(g["layers"][1]["bias"], [1.0])
    assert g["layers"][2] is None
    val, (g,) = withgradient(lambda m: (m(2), "aux"), m)
    assert val[1] == "aux" and val[0] == pytest.approx(14.52)


def test_docs_example_dense_gradient():
    # Flux docs: gradient of sum(abs2, m(x)) for Chain(Dense([3.0;;])) at x = [1]
    m = Chain(Dense(np.array([[3.0]])))
    g, gx = gradient(lambda m, x: np.sum(m(x) ** 2), m, np.array([1.0]))
    np.testing.assert_allclose(g["layers"][0]["weight"], [[6.0]])
    np.testing.assert_allclose(g["layers"][0]["bias"], [6.0])
    np.testing.assert_allclose(gx, [18.0])


def test_nonscalar_loss_is_an_error():
    with pytest.raises(ADError, match="scalar"):
        gradient(lambda m, x: m(x), Dense(2, 3), np.ones(2, np.float32))


def test_make_zero_and_user_layer():
    class Scale:
        __tree_fields__ = ("s",)

        def __init__(self):
            self.s = np.array([2.0])

        def __call__(self, x):
            return self.s * x

    m = Chain(Scale(), Dense(1, 1, dtype=np.float64, rng=0), L.only)
    z = make_zero(m)
    assert type(z) is Chain and np.all(z[0].s == 0) and np.all(z[1].weight == 0)
    g = check_model_gradient(lambda m, x: m(x) ** 2, m, np.array([0.4]))
    assert set(g["layers"][0]) == {"s"}


# ---- activations -------------------------------------------------------------------------

def np_sigmoid(x):
    return 1 / (1 + np.exp(-x))


ACTIVATIONS = {
    "identity": (L.identity, lambda x: x),
    "relu": (L.relu, lambda x: np.maximum(x, 0)),
    "leakyrelu": (L.leakyrelu, lambda x: np.where(x > 0, x, 0.01 * x)),
    "elu": (L.elu, lambda x: np.where(x >= 0, x, np.exp(x) - 1)),
    "gelu": (L.gelu, lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))),
    "swish": (L.swish, lambda x: x * np_sigmoid(x)),
    "softplus": (L.softplus, lambda x: np.log(1 + np.exp(x))),
    "sigmoid": (L.sigmoid, np_sigmoid),
    "σ": (L.σ, np_sigmoid),
    "tanh": (L.tanh, np.tanh),
    "softmax": (L.softmax, lambda x: np.exp(x) / np.exp(x).sum(-1, keepdims=True)),
    "logsoftmax": (L.logsoftmax, lambda x: x - np.log(np.exp(x).sum(-1, keepdims=True))),
}


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_values_and_gradient(name):
    f, ref = ACTIVATIONS[name]
    x = RNG.normal(size=(3, 4)) * 2 + 0.05          # away from the kinks at 0
    np.testing.assert_allclose(f(x), ref(x), rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(f(x.astype(np.float32)), ref(x), rtol=1e-5, atol=1e-6)
    w = RNG.normal(size=x.shape)
    loss = lambda x: np.sum(f(x) * w)
    (g,) = gradient(loss, x)
    np.testing.assert_allclose(g, fd(lambda: loss(x), x), rtol=1e-5, atol=1e-8)


def test_activations_stable():
    x = np.array([-1000.0, 0.0, 1000.0])
    assert np.all(np.isfinite(L.sigmoid(x))) and np.all(np.isfinite(L.softplus(x)))
    np.testing.assert_allclose(L.softmax(x), [0, 0, 1])
    np.testing.assert_allclose(L.logsoftmax(x), [-2000, -1000, 0])
    np.testing.assert_allclose(L.logsumexp(x), 1000.0)
    assert L.sigmoid is L.σ


# ---- losses --------------------------------------------------------------------------------

P = RNG.uniform(0.05, 0.95, size=(4, 3))
PROBS = P / P.sum(-1, keepdims=True)
Y = RNG.normal(size=(4, 3))
ONEHOT = L.onehotbatch([0, 2, 1, 2], range(3)).astype(np.float64)
BIN = (RNG.uniform(size=(4, 3)) > 0.5).astype(np.float64)
LOGITS = RNG.normal(size=(4, 3))
eps = np.finfo(np.float64).eps


def lsm(x):
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


LOSSES = {
    "mse": (L.mse, Y, P, lambda yh, y: np.mean((yh - y) ** 2)),
    "mae": (L.mae, Y, P, lambda yh, y: np.mean(np.abs(yh - y))),
    "huber_loss": (L.huber_loss, 2 * Y, P, lambda yh, y: np.mean(np.where(
        np.abs(yh - y) < 1, 0.5 * (yh - y) ** 2, np.abs(yh - y) - 0.5))),
    "crossentropy": (L.crossentropy, PROBS, ONEHOT,
                     lambda yh, y: np.mean(-np.sum(y * np.log(yh + eps), axis=1))),
    "logitcrossentropy": (L.logitcrossentropy, LOGITS, ONEHOT,
                          lambda yh, y: np.mean(-np.sum(y * lsm(yh), axis=1))),
    "binarycrossentropy": (L.binarycrossentropy, P, BIN, lambda yh, y: np.mean(
        -y * np.log(yh + eps) - (1 - y) * np.log(1 - yh + eps))),
    "logitbinarycrossentropy": (L.logitbinarycrossentropy, LOGITS, BIN, lambda yh, y: np.mean(
        -y * np.log(np_sigmoid(yh)) - (1 - y) * np.log(1 - np_sigmoid(yh)))),
    "kldivergence": (L.kldivergence, PROBS, PROBS[::-1].copy(), lambda yh, y: np.mean(
        np.sum(y * np.log(y), axis=1) - np.sum(y * np.log(yh + eps), axis=1))),
}


@pytest.mark.parametrize("name", LOSSES)
def test_loss_values_and_gradient(name):
    f, yhat, y, ref = LOSSES[name]
    yhat = yhat.copy()
    assert f(yhat, y) == pytest.approx(ref(yhat, y), rel=1e-10)
    assert f(yhat, y, agg=np.sum) == pytest.approx(ref(yhat, y) * (len(y) if name in (
        "crossentropy", "logitcrossentropy", "kldivergence") else y.size), rel=1e-10)
    (g, gy) = gradient(lambda yh, y: f(yh, y), yhat, y)
    np.testing.assert_allclose(g, fd(lambda: f(yhat, y), yhat), rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("name", LOSSES)
def test_loss_shape_mismatch(name):
    f, yhat, y, _ = LOSSES[name]
    with pytest.raises(ValueError, match=r"shape \(4, 3\).*shape \(3, 4\)"):
        f(yhat, y.T)


def test_losses_accept_bool_and_scalar_targets():
    y = L.onehotbatch([0, 2], range(3))
    p = L.softmax(RNG.normal(size=(2, 3)))
    assert L.crossentropy(p, y) == pytest.approx(L.crossentropy(p, y.astype(float)))
    assert L.mse(np.float64(3.0), 1.0) == 4.0
    assert L.mse(np.array([3.0, 1.0]), np.float32(1.0)) == 2.0
    (g,) = gradient(lambda y: L.mse(np.array([3.0]), y), 1.0)
    assert g == -4.0


# ---- random chains -------------------------------------------------------------------------

from hypothesis import given, settings, strategies as st  # noqa: E402

ELEMENTWISE = [L.identity, L.relu, L.tanh, L.sigmoid, L.softplus, L.gelu, L.swish, L.elu]


@settings(max_examples=15, deadline=None)
@given(sizes=st.lists(st.integers(1, 4), min_size=2, max_size=4),
       acts=st.lists(st.sampled_from(ELEMENTWISE), min_size=3, max_size=3),
       bias=st.lists(st.booleans(), min_size=3, max_size=3),
       batch=st.sampled_from([None, 1, 3]), seed=st.integers(0, 2 ** 16))
def test_random_chains_gradient_fd(sizes, acts, bias, batch, seed):
    rng = np.random.default_rng(seed)
    m = Chain(*(Dense(a, b, f, bias=use, dtype=np.float64, rng=rng)
                for a, b, f, use in zip(sizes, sizes[1:], acts, bias)))
    for layer in m.layers:          # nonzero biases: a zero bias after a dead relu is its kink
        if layer.bias is not None:
            layer.bias[...] = rng.normal(size=layer.bias.shape)
    x = rng.normal(size=(sizes[0],) if batch is None else (batch, sizes[0]))
    y = rng.normal(size=(sizes[-1],) if batch is None else (batch, sizes[-1]))
    assert m(x).shape == y.shape
    check_model_gradient(lambda m, x, y: L.mse(m(x), y), m, x, y, rtol=1e-4, atol=1e-7)
    flat, re = L.destructure(m)
    np.testing.assert_array_equal(re(flat)(x), m(x))
