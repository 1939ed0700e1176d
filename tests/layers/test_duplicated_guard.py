"""Duplicated(model) never replays stale values: whatever the loss reads besides its
arguments (globals, also through helper functions; closure cells, nested; default
arguments; attributes of objects; arrays changed in place, converted or strided) is an
input of the compiled program or guarded.  Every call is checked against the tape engine
(the same loss on the plain model)."""
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import adcore
import layers as L
from adcore import Duplicated
from layers import Chain, Dense, Embedding, gradient, train, withgradient
from optim import Descent, setup
from layers.staging import program
from layers.staging.reads import HiddenStateError
from test_duplicated import assert_same

MODEL = Dense(3, 2, L.tanh, rng=0)
DUP = Duplicated(MODEL)
RNG = np.random.default_rng(0)


def check(f, model=MODEL, dup=DUP):
    """One call of ``f`` through ``Duplicated`` agrees with the tape engine."""
    val, grad = withgradient(f, dup)
    ref_val, ref_grad = withgradient(f, model)
    loss, ref = program.loss_part(val), program.loss_part(ref_val)
    assert float(loss) == pytest.approx(float(ref), rel=2e-5, abs=1e-6)
    assert_same(ref_grad[0], grad[0])
    assert_same(ref_grad[0], gradient(f, dup)[0])   # gradient's guard that runs the driver
    return float(loss)


def programs(f):
    return len(program._cache.get(program.cache_key(f), ()))


def data(shape=(3,), dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


# -- globals, read directly and through a helper function ---------------------------------
x, y = data(), data((2,))
SCALE = 1.0


def helper_loss(m, x, y):
    return np.sum((m(x) - y) ** 2) * SCALE


readme_loss = lambda m: (helper_loss(m, x, y), "aux")   # the README's pattern
direct_loss = lambda m: np.sum(m(x) * y)


def test_globals_rebound_are_inputs_without_recompiling():
    global x, y, SCALE
    losses = []
    for _ in range(4):
        x, y, SCALE = data(), data((2,)), float(RNG.uniform(0.5, 2))
        losses.append(check(readme_loss))
        check(direct_loss)
    assert len(set(losses)) == 4
    assert programs(readme_loss) == 1 and programs(direct_loss) == 1


def test_global_of_other_shape_or_kind_compiles_again():
    global x, SCALE
    x = data((4, 3))
    check(readme_loss)
    SCALE = 2                                  # an int: compared by value
    check(readme_loss)
    SCALE = 3
    check(readme_loss)
    x, SCALE = data(), 1.0


def test_rebound_helper_function_is_seen():
    global helper_loss
    original = helper_loss
    try:
        first = check(readme_loss)
        helper_loss = lambda m, x, y: np.sum(m(x) * y)
        assert check(readme_loss) != first
    finally:
        helper_loss = original


train_loss = lambda m, a, b: helper_loss(m, a, b)


def test_train_sees_globals_of_each_call():
    global SCALE
    items = [(data(), data((2,))) for _ in range(3)]
    m_tape, m_dup = Dense(3, 2, L.tanh, rng=4), Dense(3, 2, L.tanh, rng=4)
    s_tape, s_dup = setup(Descent(0.1), m_tape), setup(Descent(0.1), m_dup)
    for SCALE in (1.0, 3.0):
        np.testing.assert_allclose(train(train_loss, Duplicated(m_dup), items, s_dup),
                                   train(train_loss, m_tape, items, s_tape), rtol=1e-4)
    assert programs(train_loss) == 1
    SCALE = 1.0


# -- arrays changed in place -------------------------------------------------------------
BASE = data((3, 2))
X64 = data(dtype=np.float64)
inplace_loss = lambda m: np.sum(m(X64) ** 2) + np.sum(m(BASE[:, 1]) * m(x))


def test_arrays_mutated_in_place_contiguous_converted_and_strided():
    seen = set()
    for _ in range(3):
        BASE[:] = data((3, 2))                 # read through a strided view
        X64[:] = RNG.standard_normal(3)         # float64, converted to float32 by Dense
        x[:] = data()                           # contiguous float32
        seen.add(check(inplace_loss))
    assert len(seen) == 3 and programs(inplace_loss) == 1


argument_loss = lambda m, a, b: np.sum(m(a) * m(b))


def test_argument_arrays_mutated_in_place_converted_and_strided():
    a, base = data(dtype=np.float64), data((3, 2))
    for _ in range(3):
        a[:], base[:] = RNG.standard_normal(3), data((3, 2))
        g = gradient(argument_loss, DUP, a, base[:, 0])[0]
        assert_same(gradient(argument_loss, MODEL, a, base[:, 0])[0], g)


IDX = np.array([0, 2, 2])
EMB = Chain(Embedding(4, 3, rng=1), Dense(3, 1, rng=2))
EMB_DUP = Duplicated(EMB)
index_loss = lambda m: np.sum(m(IDX) ** 2)


def test_integer_arrays_are_guarded_by_content():
    for idx in ([1, 3, 0], [3, 3, 3], [1, 3, 0]):
        IDX[:] = idx
        check(index_loss, EMB, EMB_DUP)


# -- nested closures and default arguments ----------------------------------------------
def make_nested():
    a, scale = data(), 2.0

    def inner(m):
        return np.sum(m(a) ** 2) * scale

    def outer(m):
        return inner(m) + np.sum(m(a))

    def rebind(new_a, new_scale):
        nonlocal a, scale
        a, scale = new_a, new_scale

    return outer, rebind


def test_nested_closure_cells_rebound():
    outer, rebind = make_nested()
    seen = {check(outer)}
    for k in range(3):
        rebind(data(), 1.5 + k)
        seen.add(check(outer))
    assert len(seen) == 4 and programs(outer) == 1


def default_loss(m, a=data(), *, w=2.0):
    return np.sum(m(a)) * w


def test_default_arguments_rebound_and_mutated():
    seen = {check(default_loss)}
    default_loss.__defaults__[0][:] = data()
    seen.add(check(default_loss))
    default_loss.__defaults__ = (data(),)
    seen.add(check(default_loss))
    default_loss.__kwdefaults__["w"] = -1.0
    seen.add(check(default_loss))
    assert len(seen) == 4


# -- objects -----------------------------------------------------------------------------
class Config:
    """Its ``__init__`` reads RNG (through ``data``), which staging cannot see into: not
    refused, since the loss never runs it."""

    offset = 0.0                               # a class attribute an instance may shadow

    def __init__(self):
        self.target, self.weights = data((2,)), [0.5, 2.0]

    def penalty(self, h):
        return np.sum((h - self.target) ** 2) * self.weights[1] + self.offset


CFG = Config()
TEACHER = Dense(3, 2, L.sigmoid, rng=3)
object_loss = lambda m: CFG.penalty(m(x)) + np.sum(m(x) * TEACHER(x)) * CFG.weights[0]


def test_object_attributes_rebound_mutated_and_shadowed(monkeypatch):
    monkeypatch.setattr(Config, "penalty", Config.penalty)
    monkeypatch.setattr(Config, "offset", Config.offset)
    seen = {check(object_loss)}
    CFG.target[:] = data((2,))
    seen.add(check(object_loss))
    CFG.target = data((2,))
    seen.add(check(object_loss))
    CFG.weights[0] = 4.0
    seen.add(check(object_loss))
    TEACHER.weight[:] = data((2, 3))             # a captured model's weights, in place
    seen.add(check(object_loss))
    CFG.offset = 10.0                            # shadows the class attribute
    seen.add(check(object_loss))
    Config.offset = 5.0
    del CFG.offset
    seen.add(check(object_loss))
    Config.penalty = lambda self, h: np.sum(h * self.target)
    seen.add(check(object_loss))
    assert len(seen) == 8


# -- refused: what staging cannot see ----------------------------------------------------
GEN = np.random.default_rng(1)


@pytest.mark.parametrize("loss", [
    lambda m: np.sum(m(x) + np.random.normal(size=2)),
    lambda m: np.sum(m(x) + GEN.standard_normal(2)),
    lambda m: np.sum(m(x)) + np.sum(MODEL(x)),
], ids=["numpy-random", "generator", "model-also-global"])
def test_unseeable_reads_are_refused(loss):
    with pytest.raises(HiddenStateError):
        gradient(loss, DUP)
    assert issubclass(HiddenStateError, adcore.ADError)


COUNTER = [0]


def counting_loss(m):
    COUNTER[0] += 1
    return np.sum(m(x))


def test_loss_changing_what_it_reads_is_refused():
    with pytest.raises(adcore.ADError, match="changed something it reads"):
        gradient(counting_loss, DUP)


THRESHOLD = 0.5
branch_loss = lambda m: np.sum(m(x)) * (2.0 if THRESHOLD > 0 else -1.0)


def test_float_used_in_python_code_is_compared_by_value():
    global THRESHOLD
    first = check(branch_loss)
    THRESHOLD = -0.5
    assert check(branch_loss) == pytest.approx(-first / 2, rel=1e-5)
    THRESHOLD = 0.5


# -- random rebinding and mutation between calls -----------------------------------------
PX, PS, PBASE = data(), 1.0, data((3, 2))
PCFG = Config()


def make_property_loss():
    cell = data((2,))

    def loss(m, d=data((2,))):
        h = m(PX) + m(PBASE[:, 0])
        return np.sum((h - PCFG.target) ** 2) * PS + np.sum(h * cell * d)

    def set_cell(v):
        nonlocal cell
        cell = v

    return loss, set_cell


PROPERTY_LOSS, SET_CELL = make_property_loss()
STEPS = st.sampled_from(["rebind x", "mutate x", "scale", "rebind attr", "mutate attr",
                         "cell", "mutate default", "mutate base", "replace weight",
                         "replace shadow"])


@settings(max_examples=int(os.environ.get("ADCORE_PROPERTY_EXAMPLES", 25)), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.tuples(STEPS, st.sampled_from([np.float32, np.float64]),
                                st.booleans()), min_size=1, max_size=6),
       seed=st.integers(0, 2 ** 16))
def test_random_rebinding_and_mutation_between_calls(steps, seed):
    global PX, PS
    rng = np.random.default_rng(seed)
    for step, dtype, strided in steps:
        if step == "rebind x":
            PX = rng.standard_normal((3, 2) if strided else 3).astype(dtype)
            PX = PX[:, 1] if strided else PX
        elif step == "mutate x":
            PX[:] = rng.standard_normal(3)
        elif step == "scale":
            PS = float(rng.uniform(-2, 2))
        elif step == "rebind attr":
            PCFG.target = rng.standard_normal(2).astype(np.float32)
        elif step == "mutate attr":
            PCFG.target[:] = rng.standard_normal(2)
        elif step == "cell":
            SET_CELL(rng.standard_normal(2).astype(dtype))
        elif step == "mutate default":
            PROPERTY_LOSS.__defaults__[0][:] = rng.standard_normal(2)
        elif step == "replace weight":     # the driver's cached addresses must follow
            MODEL.weight = rng.standard_normal(MODEL.weight.shape).astype(np.float32)
        elif step == "replace shadow":
            DUP.dval.weight = np.full_like(MODEL.weight, 7.0)
        else:
            PBASE[:] = rng.standard_normal((3, 2))
        check(PROPERTY_LOSS)
    assert programs(PROPERTY_LOSS) <= 4          # dtypes of PX and the cell, not values


def test_replaced_model_arrays_are_used_and_must_be_contiguous():
    f = lambda m: np.sum(m(x) ** 2)
    check(f)
    old = MODEL.weight
    MODEL.weight = np.asfortranarray(RNG.standard_normal(old.shape).astype(np.float32))
    try:
        if MODEL.weight.flags.c_contiguous:        # a (2, 3) array: Fortran order is not C
            raise AssertionError("expected a non-contiguous weight")
        with pytest.raises(adcore.ActivityError, match="C-contiguous"):
            gradient(f, DUP)
        MODEL.weight = np.ascontiguousarray(MODEL.weight)
        check(f)
    finally:
        MODEL.weight = old
    check(f)


def test_a_plain_argument_then_wrapped_in_const_or_retyped_is_guarded():
    """The guard checks a plain argument's exact type (the isinstance test for Const and
    Duplicated is left out when it does): the same values wrapped in Const, or of another
    type, select another program, and each call agrees with the tape engine."""
    def loss(m, x, s):
        return np.sum(m(x) ** 2) * s

    x = RNG.standard_normal(3).astype(np.float32)
    for args in [(x, np.float32(2.0)), (adcore.Const(x), np.float32(2.0)),
                 (x, adcore.Const(np.float32(2.0))), (x, 2.0), (x.astype(np.float64), 2.0),
                 (x, np.float32(2.0))]:
        g = gradient(loss, DUP, *args)
        plain = [a.val if isinstance(a, adcore.Const) else a for a in args]
        assert_same(gradient(loss, MODEL, *plain)[0], g[0])
        assert all(v is None for v in g[1:])


# -- arrays that come unpickled (from Dask, multiprocessing, joblib) ----------------------
def pickled_input_loss(m, x, y):
    return np.sum((m(x) - y) ** 2)


def test_an_unpickled_array_reuses_the_program():
    """An unpickled array's dtype is a new object equal to the old: the guard compares
    dtypes by value, so a new batch from a worker process compiles nothing."""
    import pickle
    xs, ys = data((4, 3)), data((4, 2))
    check(lambda m: pickled_input_loss(m, xs, ys))
    first = gradient(pickled_input_loss, DUP, xs, ys)[0]
    assert programs(pickled_input_loss) == 1
    for _ in range(3):
        xu, yu = pickle.loads(pickle.dumps((xs, ys)))
        assert xu.dtype is not xs.dtype
        again = gradient(pickled_input_loss, DUP, xu, yu)[0]
        assert_same(first, again)
    assert programs(pickled_input_loss) == 1
