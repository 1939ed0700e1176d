"""RNN, LSTM and GRU: forward against plain numpy cells, gradients of both engines against
central finite differences (float64) and against each other (float32), printing, saving,
optimiser updates, bad inputs and a small sequence-model training run.

Compiled programs are slow to build, so one model holding all three layers carries the
gradient checks in each dtype (module-level fixtures)."""
import numpy as np
import pytest

import optim
from adcore import Const, Duplicated
from adcore.tree import leaves
from layers import (GRU, LSTM, RNN, Chain, Dense, gradient, identity, load, relu, save, sigmoid,
                    tanh, withgradient)
from layers import recurrent_kernels as kernels

from fdcheck import check


# -- numpy references: one cell step at a time -------------------------------------------
def _sig(v):
    return 1 / (1 + np.exp(-v))


def rnn_ref(layer, x):
    act = {identity: lambda v: v, tanh: np.tanh, relu: lambda v: np.maximum(v, 0),
           sigmoid: _sig}[layer.act]
    h, out = np.zeros((x.shape[0], layer.Wh.shape[1])), []
    for t in range(x.shape[1]):
        h = act(x[:, t] @ layer.Wi.T + h @ layer.Wh.T + layer.b)
        out.append(h)
    return np.stack(out, axis=1)


def lstm_ref(layer, x):
    n = layer.Wh.shape[1]
    h, c, out = np.zeros((x.shape[0], n)), np.zeros((x.shape[0], n)), []
    for t in range(x.shape[1]):
        i, f, g, o = np.split(x[:, t] @ layer.Wi.T + h @ layer.Wh.T + layer.b, 4, axis=1)
        c = _sig(f) * c + _sig(i) * np.tanh(g)
        h = _sig(o) * np.tanh(c)
        out.append(h)
    return np.stack(out, axis=1)


def gru_ref(layer, x):
    n = layer.Wh.shape[1]
    h, out = np.zeros((x.shape[0], n)), []
    for t in range(x.shape[1]):
        gx = np.split(x[:, t] @ layer.Wi.T + layer.b, 3, axis=1)
        gh = np.split(h @ layer.Wh.T, 3, axis=1)
        r, z = _sig(gx[0] + gh[0]), _sig(gx[1] + gh[1])
        h = (1 - z) * np.tanh(gx[2] + r * gh[2]) + z * h
        out.append(h)
    return np.stack(out, axis=1)


# -- forward -------------------------------------------------------------------------------
@pytest.mark.parametrize("make,ref", [
    (lambda: RNN(3, 4, rng=0, dtype=np.float64), rnn_ref),
    (lambda: RNN(3, 4, relu, rng=1, dtype=np.float64), rnn_ref),
    (lambda: RNN(3, 4, sigmoid, rng=2, dtype=np.float64), rnn_ref),
    (lambda: RNN(3, 4, identity, rng=3, dtype=np.float64), rnn_ref),
    (lambda: LSTM(3, 4, rng=4, dtype=np.float64), lstm_ref),
    (lambda: GRU(3, 4, rng=5, dtype=np.float64), gru_ref),
])
def test_forward_matches_numpy_cells(make, ref):
    layer = make()
    rng = np.random.default_rng(0)
    layer.b[:] = rng.standard_normal(layer.b.shape)
    x = rng.standard_normal((2, 6, 3)) * 2
    y = layer(x)
    assert y.shape == (2, 6, 4) and y.dtype == np.float64
    np.testing.assert_allclose(y, ref(layer, x), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(layer(x[:1, :3]), y[:1, :3], rtol=1e-12, atol=1e-12)


def test_state_starts_at_zero_each_call_and_float32_stays_float32():
    layer = LSTM(2, 3, rng=0)
    x = np.random.default_rng(0).standard_normal((1, 4, 2))
    first = layer(x)
    assert first.dtype == np.float32 and np.array_equal(layer(x), first)


@pytest.mark.parametrize("code", [kernels.IDENTITY, kernels.TANH, kernels.RELU, kernels.SIGMOID])
def test_rnn_kernel_reverse_mode_for_each_activation(code):
    rng = np.random.default_rng(code)
    out, proj, wh = np.zeros((2, 4, 3)), rng.standard_normal((2, 4, 3)), rng.standard_normal((3, 3))
    check(kernels.rnn, out, proj, wh, code)


# -- gradients -----------------------------------------------------------------------------
def _model(dtype):
    return Chain(RNN(3, 4, rng=0, dtype=dtype), GRU(4, 4, rng=1, dtype=dtype),
                 LSTM(4, 3, rng=2, dtype=dtype), Dense(3, 2, rng=3, dtype=dtype))


def _data(dtype):
    rng = np.random.default_rng(7)
    x, y = rng.standard_normal((2, 5, 3)), rng.standard_normal((2, 5, 2))
    return x.astype(dtype), y.astype(dtype)


def _loss(m, x, y):
    return np.sum((m(x) - y) ** 2)


def _grads(model, engine, x, y):
    target = Duplicated(model) if engine == "Duplicated" else model
    g = gradient(_loss, target, Const(x), Const(y))[0]
    return [np.array(a) for _, a in leaves(g)]


def _with_biases(model, seed):
    rng = np.random.default_rng(seed)
    for layer in model:
        target = layer.bias if isinstance(layer, Dense) else layer.b
        target[:] = 0.3 * rng.standard_normal(target.shape)
    return model


@pytest.mark.parametrize("engine", ["tape", "Duplicated"])
def test_gradients_match_finite_differences(engine):
    m = _with_biases(_model(np.float64), 1)
    x, y = _data(np.float64)
    grads = _grads(m, engine, x, y)
    rng = np.random.default_rng(0)
    for (path, p), g in zip(leaves(m), grads):
        for idx in {tuple(rng.integers(0, n) for n in p.shape) for _ in range(4)}:
            old, h = p[idx], 1e-6
            p[idx] = old + h
            up = _loss(m, x, y)
            p[idx] = old - h
            down = _loss(m, x, y)
            p[idx] = old
            assert g[idx] == pytest.approx((up - down) / (2 * h), rel=1e-5, abs=1e-8), (path, idx)


def test_engines_agree_in_float32():
    m = _with_biases(_model(np.float32), 2)
    x, y = _data(np.float32)
    for a, b in zip(_grads(m, "tape", x, y), _grads(m, "Duplicated", x, y)):
        assert np.abs(a).max() > 0
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("rule", [optim.Descent(), optim.Momentum(), optim.Nesterov(),
                                  optim.RMSProp(), optim.Adam(), optim.AdamW(), optim.AdaGrad(),
                                  optim.ClipGrad(), optim.ClipNorm(), optim.WeightDecay(),
                                  optim.OptimiserChain(optim.ClipNorm(), optim.Adam())])
def test_every_optimiser_rule_updates_every_weight(rule):
    m = _model(np.float32)
    before = [a.copy() for _, a in leaves(m)]
    x, y = _data(np.float32)
    state = optim.setup(rule, m)
    optim.update(state, m, gradient(_loss, m, Const(x), Const(y))[0])
    for (path, a), b in zip(leaves(m), before):
        assert not np.array_equal(a, b), path


def test_learns_running_sums_on_both_engines():
    """Targets: the running sums of the first two features.  The model and loss of
    ``test_engines_agree_in_float32`` (so its compiled program is reused); the same Adam
    steps on both engines."""
    rng = np.random.default_rng(0)
    xs = rng.uniform(-1, 1, (6, 2, 5, 3)).astype(np.float32)
    data = [(x, np.cumsum(x[:, :, :2], axis=1)) for x in xs]
    m_tape, m_dup = _model(np.float32), _model(np.float32)
    dup = Duplicated(m_dup)
    s_tape, s_dup = optim.setup(optim.Adam(0.02), m_tape), optim.setup(optim.Adam(0.02), dup)
    losses = []
    for epoch in range(15):
        for x, y in data:
            l_tape, g_tape = withgradient(_loss, m_tape, Const(x), Const(y))
            l_dup, g_dup = withgradient(_loss, dup, Const(x), Const(y))
            assert l_dup == pytest.approx(l_tape, rel=1e-3)
            optim.update(s_tape, m_tape, g_tape[0])
            optim.update(s_dup, dup, g_dup[0])
        losses.append(sum(_loss(m_tape, x, y) for x, y in data))
    assert losses[-1] < 0.2 * losses[0], losses


# -- printing, saving, errors ----------------------------------------------------------------
def test_show_in_flux_format():
    assert repr(_model(np.float32)).splitlines() == [
        "Chain(",
        "  RNN(3 => 4, tanh),                    # 32 parameters",
        "  GRU(4 => 4),                          # 108 parameters",
        "  LSTM(4 => 3),                         # 96 parameters",
        "  Dense(3 => 2),                        # 8 parameters",
        ")                   # Total: 11 arrays, 244 parameters, 976 bytes."]
    assert repr(RNN(2, 5, relu)) == "RNN(2 => 5, relu)   # 40 parameters"
    assert repr(LSTM(2, 5)) == "LSTM(2 => 5)        # 160 parameters"
    assert [a.shape for _, a in leaves(GRU(2, 5))] == [(15, 2), (15, 5), (15,)]


def test_save_load_round_trip(tmp_path):
    m = _with_biases(_model(np.float64), 3)
    path = tmp_path / "m.npz"
    save(path, m)
    fresh = load(path, _model(np.float64))
    for (p, a), (q, b) in zip(leaves(m), leaves(fresh)):
        assert p == q and np.array_equal(a, b)
    x, _ = _data(np.float64)
    np.testing.assert_array_equal(fresh(x), m(x))


@pytest.mark.parametrize("layer,shape,expected", [
    (RNN(3, 4), (2, 5, 2), r"RNN\(3 => 4, tanh\) expects an input of shape \(batch, time, 3\), got shape \(2, 5, 2\)"),
    (LSTM(3, 4), (5, 3), r"LSTM\(3 => 4\) expects an input of shape \(batch, time, 3\), got shape \(5, 3\)"),
    (GRU(3, 4), (1, 2, 5, 3), r"GRU\(3 => 4\) expects an input of shape \(batch, time, 3\)"),
])
def test_bad_input_names_layer_and_expected_shape(layer, shape, expected):
    with pytest.raises(ValueError, match=expected):
        layer(np.zeros(shape, np.float32))


def test_unsupported_activation_is_refused():
    with pytest.raises(ValueError, match="RNN supports the activations identity, relu, tanh, σ"):
        RNN(2, 3, np.sin)
