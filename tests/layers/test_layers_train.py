"""layers.train: Flux's train! semantics, the seed example, and stopping on NaN."""
import numpy as np
import pytest

import layers as L
from layers import Chain, Dense, tanh, only, train, gradient, NonFiniteLossError
from optim import Adam, Descent, setup, update
from adcore.tree import leaves


def seed_data():
    return [(np.array([x], np.float32), np.float32(2 * x - x ** 3))
            for x in np.arange(-2, 2.0001, 0.1)]


def test_seed_example_1000_epochs():
    # The Flux PR workload: Chain(Dense(1 => 23, tanh), Dense(23 => 1, bias=false), only), Adam,
    # 41 samples, one step per sample; the full 1000 epochs take about 9 s with the tape engine.
    data = seed_data()
    model = Chain(Dense(1, 23, tanh, rng=0), Dense(23, 1, bias=False, rng=1), only)
    state = setup(Adam(), model)
    loss = lambda m, x, y: (m(x) - y) ** 2
    first = np.mean(train(loss, model, data, state))
    for _ in range(999):
        losses = train(loss, model, data, state)
    assert len(losses) == 41
    final = np.mean([loss(model, x, y) for x, y in data])
    assert final < 0.2 and final < 0.1 * first
    assert model[0].weight.dtype == np.float32


def test_train_equals_manual_loop_and_splats_tuples():
    data = seed_data()[:5]
    loss = lambda m, x, y: (m(x) - y) ** 2
    m1 = Chain(Dense(1, 4, tanh, rng=0), Dense(4, 1, rng=1), only)
    m2 = Chain(Dense(1, 4, tanh, rng=0), Dense(4, 1, rng=1), only)
    s1, s2 = setup(Descent(0.05), m1), setup(Descent(0.05), m2)
    losses = train(loss, m1, data, s1)
    for x, y in data:
        update(s2, m2, gradient(loss, m2, x, y)[0])
    for (_, a), (_, b) in zip(leaves(m1), leaves(m2)):
        np.testing.assert_array_equal(a, b)
    assert losses[0] == pytest.approx(float(loss(Chain(Dense(1, 4, tanh, rng=0), Dense(4, 1, rng=1),
                                                       only), *data[0])))


def test_non_tuple_items_passed_whole():
    m = Dense(2, 1, rng=0)
    seen = []

    def loss(m, item):
        seen.append(type(item))
        return np.sum(m(item["x"]) ** 2)

    out = train(loss, m, [{"x": np.ones(2, np.float32)}] * 3, setup(Descent(), m))
    assert len(out) == 3 and seen == [dict] * 3 and all(isinstance(v, float) for v in out)


def test_train_stops_on_nan():
    model = Chain(Dense(1, 3, tanh, rng=0), Dense(3, 1, rng=1), only)
    data = seed_data()[:6]
    data[3] = (data[3][0], np.float32(np.nan))
    calls = []

    def loss(m, x, y):
        calls.append(1)
        return (m(x) - y) ** 2

    # the weights before the bad item: a twin model trained on the three good items
    twin = Chain(Dense(1, 3, tanh, rng=0), Dense(3, 1, rng=1), only)
    train(lambda m, x, y: (m(x) - y) ** 2, twin, data[:3], setup(Adam(0.01), twin))
    before = [a.copy() for _, a in leaves(twin)]

    state = setup(Adam(0.01), model)

    with pytest.raises(NonFiniteLossError, match="data item 3") as err:
        train(loss, model, data, state)
    assert err.value.index == 3 and np.isnan(err.value.loss)
    assert len(calls) == 4                 # items 0, 1, 2 and the bad item 3; nothing after
    for (_, a), b in zip(leaves(model), before):
        np.testing.assert_array_equal(a, b)


def test_train_inf_loss_and_rule_instead_of_state():
    m = Dense(1, 1, rng=0)
    with pytest.raises(NonFiniteLossError, match="inf"):
        train(lambda m, x: np.sum(m(x)) + np.float32(np.inf), m, [np.ones(1, np.float32)], setup(Descent(), m))
    with pytest.raises(TypeError, match="setup"):
        train(lambda m, x: np.sum(m(x)), m, [np.ones(1, np.float32)], Adam())


def test_progress_bar(capsys):
    m = Dense(1, 1, rng=0)
    data = [(np.ones(1, np.float32), np.float32(1.0))] * 4
    out = train(lambda m, x, y: np.sum((m(x) - y) ** 2), m, data, setup(Descent(), m), progress=True)
    assert len(out) == 4
    assert "4/4" in capsys.readouterr().err


def test_classifier_with_batches():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 2)).astype(np.float32)
    labels = (X[:, 0] > X[:, 1]).astype(int) + (X.sum(1) > 1)
    Y = L.onehotbatch(labels, range(3))
    model = Chain(Dense(2, 16, L.relu, rng=1), Dense(16, 3, rng=2))
    state = setup(Adam(0.02), model)
    loader = L.batches((X, Y), 16, shuffle=True, rng=3)
    for _ in range(40):
        train(lambda m, x, y: L.logitcrossentropy(m(x), y), model, loader, state)
    acc = np.mean(L.onecold(model(X)) == labels)
    assert acc > 0.9
