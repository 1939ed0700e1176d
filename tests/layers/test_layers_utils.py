"""Utilities: one-hot encoding, initialisation, precision, destructure, batches, saving."""
import numpy as np
import pytest

import layers as L
from layers import Chain, Dense, Embedding, tanh


def model():
    return Chain(Dense(2, 3, tanh, rng=0), Chain(enc=Embedding(4, 2, rng=1)), Dense(3, 1, bias=False, rng=2))


def test_only():
    assert L.only(np.array([2.5])) == 2.5 and L.only(np.array([[1.0]])) == 1.0
    with pytest.raises(ValueError, match="exactly one"):
        L.only(np.ones(2))


def test_onehot_onecold():
    np.testing.assert_array_equal(L.onehot("b", "abc"), [False, True, False])
    b = L.onehotbatch([2, 0, 2], range(3))
    assert b.shape == (3, 3) and b.dtype == bool
    np.testing.assert_array_equal(L.onecold(b), [2, 0, 2])
    assert L.onecold(np.array([0.1, 0.7, 0.2]), "abc") == "b"
    assert L.onecold(b, ["x", "y", "z"]) == ["z", "x", "z"]
    with pytest.raises(ValueError, match="labels"):
        L.onehot(5, range(3))


def test_glorot_uniform():
    w = L.glorot_uniform(30, 20, rng=0)
    assert w.shape == (30, 20) and w.dtype == np.float32
    a = np.sqrt(6 / 50)
    assert np.abs(w).max() <= a and np.abs(w).max() > 0.9 * a
    assert abs(w.std() - a / np.sqrt(3)) < 0.05 * a
    np.testing.assert_array_equal(w, L.glorot_uniform(30, 20, rng=np.random.default_rng(0)))
    assert L.glorot_uniform(5, rng=1, dtype=np.float64).dtype == np.float64


def test_f32_f64():
    m = model()
    m64 = L.f64(m)
    assert type(m64) is Chain and m64[0].weight.dtype == np.float64 and m[0].weight.dtype == np.float32
    assert m64[0].activation is tanh and m64[2].bias is None
    np.testing.assert_array_equal(m64[1]["enc"].weight, m[1]["enc"].weight)
    assert L.f32(m64)[0].weight.dtype == np.float32


def test_destructure_roundtrip():
    m = model()
    flat, re = L.destructure(m)
    assert flat.shape == (6 + 3 + 8 + 3,) and flat.dtype == np.float32
    m2 = re(flat * 2)
    assert type(m2) is Chain and m2[0].activation is tanh
    np.testing.assert_allclose(m2[0].weight, 2 * m[0].weight)
    np.testing.assert_allclose(m2[1]["enc"].weight, 2 * m[1]["enc"].weight)
    np.testing.assert_array_equal(L.destructure(m2)[0], flat * 2)
    # the docs: destructure((weight = [6.0;;], bias = [6.0]))[1] |> norm ≈ 8.485
    v, _ = L.destructure({"weight": np.array([[6.0]]), "bias": np.array([6.0])})
    assert np.linalg.norm(v) == pytest.approx(8.48528137423857)
    with pytest.raises(ValueError, match="length 20"):
        re(flat[:3])


def test_batches():
    X, y = np.arange(20).reshape(10, 2), np.arange(10)
    bs = L.batches((X, y), 4)
    assert len(bs) == 3
    got = list(bs)
    assert [b[0].shape for b in got] == [(4, 2), (4, 2), (2, 2)]
    np.testing.assert_array_equal(np.concatenate([b[1] for b in got]), y)
    sh = L.batches(y, 3, shuffle=True, rng=0)
    e1, e2 = np.concatenate(list(sh)), np.concatenate(list(sh))
    assert sorted(e1) == list(y) and sorted(e2) == list(y) and not np.array_equal(e1, e2)
    d = next(iter(L.batches({"x": X, "y": y}, 5)))
    assert set(d) == {"x", "y"} and d["x"].shape == (5, 2)
    with pytest.raises(ValueError, match="first dimension"):
        L.batches((X, y[:5]), 2)


def test_state_loadmodel():
    m, other = model(), Chain(Dense(2, 3, tanh, rng=5), Chain(enc=Embedding(4, 2, rng=6)),
                              Dense(3, 1, bias=False, rng=7))
    s = L.state(m)
    assert isinstance(s["layers"], tuple) and s["layers"][2]["bias"] is None
    assert s["layers"][1]["layers"]["enc"]["weight"] is not m[1]["enc"].weight
    w = other[0].weight
    assert L.loadmodel(other, s) is other and other[0].weight is w
    for a, b in zip(L.destructure(m)[0], L.destructure(other)[0]):
        assert a == b
    with pytest.raises(ValueError, match="shape"):
        L.loadmodel(Chain(Dense(3, 3), Chain(enc=Embedding(4, 2)), Dense(3, 1, bias=False)), s)


def test_save_load(tmp_path):
    m, other = model(), model()
    other[0].weight[...] = 0
    path = tmp_path / "m.npz"
    L.save(path, m)
    assert set(np.load(path).files) == {"layers.0.weight", "layers.0.bias",
                                        "layers.1.layers.enc.weight", "layers.2.weight"}
    L.load(path, other)
    np.testing.assert_array_equal(other[0].weight, m[0].weight)
    with pytest.raises(ValueError, match="holds"):
        L.load(path, Chain(Dense(2, 3)))
