"""Convolution, pooling, normalisation, dropout and combinator layers: forward against plain
numpy definitions, gradients of both engines against central finite differences (float64)
and against each other (float32), printing, saving, modes and bad inputs.

Compiled programs are slow to build, so one float64 model and one float32 model carry all
gradient checks (module-level fixtures)."""
import operator
import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from adcore import Const, Duplicated, UnsupportedError
from adcore.tree import leaves
from layers import (BatchNorm, Chain, Conv, Dense, Dropout, GlobalMeanPool, LayerNorm, MaxPool,
                    MeanPool, Parallel, SkipConnection, flatten, gradient, load, relu, save, tanh,
                    trainmode)
from layers import testmode as use_testmode   # not collected as a test
from layers import train
from layers.staging.program import lookup
from optim import Adam, setup

EXAMPLES = int(os.environ.get("ADCORE_PROPERTY_EXAMPLES", "25"))


# -- numpy references -----------------------------------------------------------------------
def conv_ref(x, w, stride, pad, dilation):
    """Direct definition: pad with zeros, then sum over the kernel offsets."""
    (sh, sw), (dh, dw) = stride, dilation
    (ph0, ph1), (pw0, pw1) = pad
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph0, ph1), (pw0, pw1)))
    kh, kw = w.shape[2:]
    oh = (xp.shape[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (xp.shape[3] - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for i in range(oh):
        for j in range(ow):
            for k in range(kh):
                for l in range(kw):
                    patch = xp[:, :, i * sh + k * dh, j * sw + l * dw]      # (batch, cin)
                    out[:, :, i, j] += patch @ w[:, :, k, l].T
    return out


def pool_ref(x, window, stride, pad, reduce):
    (kh, kw), (sh, sw), (ph, pw) = window, stride, pad
    fill = -np.inf if reduce is np.max else 0.0
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=fill)
    oh, ow = (xp.shape[2] - kh) // sh + 1, (xp.shape[3] - kw) // sw + 1
    out = np.zeros(x.shape[:2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = reduce(xp[:, :, i * sh:i * sh + kh, j * sw:j * sw + kw], axis=(2, 3))
    return out


# -- forward -------------------------------------------------------------------------------
@settings(max_examples=EXAMPLES, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 2),
       st.integers(5, 8), st.integers(5, 8), st.integers(1, 3), st.integers(1, 3),
       st.integers(1, 2), st.integers(1, 2), st.integers(0, 2), st.integers(0, 2),
       st.integers(1, 2), st.integers(1, 2), st.integers(0, 10 ** 6))
def test_conv_forward_matches_definition(b, cin, cout, h, w, kh, kw, sh, sw, ph, pw, dh, dw,
                                         seed):
    layer = Conv((kh, kw), cin, cout, stride=(sh, sw), pad=(ph, pw), dilation=(dh, dw),
                 rng=seed, dtype=np.float64)
    layer.bias[:] = np.arange(cout)
    x = np.random.default_rng(seed).standard_normal((b, cin, h, w))
    ref = conv_ref(x, layer.weight, (sh, sw), ((ph, ph), (pw, pw)), (dh, dw))
    ref += np.arange(cout)[:, None, None]
    np.testing.assert_allclose(layer(x), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("k,d", [(3, 1), (4, 1), (3, 2), (2, 3)])
def test_conv_same_padding_keeps_size_and_puts_the_larger_half_first(k, d):
    layer = Conv((k, k), 2, 3, pad="same", dilation=d, rng=0, dtype=np.float64)
    x = np.random.default_rng(1).standard_normal((2, 2, 7, 6))
    total = d * (k - 1)
    pad = ((total - total // 2, total // 2),) * 2
    y = layer(x)
    assert y.shape == (2, 3, 7, 6)
    np.testing.assert_allclose(y, conv_ref(x, layer.weight, (1, 1), pad, (d, d)), atol=1e-12)


def test_conv_1d_is_conv_2d_of_height_one():
    layer = Conv((3,), 2, 4, pad=1, stride=2, rng=0, dtype=np.float64)
    x = np.random.default_rng(0).standard_normal((3, 2, 9))
    ref = conv_ref(x[:, :, None, :], layer.weight[:, :, None, :], (1, 2), ((0, 0), (1, 1)),
                   (1, 1))[:, :, 0, :]
    np.testing.assert_allclose(layer(x), ref, atol=1e-12)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.sampled_from([(MaxPool, np.max), (MeanPool, np.mean)]), st.integers(1, 3),
       st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(0, 2),
       st.integers(0, 2), st.integers(0, 10 ** 6))
def test_pool_forward_matches_definition(kind, kh, kw, sh, sw, ph, pw, seed):
    cls, reduce = kind
    ph, pw = min(ph, kh - 1), min(pw, kw - 1)
    x = np.random.default_rng(seed).standard_normal((2, 3, 7, 6))
    layer = cls((kh, kw), (sh, sw), pad=(ph, pw))
    np.testing.assert_allclose(layer(x), pool_ref(x, (kh, kw), (sh, sw), (ph, pw), reduce),
                               atol=1e-12)


def test_global_mean_pool_flatten_and_layernorm_forward():
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5))
    np.testing.assert_allclose(GlobalMeanPool()(x), x.mean(axis=(2, 3), keepdims=True))
    assert flatten(x).shape == (2, 60) and np.array_equal(flatten(x)[1], x[1].ravel())
    ln = LayerNorm(5, dtype=np.float64)
    ln.scale[:], ln.bias[:] = 2.0, 1.0
    ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * 2 + 1
    np.testing.assert_allclose(ln(x), ref, atol=1e-12)


def test_batchnorm_statistics_and_modes():
    bn = BatchNorm(3, dtype=np.float64)
    x = np.random.default_rng(0).standard_normal((4, 3, 5)) * 2 + 1
    np.testing.assert_allclose(bn(x), x / np.sqrt(1 + 1e-5), rtol=1e-14)   # automatic: test mode
    trainmode(bn)
    y = bn(x)
    mu, var = x.mean(axis=(0, 2)), x.var(axis=(0, 2))
    np.testing.assert_allclose(y, (x - mu[:, None]) / np.sqrt(var[:, None] + 1e-5), atol=1e-12)
    np.testing.assert_allclose(bn.running_mean, 0.1 * mu)
    np.testing.assert_allclose(bn.running_var, 0.9 + 0.1 * var * 20 / 19)
    use_testmode(bn)
    ref = (x - bn.running_mean[:, None]) / np.sqrt(bn.running_var[:, None] + 1e-5)
    np.testing.assert_allclose(bn(x), ref, atol=1e-12)
    assert repr(bn) == "BatchNorm(3, active=False)  # 6 parameters, plus 6"


def test_dropout_masks_scale_and_modes():
    d = Dropout(0.25, rng=0)
    x = np.ones(40000)
    assert d(x) is x                                   # automatic mode outside gradient
    trainmode(d)
    y1, y2 = d(x), d(x)
    assert set(np.unique(y1)) == {0.0, 1 / 0.75}
    assert abs(np.mean(y1 == 0) - 0.25) < 0.01
    assert not np.array_equal(y1, y2)                 # a new mask each call
    same_seed = trainmode(Dropout(0.25, rng=0))
    assert np.array_equal(trainmode(Dropout(0.25, rng=0))(x), same_seed(x))


# -- gradients -----------------------------------------------------------------------------
def _model(dtype):
    return Chain(Conv((3, 3), 2, 3, tanh, pad="same", dilation=(1, 2), rng=0, dtype=dtype),
                 BatchNorm(3, dtype=dtype), MaxPool((2, 2), pad=1),
                 SkipConnection(Conv((2, 2), 3, 3, pad=(0, 1, 1, 0), rng=1, dtype=dtype),
                                operator.add),
                 MeanPool((2, 1), stride=1), flatten, Dropout(0.3, rng=2),
                 Parallel(np.add, Dense(24, 6, tanh, rng=3, dtype=dtype),
                          Dense(24, 6, rng=4, dtype=dtype)),
                 LayerNorm(6, relu, dtype=dtype), Dense(6, 2, rng=5, dtype=dtype))


def _data(dtype):
    rng = np.random.default_rng(7)
    return rng.standard_normal((4, 2, 5, 6)).astype(dtype), rng.standard_normal((4, 2)).astype(dtype)


def _loss(m, x, y):
    return np.sum((m(x) - y) ** 2)


def _fixed_state(model):
    """Runs ``f`` with the model's dropout state reset first (the same mask each time)."""
    state = model[6].state.copy()

    def reset():
        model[6].state[:] = state
    return reset


def _grads(model, engine, x, y, reset):
    reset()
    target = Duplicated(model) if engine == "Duplicated" else model
    g = gradient(_loss, target, Const(x), Const(y))[0]
    return [np.array(a) for _, a in leaves(g)]


@pytest.fixture(scope="module")
def model64():
    m = trainmode(_model(np.float64))
    return m, _data(np.float64), _fixed_state(m)


@pytest.mark.parametrize("engine,batchnorm", [("tape", "train"), ("tape", "test"),
                                              ("Duplicated", "test")])
def test_gradients_match_finite_differences(model64, engine, batchnorm):
    m, (x, y), reset = model64
    trainmode(m[1], batchnorm == "train")
    grads = _grads(m, engine, x, y, reset)
    params = [a for _, a in leaves(m)]
    rng = np.random.default_rng(0)
    for p, g in zip(params, grads):
        for idx in {tuple(rng.integers(0, n) for n in p.shape) for _ in range(3)}:
            old, h = p[idx], 1e-6
            p[idx] = old + h
            reset()
            up = _loss(m, x, y)
            p[idx] = old - h
            reset()
            down = _loss(m, x, y)
            p[idx] = old
            assert g[idx] == pytest.approx((up - down) / (2 * h), rel=1e-5, abs=1e-7)


def test_engines_agree_in_float32():
    m = trainmode(_model(np.float32))
    use_testmode(m[1])
    x, y = _data(np.float32)
    reset = _fixed_state(m)
    tape = _grads(m, "tape", x, y, reset)
    dup = _grads(m, "Duplicated", x, y, reset)
    for a, b in zip(tape, dup):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)


def test_batchnorm_running_statistics_move_once_per_gradient():
    m = Chain(Conv((3, 3), 2, 3, rng=0), BatchNorm(3), flatten)
    x, _ = _data(np.float32)
    mu = m[0](x).astype(np.float64).mean(axis=(0, 2, 3))
    gradient(lambda m: np.sum(m(x) ** 2), m)
    np.testing.assert_allclose(m[1].running_mean, 0.1 * mu, rtol=1e-5, atol=1e-6)


def params(model):
    return [a.copy() for _, a in leaves(model)]


def _bn_model(dtype):
    return Chain(Dense(4, 3, bias=False, rng=0, dtype=dtype), BatchNorm(3, tanh, dtype=dtype),
                 Dropout(0.3, rng=2), Dense(3, 2, rng=1, dtype=dtype))


def _stats(model):
    return [model[1].running_mean.copy(), model[1].running_var.copy()]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_batchnorm_training_on_duplicated_updates_running_statistics_as_tape(dtype):
    """Both engines agree on gradients, parameters, running statistics and dropout's
    random state after gradient calls and a compiled ``train`` pass (one program: the
    state arrays are inputs, not guarded by content); test mode then uses the statistics,
    which the compiled program reads at each call (an in-place change reaches it); the
    training-mode gradient agrees with finite differences (float64)."""
    tol = dict(rtol=1e-8, atol=1e-12) if dtype == np.float64 else dict(rtol=2e-4, atol=2e-5)
    tape_m, dup_m = _bn_model(dtype), _bn_model(dtype)
    dup = Duplicated(dup_m)
    rng = np.random.default_rng(1)
    data = [(rng.standard_normal((5, 4)).astype(dtype),
             rng.standard_normal((5, 2)).astype(dtype)) for _ in range(6)]

    def agree():
        for a, b in zip(_stats(tape_m) + params(tape_m), _stats(dup_m) + params(dup_m)):
            np.testing.assert_allclose(b, a, **tol)

    def same_gradients(x, y):
        g_tape, g_dup = gradient(_loss, tape_m, x, y)[0], gradient(_loss, dup, x, y)[0]
        for (_, a), (_, b) in zip(leaves(g_tape), leaves(g_dup)):
            np.testing.assert_allclose(b, a, **tol)

    for x, y in data[:3]:
        same_gradients(x, y)
        agree()
        staged = lookup(_loss, (dup,) + data[0])[0]
        assert staged is lookup(_loss, (dup,) + data[0])[0]   # one program: state is input
    assert np.array_equal(dup_m[2].state, tape_m[2].state)    # dropout drew the same masks
    s_tape, s_dup = setup(Adam(0.01), tape_m), setup(Adam(0.01), dup)
    train(_loss, tape_m, data[3:], s_tape)
    train(_loss, dup, data[3:], s_dup)
    assert lookup(_loss, (dup,) + data[3])[0].plans     # the native loop ran
    agree()
    moved = _stats(dup_m)
    assert not np.allclose(moved[0], 0) and not np.allclose(moved[1], 1)
    use_testmode(tape_m), use_testmode(dup_m)
    x, y = data[0]
    np.testing.assert_allclose(dup_m(x), tape_m(x), **tol)
    if dtype == np.float32:    # one compiled test-mode program is enough (compile time)
        return
    same_gradients(x, y)
    for m in (tape_m, dup_m):
        m[1].running_var *= 2.0
    same_gradients(x, y)
    np.testing.assert_array_equal(dup_m[1].running_mean, moved[0])   # test mode: unmoved
    np.testing.assert_array_equal(dup_m[1].running_var, 2.0 * moved[1])
    agree()
    trainmode(dup_m, "auto")   # the first program again: against finite differences
    state = dup_m[2].state.copy()
    grads = [a.copy() for _, a in leaves(gradient(_loss, dup, x, y)[0])]
    trainmode(dup_m)           # plain calls in training mode
    for (_, p), g in zip(leaves(dup_m), grads):
        for idx in [(0,) * p.ndim, tuple(n - 1 for n in p.shape)]:
            old, h, values = p[idx], 1e-6, []
            for v in (old + h, old - h):
                p[idx] = v
                dup_m[2].state[:] = state          # the same dropout mask
                values.append(_loss(dup_m, x, y))
            p[idx] = old
            assert g[idx] == pytest.approx((values[0] - values[1]) / (2 * h), rel=1e-5, abs=1e-7)


# -- printing, saving, errors ----------------------------------------------------------------
def test_show_in_flux_format():
    m = _model(np.float32)
    text = repr(m)
    assert "  Conv((3, 3), 2 => 3, tanh, pad=(1, 1, 2, 2), dilation=(1, 2)),  # 57 parameters" in text
    assert "  BatchNorm(3),                         # 6 parameters, plus 6" in text
    assert "  MaxPool((2, 2), pad=1)," in text
    assert "  SkipConnection(\n    Conv((2, 2), 3 => 3, pad=(0, 1, 1, 0)),  # 39 parameters\n    +,\n  )," in text
    assert "  Parallel(\n    +,\n    Dense(24 => 6, tanh),               # 150 parameters\n" in text
    assert "  MeanPool((2, 1), stride=1),\n  flatten,\n  Dropout(0.3),\n" in text
    assert "  LayerNorm(6, relu),                   # 12 parameters" in text
    assert text.splitlines()[-2:] == [
        ")                   # Total: 14 trainable arrays, 428 parameters,",
        "                    # plus 2 non-trainable, 6 parameters, summarysize 1.695 KiB."]
    assert repr(Conv((5,), 1, 8, bias=False)) == "Conv((5,), 1 => 8, bias=False)  # 40 parameters"
    assert repr(MeanPool((3, 3), 2)) == "MeanPool((3, 3), stride=2)"


def test_save_load_round_trip_with_running_statistics(tmp_path):
    m = trainmode(_model(np.float64))
    x, _ = _data(np.float64)
    m(x)
    path = tmp_path / "m.npz"
    save(path, m)
    fresh = _model(np.float64)
    load(path, fresh)
    for (p, a), (q, b) in zip(leaves(m), leaves(fresh)):
        assert p == q and np.array_equal(a, b)
    assert np.array_equal(fresh[1].running_var, m[1].running_var)
    assert not np.array_equal(fresh[1].running_var, np.ones(3))


@pytest.mark.parametrize("layer,x,expected", [
    (Conv((3, 3), 2, 4), np.zeros((1, 3, 5, 5), np.float32), r"Conv\(\(3, 3\), 2 => 4\) expects an input of shape \(batch, 2, height, width\), got shape \(1, 3, 5, 5\)"),
    (Conv((3, 3), 2, 4), np.zeros((2, 5, 5), np.float32), r"\(batch, 2, height, width\)"),
    (Conv((3,), 2, 4), np.zeros((1, 2, 5, 5), np.float32), r"Conv\(\(3,\), 2 => 4\) expects an input of shape \(batch, 2, width\)"),
    (MaxPool((2, 2)), np.zeros((4, 4)), r"MaxPool\(\(2, 2\)\) expects an input of shape \(batch, channels, height, width\)"),
    (BatchNorm(3), np.zeros((2, 4, 5), np.float32), r"BatchNorm\(3\) expects an input of shape \(batch, 3, ...\)"),
    (LayerNorm(3), np.zeros((2, 4), np.float32), r"LayerNorm\(3\) expects an input of shape \(..., 3\)"),
    (Conv((5, 5), 1, 1), np.zeros((1, 1, 3, 3), np.float32), r"smaller than the window"),
])
def test_bad_input_names_layer_and_expected_shape(layer, x, expected):
    with pytest.raises(ValueError, match=expected):
        layer(x)


def test_digits_workload_data_split():
    """The digits workload's data (scikit-learn ships it): a fixed held-out fifth."""
    from bench.digits import data
    xtr, ytr, xte, yte = data()
    assert xtr.shape == (1438, 1, 8, 8) and xte.shape == (359, 1, 8, 8)
    assert xtr.dtype == np.float32 and 0 <= xtr.min() and xtr.max() <= 1
    assert np.array_equal(ytr.sum(axis=1), np.ones(1438)) and set(np.unique(yte)) == set(range(10))
    assert np.array_equal(data()[2], xte)
