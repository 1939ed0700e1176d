"""train / update / setup with Duplicated(model): the compiled loop agrees with the tape
engine and with a Python loop of gradient + update; the NaN rule holds natively."""
import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import layers as L
import optim
from adcore import Duplicated
from adcore.tree import leaves
from layers import Chain, Dense, NonFiniteLossError, gradient, only, train
from layers.staging import program
from optim import (Adam, ClipNorm, Descent, Momentum, OptimiserChain, WeightDecay, freeze,
                   setup, update)
from optim.rules import Step


def seed_data():
    return [(np.array([x], np.float32), np.float32(2 * x - x ** 3))
            for x in np.arange(-2, 2.0001, 0.1)]


def seed_model():
    return Chain(Dense(1, 23, L.tanh, rng=0), Dense(23, 1, bias=False, rng=1), only)


def seed_loss(m, x, y):
    return (m(x) - y) ** 2


def native_loop_ran(loss):
    """Whether ``train`` compiled a native loop for ``loss``."""
    return any(any(e.loops.values()) for e in program._cache[program.cache_key(loss)])


def params(model):
    return [a.copy() for _, a in leaves(model)]


def test_seed_example_same_losses_as_tape_and_converges():
    data = seed_data()
    m_tape, m_dup = seed_model(), seed_model()
    s_tape, s_dup = setup(Adam(), m_tape), setup(Adam(), Duplicated(m_dup))
    dup = Duplicated(m_dup)
    for _ in range(5):
        l_tape = train(seed_loss, m_tape, data, s_tape)
        l_dup = train(seed_loss, dup, data, s_dup)
        np.testing.assert_allclose(l_dup, l_tape, rtol=1e-4, atol=1e-6)
    for a, b in zip(params(m_tape), params(m_dup)):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)
    first = np.mean(l_dup)
    for _ in range(995):                      # the full 1000 epochs: well under a second
        losses = train(seed_loss, dup, data, s_dup)
    assert losses.shape == (41,) and losses.dtype == np.float64
    assert np.mean(losses) < 0.2 and np.mean(losses) < 0.1 * first


def python_steps(loss, dup, data, state):
    """The losses of ``data``'s items, each one ``withgradient`` call and ``update``."""
    losses = []
    for x, y in data:
        val, _ = L.withgradient(loss, dup, x, y)
        update(state, dup)
        losses.append(float(val))
    return losses


def trained_both_ways(model, rule, data, loss=seed_loss):
    """``(d1, d2)``: two ``Duplicated`` copies of ``model()`` trained on ``loss`` over
    ``data`` with ``rule``, one by ``train`` (the compiled loop), one by gradient calls and
    updates in Python; their losses and parameters are checked equal."""
    d1, d2 = Duplicated(model()), Duplicated(model())
    s1, s2 = setup(rule, d1), setup(rule, d2)
    losses = train(loss, d1, data, s1)
    np.testing.assert_allclose(losses, python_steps(loss, d2, data, s2), rtol=1e-6)
    for a, b in zip(params(d1.val), params(d2.val)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    return d1, d2


@pytest.mark.parametrize("rule", [
    Adam(0.01), Descent(0.05), Momentum(0.01, 0.9),
    OptimiserChain(ClipNorm(0.5), WeightDecay(1e-3), Adam(0.01)),
], ids=["adam", "descent", "momentum", "chain"])
def test_compiled_loop_equals_python_steps(rule):
    d1, d2 = trained_both_ways(seed_model, rule, seed_data()[::4])
    for (_, a), (_, b) in zip(leaves(d1.dval), leaves(d2.dval)):   # the last item's gradient
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_frozen_leaf_is_not_updated_in_compiled_loop():
    model = seed_model()
    dup = Duplicated(model)
    state = setup(Adam(0.01), dup)
    freeze(state["layers"][1])
    before = model[1].weight.copy()
    train(seed_loss, dup, seed_data()[:5], state)
    np.testing.assert_array_equal(model[1].weight, before)
    assert not np.array_equal(model[0].weight, params(seed_model())[0])


def test_nan_stops_the_compiled_loop_without_applying_that_update():
    data = seed_data()[:6]
    data[3] = (np.array([np.nan], np.float32), np.float32(0.0))
    model, ref = seed_model(), seed_model()
    dup = Duplicated(model)
    with pytest.raises(NonFiniteLossError, match="data item 3") as info:
        train(seed_loss, dup, data, setup(Descent(0.1), dup))
    assert info.value.index == 3
    assert native_loop_ran(seed_loss)
    assert np.isnan(params(dup.dval)[0]).all()     # item 3's gradient, as after a gradient call
    train(seed_loss, ref, data[:3], setup(Descent(0.1), ref))       # items 0-2 applied, 3 not
    for a, b in zip(params(model), params(ref)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_a_checked_step_stops_the_compiled_loop_with_its_message():
    """ClipNorm's check (``Step.check``) on a non-finite gradient norm stops the native loop
    with the step's own message, as ``update`` does."""
    def model():
        m = Dense(1, 1, bias=False, rng=2)
        m.weight[...] = 0                   # stays 0: the items before 2 have gradient 0
        return m
    data = [(np.array([1.0 if k == 2 else 0.0], np.float32), np.float32(k != 2)) for k in range(4)]
    loss = lambda m, x, y: np.sum((m(x) + y) ** (1 / 3))     # item 2: d(0 ** (1/3)) = inf
    rule = OptimiserChain(ClipNorm(1.0), Descent(0.1))
    dup = Duplicated(model())
    with pytest.raises(FloatingPointError,
                       match=r"^ClipNorm: the gradient norm is not finite \(data item 2\)$"):
        train(loss, dup, data, setup(rule, dup))
    assert native_loop_ran(loss)
    with pytest.raises(FloatingPointError, match="^ClipNorm: the gradient norm is inf$"):
        m = model()
        train(loss, m, data, setup(rule, m))


def test_a_hyperparameter_changed_in_place_reaches_the_compiled_loop():
    data = seed_data()[::4]
    m1, m2 = seed_model(), seed_model()
    d1, d2 = Duplicated(m1), Duplicated(m2)
    r1, r2 = (OptimiserChain(WeightDecay(1e-3), Descent(0.01)) for _ in range(2))
    s1, s2 = setup(r1, d1), setup(r2, d2)
    for eta in (0.01, 0.05):
        r1.rules[1].eta = r2.rules[1].eta = eta        # inside a chain, not through adjust
        train(seed_loss, d1, data, s1)                 # the second call: the same plan's state
        for x, y in data:
            L.withgradient(seed_loss, d2, x, y)
            update(s2, d2)
    for a, b in zip(params(m1), params(m2)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_arrays_replaced_between_compiled_train_calls_are_the_ones_trained():
    """The loop takes the arrays as addresses: another weight or shadow array in place of
    one between calls (the same plan), or a new setup, is followed, the old one left alone.
    The reference model trains with a loss of its own (its own program and plan)."""
    def ref_loss(m, x, y):
        return (m(x) - y) ** 2

    data = seed_data()[::8]
    m1, m2 = seed_model(), seed_model()
    d1, d2 = Duplicated(m1), Duplicated(m2)
    s1, s2 = setup(Adam(), d1), setup(Adam(), d2)
    train(seed_loss, d1, data, s1)
    train(ref_loss, d2, data, s2)
    loops = program.lookup(seed_loss, (d1,) + data[0])[0].loops
    compiled = len(loops)
    old = m1[0].weight
    m1[0].weight = old.copy()
    d1.dval[0].weight = np.zeros_like(old)
    kept = old.copy()
    for new_state in (False, True):
        if new_state:
            s1, s2 = setup(Adam(), d1), setup(Adam(), d2)
        np.testing.assert_allclose(train(seed_loss, d1, data, s1),
                                   train(ref_loss, d2, data, s2), rtol=1e-6)
    np.testing.assert_array_equal(old, kept)
    for a, b in zip(params(m1), params(m2)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert len(loops) == compiled      # a new state of the same structure: the same loop


def test_batched_items_and_non_tuple_items():
    rng = np.random.default_rng(3)
    model, ref = Chain(Dense(3, 4, L.relu, rng=4), Dense(4, 2, rng=5)), \
        Chain(Dense(3, 4, L.relu, rng=4), Dense(4, 2, rng=5))
    xs = [rng.standard_normal((8, 3)).astype(np.float32) for _ in range(4)]
    loss = lambda m, x: L.mse(m(x), np.zeros((8, 2), np.float32))
    dup = Duplicated(model)
    l_dup = train(loss, dup, xs, setup(Descent(0.1), dup))
    l_tape = train(loss, ref, xs, setup(Descent(0.1), ref))
    np.testing.assert_allclose(l_dup, l_tape, rtol=1e-4)


def test_items_of_different_shapes_fall_back_to_steps():
    model, ref = Dense(2, 1, rng=6), Dense(2, 1, rng=6)
    data = [(np.ones((1, 2), np.float32),), (np.ones((3, 2), np.float32),)]
    loss = lambda m, x: np.sum(m(x) ** 2)
    dup = Duplicated(model)
    l_dup = train(loss, dup, data, setup(Descent(0.1), dup))
    l_tape = train(loss, ref, data, setup(Descent(0.1), ref))
    np.testing.assert_allclose(l_dup, l_tape, rtol=1e-5)


def test_update_with_stored_gradient_equals_explicit_gradient():
    x, y = seed_data()[7]
    m1, m2 = seed_model(), seed_model()
    dup = Duplicated(m1)
    s1, s2 = setup(Adam(), dup), setup(Adam(), m2)
    assert s1 == s2
    g = gradient(seed_loss, dup, x, y)[0]
    update(s2, m2, {"layers": tuple(dict(l) if l else None for l in g["layers"])})
    update(s1, dup)
    for a, b in zip(params(m1), params(m2)):
        np.testing.assert_array_equal(a, b)


def _odd_items():
    """Data whose fourth item differs from the others in one way each (the native loop
    refuses it; train steps through the items in Python)."""
    base = seed_data()[:6]
    x, y = base[3]
    yield "float64 input", base[:3] + [(x.astype(np.float64), y)] + base[4:], None
    yield "input of shape (1, 1)", base[:3] + [(x.reshape(1, 1), y)] + base[4:], None
    yield "input that is a list", base[:3] + [([0.1], y)] + base[4:], None
    yield "python float target", base[:3] + [(x, float(y))] + base[4:], None
    yield "input of shape (2,)", base[:3] + [(np.ones(2, np.float32), y)] + base[4:], ValueError
    yield "shorter tuple", base[:3] + [(x,)] + base[4:], TypeError


@pytest.mark.parametrize("name, data, error", list(_odd_items()),
                         ids=lambda v: v if isinstance(v, str) else "")
def test_an_item_unlike_the_first_is_trained_as_the_tape_engine_does(name, data, error):
    m_tape, m_dup = seed_model(), seed_model()
    dup = Duplicated(m_dup)
    s_tape, s_dup = setup(Descent(0.05), m_tape), setup(Descent(0.05), dup)
    if error is not None:
        with pytest.raises(error):
            train(seed_loss, m_tape, data, s_tape)
        with pytest.raises(error):
            train(seed_loss, dup, data, s_dup)
        for a, b in zip(params(m_tape), params(m_dup)):    # the items before it applied
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7)
        return
    for _ in range(2):
        np.testing.assert_allclose(train(seed_loss, dup, data, s_dup),
                                   train(seed_loss, m_tape, data, s_tape), rtol=1e-5, atol=1e-7)


def test_items_changed_in_place_between_train_calls_are_read_again():
    """The stacked items live in buffers kept from call to call: values written into the
    data's arrays, an item replaced and another number of items all reach the loop."""
    data = seed_data()[::3]
    m_tape, m_dup = seed_model(), seed_model()
    dup = Duplicated(m_dup)
    s_tape, s_dup = setup(Adam(0.01), m_tape), setup(Adam(0.01), dup)

    def both(items):
        np.testing.assert_allclose(train(seed_loss, dup, items, s_dup),
                                   train(seed_loss, m_tape, items, s_tape), rtol=1e-5, atol=1e-7)
    both(data)
    data[2][0][0] = 1.75                        # in place
    data[4] = (np.array([-0.3], np.float32), np.float32(0.5))
    both(data)
    both(data[:5])
    both(data)
    for a, b in zip(params(m_tape), params(m_dup)):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7)
    plan = program.lookup(seed_loss, (dup,) + data[0])[0].plans[id(s_dup)]
    assert plan.stack.n == len(data)          # the native loop ran


@pytest.mark.parametrize("engine", ["tape", "duplicated"])
def test_epochs_run_as_that_many_train_calls(engine):
    data = seed_data()[::5]
    m1, m2 = seed_model(), seed_model()
    a, b = (m1, m2) if engine == "tape" else (Duplicated(m1), Duplicated(m2))
    s1, s2 = setup(Adam(0.01), a), setup(Adam(0.01), b)
    losses = train(seed_loss, a, data, s1, epochs=3)
    expected = [v for _ in range(3) for v in train(seed_loss, b, data, s2)]
    assert len(losses) == 3 * len(data)
    np.testing.assert_allclose(losses, expected, rtol=1e-6)
    for x, y in zip(params(m1), params(m2)):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)


def test_a_non_finite_loss_names_its_epoch_and_stops_there():
    """The loss turns NaN in the third epoch (a Descent step too large for the data):
    the native loop stops on that item, as train one epoch at a time does."""
    data = [(np.array([v], np.float32), np.float32(v)) for v in (1.0, 30.0)]
    loss = lambda m, x, y: np.sum((m(x) - y) ** 4)
    m1, m2 = Dense(1, 1, rng=1), Dense(1, 1, rng=1)
    d1 = Duplicated(m1)
    s1, s2 = setup(Descent(0.01), d1), setup(Descent(0.01), m2)
    with pytest.raises(NonFiniteLossError) as native:
        train(loss, d1, data, s1, epochs=50)
    for epoch in range(50):
        try:
            train(loss, m2, data, s2)
        except NonFiniteLossError as e:
            stepped = e
            break
    assert (native.value.index, native.value.epoch) == (stepped.index, epoch)
    assert native.value.epoch > 0 and f"in epoch {epoch}" in str(native.value)
    assert native_loop_ran(loss)
    np.testing.assert_allclose(m1.weight, m2.weight, rtol=1e-5)


@pytest.mark.parametrize("epochs", [0, -1, 2.0, True, None])
def test_epochs_must_be_a_positive_int(epochs):
    model = seed_model()
    with pytest.raises(ValueError, match="epochs must be a positive int"):
        train(seed_loss, Duplicated(model), seed_data(), setup(Adam(), model), epochs=epochs)


def test_two_optimiser_states_trained_in_turn_keep_their_plans():
    """Each state trained with one compiled program keeps its own plan (buffers, loop
    arguments) between calls, and each model follows its own state."""
    data = seed_data()[::6]
    m1, m2, r1, r2 = seed_model(), seed_model(), seed_model(), seed_model()
    d1, d2 = Duplicated(m1), Duplicated(m2)
    s1, s2 = setup(Adam(0.01), d1), setup(Descent(0.05), d2)
    t1, t2 = setup(Adam(0.01), r1), setup(Descent(0.05), r2)
    plans = None
    for _ in range(3):
        np.testing.assert_allclose(train(seed_loss, d1, data, s1), train(seed_loss, r1, data, t1),
                                   rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(train(seed_loss, d2, data, s2), train(seed_loss, r2, data, t2),
                                   rtol=1e-5, atol=1e-7)
        now = program.lookup(seed_loss, (d1,) + data[0])[0].plans
        assert plans is None or all(now[k] is v for k, v in plans.items())
        plans = dict(now)
    assert {id(s1), id(s2)} <= set(plans)


def test_zero_dimensional_targets_are_stacked():
    data = [(x, np.array(y)) for x, y in seed_data()[::4]]
    odd = data[:2] + [(data[2][0], np.array(data[2][1], np.float64))] + data[3:]
    for items in (data, odd):
        m_tape, m_dup = seed_model(), seed_model()
        dup = Duplicated(m_dup)
        s_tape, s_dup = setup(Descent(0.05), m_tape), setup(Descent(0.05), dup)
        np.testing.assert_allclose(train(seed_loss, dup, items, s_dup, epochs=2),
                                   train(seed_loss, m_tape, items, s_tape, epochs=2),
                                   rtol=1e-5, atol=1e-7)
        if items is data:                    # stacked for the native loop
            stack = program.lookup(seed_loss, (dup,) + data[0])[0].plans[id(s_dup)].stack
            assert [float(y) for _, y in data] in [b.reshape(-1).tolist() for b in stack.buffers.values()]


@pytest.mark.parametrize("change", ["values", "shape", "dtype", "resize"])
def test_the_same_items_changed_in_place_are_checked_again(change):
    """The second call gets the very item objects (only their arrays are copied again):
    new values are read, and an array whose shape, dtype or size changed in place is
    refused by the native loop (train steps through the items as the tape engine does)."""
    data = seed_data()[::5]
    m_tape, m_dup = seed_model(), seed_model()
    dup = Duplicated(m_dup)
    s_tape, s_dup = setup(Descent(0.05), m_tape), setup(Descent(0.05), dup)
    train(seed_loss, dup, data, s_dup)
    train(seed_loss, m_tape, data, s_tape)
    x = data[3][0]
    if change == "values":
        x[0] = 0.25
    elif change == "shape":
        x.shape = (1, 1)
    elif change == "dtype":
        x.dtype = np.int32           # the same bytes read as integers
    else:                            # the total length unchanged; a 2-input item fails
        x.resize(2, refcheck=False)
        data[4][0].resize(0, refcheck=False)
        for model, state in ((dup, s_dup), (m_tape, s_tape)):
            with pytest.raises(ValueError, match="matmul"):
                train(seed_loss, model, data, state)
    if change != "resize":
        np.testing.assert_allclose(train(seed_loss, dup, data, s_dup),
                                   train(seed_loss, m_tape, data, s_tape), rtol=1e-5, atol=1e-7)
    for a, b in zip(params(m_tape), params(m_dup)):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7)


def test_a_layer_used_twice_is_trained_as_python_steps_train_it():
    """A parameter read in two places (one Dense layer applied twice) gathers its gradient
    from both shadows in the compiled loop, as a gradient call and update do."""
    def model():
        shared = Dense(3, 3, L.tanh, rng=0)
        return Chain(shared, shared, Dense(3, 1, rng=1), only)
    data = [(np.array([v, -v, 0.5 * v], np.float32), np.float32(v * v)) for v in np.linspace(-1, 1, 7)]
    d1, _ = trained_both_ways(model, Adam(0.01), data)
    staged = program.lookup(seed_loss, (d1,) + data[0])[0]
    assert any(len(shadows) == 2 for (spec, _), loop in staged.loops.items() if loop
               for g in spec.groups for _, _, shadows in g.parts)     # two shadows, one gradient


def test_float64_models_train_in_the_native_loop_as_python_steps_do():
    """The loop's own code (gathering, subtracting the step, the checks) in double
    precision, with the kernels lowered for float64 arrays."""
    def model():
        return Chain(Dense(1, 7, L.tanh, rng=0, dtype=np.float64),
                     Dense(7, 1, rng=1, dtype=np.float64), only)
    data = [(np.array([x]), 2 * x - x ** 3) for x in np.linspace(-2, 2, 9)]
    for rule in (Adam(0.01), OptimiserChain(ClipNorm(0.5), Momentum(0.01, 0.9))):
        trained_both_ways(model, rule, data)
    assert native_loop_ran(seed_loss)


class _Capped(Descent):
    """Descent whose kernel raises when a gradient entry exceeds ``cap`` (an exception
    raised inside the native loop)."""

    @staticmethod
    @numba.njit
    def capped(x, g, eta, cap):
        for i in range(g.size):
            if abs(g[i]) > cap:
                raise ValueError("a gradient entry is over the cap")
            g[i] *= eta

    def __init__(self, eta, cap):
        super().__init__(eta)
        self.cap = cap

    def steps(self, state):
        return [Step(self.capped, (), (float(self.eta), float(self.cap)))]


def test_an_exception_in_an_optimiser_kernel_is_raised_by_train():
    data = seed_data()[::4]
    dup = Duplicated(seed_model())
    state = setup(_Capped(0.01, 1e-3), dup)
    with pytest.raises(ValueError, match="^a gradient entry is over the cap$"):
        train(seed_loss, dup, data, state)
    assert native_loop_ran(seed_loss)
    trained_both_ways(seed_model, _Capped(0.01, 1e9), data)    # a cap never reached


class _Returning(Descent):
    """Descent whose kernel returns an array (an object the loop does not take)."""

    @staticmethod
    @numba.njit
    def returning(x, g, eta):
        for i in range(g.size):
            g[i] *= eta
        return g

    def steps(self, state):
        return [Step(self.returning, (), (float(self.eta),))]


def test_a_loop_that_cannot_be_compiled_trains_as_python_steps_and_is_not_tried_again():
    data = seed_data()[::4]
    d1, _ = trained_both_ways(seed_model, _Returning(0.05), data)
    staged = program.lookup(seed_loss, (d1,) + data[0])[0]

    def loops():
        return [loop for (_, kernels), loop in staged.loops.items()
                if any(k is _Returning.returning for k, _ in kernels)]
    assert loops() == [None]
    state = setup(_Returning(0.05), d1)
    for _ in range(2):
        train(seed_loss, d1, data, state)
    assert loops() == [None]


class _TowardsItself(Descent):
    """Descent plus ``lam * x``, reading ``x`` through a state that is the parameter
    array itself: the loop's arrays overlap (its kernels are compiled for arrays that
    share no memory)."""

    @staticmethod
    @numba.njit
    def pulled(x, g, same, eta, lam):
        for i in range(g.size):
            g[i] = eta * (g[i] + lam * same[i])

    def init(self, x):
        return x.reshape(-1)

    def steps(self, state):
        return [Step(self.pulled, (state,), (float(self.eta), 0.5))]


def test_arrays_that_share_memory_train_as_python_steps():
    data = seed_data()[::4]
    d1, _ = trained_both_ways(seed_model, _TowardsItself(0.05), data)
    plan = next(p for p in program.lookup(seed_loss, (d1,) + data[0])[0].plans.values()
                if p.marks[0][1].__class__ is _TowardsItself)
    assert plan.checked is None            # the native loop never ran


def test_losses_whose_loops_differ_only_in_the_gradient_get_loops_of_their_own():
    """The loop inlines its gradient: two losses with the same arrays, shapes and optimiser
    (the same loop but for the gradient) are keyed apart, in memory and on disk."""
    def scaled(m, x, y):
        return 3.0 * (m(x) - y) ** 2

    data = seed_data()[::4]
    for loss in (seed_loss, scaled):
        d1, _ = trained_both_ways(seed_model, Adam(0.01), data, loss)
        assert native_loop_ran(loss)
    first, second = (program.lookup(f, (d1,) + data[0])[0] for f in (seed_loss, scaled))
    assert {spec for spec, _ in first.loops} & {spec for spec, _ in second.loops}   # same specs


def _trained_exactly_as_python_steps(rule, data, diverge=None):
    """Train two seed models with ``rule``, by ``train`` and by gradient + update calls;
    their parameters, optimiser states and losses agree exactly.  ``diverge(state)``
    changes both states the same way first.  The plan ``train`` used."""
    d1, d2 = Duplicated(seed_model()), Duplicated(seed_model())
    s1, s2 = setup(rule, d1), setup(rule, d2)
    for s in (s1, s2):
        if diverge:
            diverge(s)
    for _ in range(2):
        np.testing.assert_array_equal(train(seed_loss, d1, data, s1), python_steps(seed_loss, d2, data, s2))
    for a, b in zip(params(d1.val) + params(d1.dval), params(d2.val) + params(d2.dval)):
        np.testing.assert_array_equal(a, b)      # the last item's gradient too
    assert s1 == s2
    return program.lookup(seed_loss, (d1,) + data[0])[0].plans[id(s1)]


@pytest.mark.parametrize("rule, packed", [
    (Adam(0.01), True), (Descent(0.05), True), (Momentum(0.01, 0.9), True),
    (OptimiserChain(WeightDecay(1e-3), Adam(0.01)), True),
    (OptimiserChain(ClipNorm(0.5), Adam(0.01)), False),    # ClipNorm mixes an array's entries
    (optim.Nesterov(0.01, 0.9), True), (optim.RMSProp(0.01), True),
    (optim.AdamW(0.01, lambda_=0.1), True), (optim.AdaGrad(0.1), True),
], ids=["adam", "descent", "momentum", "decay-adam", "clipnorm-adam", "nesterov", "rmsprop",
        "adamw", "adagrad"])
def test_parameters_whose_steps_are_per_element_take_them_at_once(rule, packed):
    """The three parameters of the seed model laid end to end take one run of Adam's
    kernel per step (its powers of beta the first parameter's, copied to the others):
    the same numbers as a step per array.  The kernels the loop writes straight to LLVM IR
    (``direct_ir.kernel_ir``: all but AdaGrad's and ClipNorm's, which Numba lowers) compute
    exactly what ``update``'s Numba-compiled ones do."""
    plan = _trained_exactly_as_python_steps(rule, seed_data()[::4])
    assert plan.packed == packed


def test_records_that_differ_between_parameters_keep_the_steps_apart():
    """One leaf's Adam powers of beta a step ahead of the others' (its own ``update``):
    the packed loop refuses natively before touching anything and each parameter takes
    its own steps."""
    def diverge(state):
        leaf = state["layers"][1]["weight"]
        leaf.state[2][:] = leaf.state[2] * np.array(leaf.rule.beta)
    plan = _trained_exactly_as_python_steps(Adam(0.01), seed_data()[::4], diverge)
    assert not plan.packed and plan.call is not None


def test_the_same_items_are_copied_again_natively():
    """A repeat call with the very same items copies their arrays through one builtin
    (``fastcall.row_copier``) that checks each; a value changed in place is read (what it
    refuses is in test_the_same_items_changed_in_place_are_checked_again)."""
    data = seed_data()[::5]
    d1, d2 = Duplicated(seed_model()), Duplicated(seed_model())
    s1, s2 = setup(Descent(0.05), d1), setup(Descent(0.05), d2)
    np.testing.assert_array_equal(train(seed_loss, d1, data, s1), python_steps(seed_loss, d2, data, s2))
    data[2][0][0] = 0.3
    np.testing.assert_array_equal(train(seed_loss, d1, data, s1), python_steps(seed_loss, d2, data, s2))
    stack = program.lookup(seed_loss, (d1,) + data[0])[0].plans[id(s1)].stack
    assert len(stack.copiers) == 1


def test_large_parameters_trained_one_item_a_call_are_not_copied_end_to_end():
    """Packing copies the parameters and states in and out at each call: for a model of
    8,000 parameters and one item a call, the steps stay per array."""
    def model():
        return Chain(Dense(40, 200, L.tanh, rng=3), Dense(200, 1, rng=4), only)
    data = [(np.linspace(-1, 1, 40, dtype=np.float32), np.float32(0.5))]
    d1, d2 = Duplicated(model()), Duplicated(model())
    s1, s2 = setup(Adam(0.01), d1), setup(Adam(0.01), d2)
    for _ in range(2):
        np.testing.assert_array_equal(train(seed_loss, d1, data, s1), python_steps(seed_loss, d2, data, s2))
    assert not program.lookup(seed_loss, (d1,) + data[0])[0].plans[id(s1)].packed


def width_loss(m, x, y):
    return np.sum((m(x) - y) ** 2)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 40), st.sampled_from([np.float32, np.float64]), st.integers(0, 2**16))
def test_packed_parameters_of_any_width_train_exactly_as_python_steps(width, dtype, seed):
    """Parameters of any size laid end to end in the packed buffers, each from a cache line
    (the gaps zero), and workspace buffers reserving whole vectors: ``train`` gives the
    losses, parameters and optimiser states that gradient + update calls give."""
    rng = np.random.default_rng(seed)
    make = lambda: Chain(Dense(3, width, L.tanh, dtype=dtype, rng=seed),
                         Dense(width, 2, dtype=dtype, rng=seed + 1))
    data = [(rng.standard_normal(3).astype(dtype), rng.standard_normal(2).astype(dtype))
            for _ in range(12)]
    d1, d2 = Duplicated(make()), Duplicated(make())
    s1, s2 = setup(Adam(0.01), d1), setup(Adam(0.01), d2)
    for _ in range(2):                 # 48 steps a call: enough for packing to pay
        np.testing.assert_array_equal(
            train(width_loss, d1, data, s1, epochs=4),
            np.concatenate([python_steps(width_loss, d2, data, s2) for _ in range(4)]))
    for a, b in zip(params(d1.val) + params(d1.dval), params(d2.val) + params(d2.dval)):
        np.testing.assert_array_equal(a, b)
    assert s1 == s2
    assert program.lookup(width_loss, (d1,) + data[0])[0].plans[id(s1)].packed
