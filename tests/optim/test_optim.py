"""optim: every rule's step against its formula, convergence, and the state tree API."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import optim
from optim import (Descent, Momentum, Nesterov, RMSProp, Adam, AdamW, AdaGrad, ClipGrad,
                   ClipNorm, WeightDecay, OptimiserChain, setup, update, adjust, freeze, thaw)
from adcore import Duplicated
from optim.rules import Step

RNG = np.random.default_rng(0)
X0 = RNG.normal(size=(3, 4))
DX = RNG.normal(size=(3, 4))
DX2 = RNG.normal(size=(3, 4))


def step(rule, x, *grads):
    """Apply ``rule`` for each gradient to a copy of ``x``; return the new x."""
    x = x.copy()
    s = setup(rule, x)
    for g in grads:
        update(s, x, g)
    return x


# ---- one (or two) steps against the formulas written out -----------------------------

def test_descent():
    np.testing.assert_allclose(step(Descent(0.3), X0, DX), X0 - 0.3 * DX)


def test_momentum():
    eta, rho = 0.01, 0.9
    v1 = eta * DX
    v2 = rho * v1 + eta * DX2
    np.testing.assert_allclose(step(Momentum(), X0, DX), X0 - v1)
    np.testing.assert_allclose(step(Momentum(), X0, DX, DX2), X0 - v1 - v2)


def test_nesterov():
    eta, rho = 0.001, 0.9
    d1 = (1 + rho) * eta * DX
    v1 = -eta * DX
    d2 = -rho ** 2 * v1 + (1 + rho) * eta * DX2
    np.testing.assert_allclose(step(Nesterov(), X0, DX), X0 - d1)
    np.testing.assert_allclose(step(Nesterov(), X0, DX, DX2), X0 - d1 - d2)


def test_rmsprop():
    eta, rho, eps = 0.001, 0.9, 1e-8
    q1 = (1 - rho) * DX ** 2
    q2 = rho * q1 + (1 - rho) * DX2 ** 2
    x1 = X0 - eta * DX / (np.sqrt(q1) + eps)
    np.testing.assert_allclose(step(RMSProp(), X0, DX), x1)
    np.testing.assert_allclose(step(RMSProp(), X0, DX, DX2), x1 - eta * DX2 / (np.sqrt(q2) + eps))


def adam_formula(x, grads, eta=0.001, b1=0.9, b2=0.999, eps=1e-8, lam=0.0):
    m = v = 0
    for t, g in enumerate(grads, 1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g ** 2
        mhat, vhat = m / (1 - b1 ** t), v / (1 - b2 ** t)
        x = x - eta * (mhat / (np.sqrt(vhat) + eps) + lam * x)
    return x


def test_adam_with_bias_correction():
    np.testing.assert_allclose(step(Adam(), X0, DX), adam_formula(X0, [DX]))
    np.testing.assert_allclose(step(Adam(0.01, (0.8, 0.9)), X0, DX, DX2, DX),
                               adam_formula(X0, [DX, DX2, DX], 0.01, 0.8, 0.9))
    s = setup(Adam(), X0.copy())
    x = X0.copy()
    update(s, x, DX), update(s, x, DX)
    np.testing.assert_allclose(s.state[2], [0.9 ** 3, 0.999 ** 3])   # beta powers kept as state


def _adam_in(dtype, x, grads, eta=0.001, b1=0.9, b2=0.999, eps=1e-8):
    """Adam's kernel written out in numpy in ``dtype`` (its scalars from float64)."""
    f = np.dtype(dtype).type
    m, v, bt = np.zeros_like(x), np.zeros_like(x), [b1, b2]
    for g in grads:
        m = f(b1) * m + f(1 - b1) * g
        v = f(b2) * v + f(1 - b2) * g * g
        step, root = f(eta / (1 - bt[0])), f(1 / np.sqrt(1 - bt[1]))
        x = x - (step * m / (np.sqrt(v) * root + f(eps)) + f(0.0) * x)
        bt = [bt[0] * b1, bt[1] * b2]
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_steps_are_computed_in_the_parameters_precision(dtype):
    """A float32 model takes float32 steps (as Optimisers.jl, PyTorch and optax do): every
    element is what float32 arithmetic gives, which float64 arithmetic rounded once does
    not (checked, so that the test can tell them apart)."""
    rng = np.random.default_rng(3)
    x0 = rng.normal(size=1000).astype(dtype)
    grads = [rng.normal(size=1000).astype(dtype) for _ in range(3)]
    got = step(Adam(), x0, *grads)
    np.testing.assert_array_equal(got, _adam_in(dtype, x0, grads))
    if dtype == np.float32:
        wide = _adam_in(np.float64, x0.astype(np.float64), [g.astype(np.float64) for g in grads])
        assert np.any(got != wide.astype(np.float32))


def test_adamw_coupled_like_pytorch():
    got = step(AdamW(0.01, lambda_=0.1), X0, DX, DX2)
    np.testing.assert_allclose(got, adam_formula(X0, [DX, DX2], eta=0.01, lam=0.1))
    np.testing.assert_allclose(step(AdamW(), X0, DX), step(Adam(), X0, DX))


def test_adagrad():
    eta, eps = 0.1, 1e-8
    acc1 = eps + DX ** 2
    acc2 = acc1 + DX2 ** 2
    x1 = X0 - eta * DX / (np.sqrt(acc1) + eps)
    np.testing.assert_allclose(step(AdaGrad(), X0, DX), x1)
    np.testing.assert_allclose(step(AdaGrad(), X0, DX, DX2), x1 - eta * DX2 / (np.sqrt(acc2) + eps))


def test_a_division_by_zero_in_a_rule_gives_nan_as_in_optimisers_jl():
    """The kernels follow numpy's floating-point rules: AdaGrad with epsilon 0 and a zero
    gradient divides 0 by 0, which gives nan rather than raising."""
    x = np.ones(3)
    state = optim.setup(AdaGrad(0.1, epsilon=0.0), x)
    with np.errstate(all="ignore"):
        optim.update(state, x, np.zeros(3))
    assert np.isnan(x).all()


def test_clipgrad():
    np.testing.assert_allclose(step(ClipGrad(0.5), X0, DX), X0 - np.clip(DX, -0.5, 0.5))


def test_clipnorm_per_array():
    tree = {"a": X0.copy(), "b": np.ones(2)}
    update(setup(ClipNorm(1.0), tree), tree, {"a": DX, "b": np.array([0.3, 0.4])})
    np.testing.assert_allclose(tree["a"], X0 - DX / np.linalg.norm(DX))
    np.testing.assert_allclose(tree["b"], [0.7, 0.6])           # norm 0.5 < 1: unchanged
    np.testing.assert_allclose(step(ClipNorm(1.0, p=1), X0, DX), X0 - DX / np.abs(DX).sum())
    np.testing.assert_allclose(step(ClipNorm(1.0, p=np.inf), X0, DX), X0 - DX / np.abs(DX).max())
    with pytest.raises(FloatingPointError, match="norm"):
        step(ClipNorm(), X0, np.full((3, 4), np.nan))


def test_weightdecay():
    np.testing.assert_allclose(step(WeightDecay(0.1), X0, DX), X0 - (DX + 0.1 * X0))
    np.testing.assert_allclose(step(WeightDecay(), X0, DX), X0 - (DX + 5e-4 * X0))


def test_optimiserchain_composes_in_order():
    got = step(OptimiserChain(ClipGrad(0.5), WeightDecay(0.1), Descent(0.2)), X0, DX)
    np.testing.assert_allclose(got, X0 - 0.2 * (np.clip(DX, -0.5, 0.5) + 0.1 * X0))


def test_defaults():
    assert Descent().eta == 0.1
    assert (Momentum().eta, Momentum().rho) == (0.01, 0.9)
    assert (Nesterov().eta, Nesterov().rho) == (0.001, 0.9)
    assert (RMSProp().eta, RMSProp().rho, RMSProp().epsilon) == (0.001, 0.9, 1e-8)
    assert (Adam().eta, Adam().beta, Adam().epsilon) == (0.001, (0.9, 0.999), 1e-8)
    assert (AdamW().lambda_, AdaGrad().eta, AdaGrad().epsilon) == (0.0, 0.1, 1e-8)
    assert (ClipGrad().delta, ClipNorm().omega, WeightDecay().lambda_) == (10.0, 10.0, 5e-4)


def test_float32_stays_float32():
    x = X0.astype(np.float32)
    got = step(Adam(0.01), x, DX)                 # float64 gradient, float32 parameter
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, adam_formula(X0, [DX], 0.01), rtol=1e-5, atol=1e-6)


# ---- every rule fits a small regression ------------------------------------------------

RULES = [Descent(0.1), Momentum(0.05), Nesterov(0.05), RMSProp(0.01), Adam(0.05),
         AdamW(0.05, lambda_=1e-4), AdaGrad(0.5), OptimiserChain(ClipGrad(1.0), Descent(0.1)),
         OptimiserChain(ClipNorm(1.0), Descent(0.1)),
         OptimiserChain(WeightDecay(1e-4), Adam(0.05))]


@pytest.mark.parametrize("rule", RULES, ids=repr)
def test_rule_fits_regression(rule):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(64, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.3
    model = {"w": np.zeros(3), "b": np.zeros(1)}
    state = setup(rule, model)

    def loss_and_grad():
        r = X @ model["w"] + model["b"] - y
        return np.mean(r ** 2), {"w": 2 * X.T @ r / len(y), "b": np.array([2 * r.mean()])}

    for _ in range(300):
        loss, g = loss_and_grad()
        update(state, model, g)
    assert loss_and_grad()[0] < 0.01


# ---- the state tree ------------------------------------------------------------------

class Lin:
    __tree_fields__ = ("weight", "bias")

    def __init__(self):
        self.weight, self.bias, self.name = np.ones((2, 2)), None, "lin"


class Pair:
    __tree_fields__ = ("layers",)

    def __init__(self, *layers):
        self.layers = layers


def test_setup_mirrors_model_and_accepts_duplicated():
    m = Pair(Lin(), Lin())
    s = setup(Adam(), m)
    assert set(s) == {"layers"} and isinstance(s["layers"], tuple)
    assert isinstance(s["layers"][0]["weight"], optim.Leaf) and s["layers"][0]["bias"] is None
    assert setup(Adam(), Duplicated(m)) == s
    assert setup(Adam(), m) != setup(Momentum(), m)


def test_update_in_place_and_duplicated_uses_stored_gradient():
    m = Pair(Lin(), Lin())
    w = m.layers[0].weight
    s = setup(Descent(0.5), m)
    g = {"layers": ({"weight": np.ones((2, 2)), "bias": None}, None)}
    s2, m2 = update(s, m, g)
    assert s2 is s and m2 is m and m.layers[0].weight is w
    np.testing.assert_allclose(w, 0.5)
    np.testing.assert_allclose(m.layers[1].weight, 1.0)          # None gradient: unchanged
    dup = Duplicated(m)
    dup.dval.layers[1].weight[...] = 2.0
    update(s, dup)
    np.testing.assert_allclose(m.layers[1].weight, 0.0)
    np.testing.assert_allclose(w, 0.5)


def test_freeze_thaw_subtree():
    m = Pair(Lin(), Lin())
    s = setup(Descent(1.0), m)
    g = {"layers": ({"weight": np.ones((2, 2))}, {"weight": np.ones((2, 2))})}
    freeze(s["layers"][0])
    update(s, m, g)
    np.testing.assert_allclose(m.layers[0].weight, 1.0)
    np.testing.assert_allclose(m.layers[1].weight, 0.0)
    assert "frozen=True" in repr(s)
    thaw(s)
    update(s, m, g)
    np.testing.assert_allclose(m.layers[0].weight, 0.0)


def test_adjust_whole_tree_subtree_and_chain():
    m = Pair(Lin(), Lin())
    s = setup(Adam(), m)
    adjust(s["layers"][1], eta=0.5)
    assert s["layers"][0]["weight"].rule.eta == 0.001
    assert s["layers"][1]["weight"].rule.eta == 0.5
    adjust(s, 0.1)
    adjust(s, beta=(0.8, 0.99))
    assert s["layers"][0]["weight"].rule == Adam(0.1, (0.8, 0.99))
    c = setup(OptimiserChain(WeightDecay(), Adam()), m)
    adjust(c, eta=0.2, lambda_=0.3)
    assert c["layers"][0]["weight"].rule == OptimiserChain(WeightDecay(0.3), Adam(0.2))
    with pytest.raises(TypeError, match="etaa"):
        adjust(s, etaa=0.1)


def test_rule_instead_of_state_says_setup():
    m = Pair(Lin())
    for call in (lambda: update(Adam(), m, {}), lambda: adjust(Adam(), 0.1),
                 lambda: freeze(Adam())):
        with pytest.raises(TypeError, match=r"setup\(Adam"):
            call()


def test_gradient_shape_mismatch():
    x = {"w": np.ones(3)}
    with pytest.raises(ValueError, match="shape"):
        update(setup(Descent(), x), x, {"w": np.ones(4)})


def test_state_of_another_model():
    with pytest.raises(TypeError, match="w.*setup"):
        update({"v": None}, {"w": np.ones(2)}, {"w": np.ones(2)})


def test_tied_arrays_share_one_leaf():
    w = np.ones(2)
    tree = (w, w)
    s = setup(Descent(1.0), tree)
    assert s[0] is s[1]
    update(s, tree, (np.ones(2), 2 * np.ones(2)))
    np.testing.assert_allclose(w, -2.0)                 # one step with the summed gradient


def test_repr_is_readable():
    s = setup(Adam(), Pair(Lin()))
    r = repr(s)
    assert r.startswith("{\n  'layers': (\n")
    assert "'weight': Leaf(Adam(eta=0.001, beta=(0.9, 0.999), epsilon=1e-08)," in r
    assert "'bias': None" in r


def test_kernels_compiled_once_per_dtype():
    step(Adam(), X0, DX), step(Adam(), X0.astype(np.float32), DX)
    assert len(optim.Adam.kernel.signatures) <= 2


def test_adam_powers_of_beta_underflow_to_zero_not_to_a_stuck_subnormal():
    """A running product 0.9^t sticks at the least subnormal (its product with 0.9 rounds
    back up), where every multiply takes the processor's slow path; Adam's state holds 0.0
    instead, which changes no step (1 - p is 1.0 either way): the parameters equal the
    plain running product's bit for bit."""
    stuck = 0.9
    for _ in range(8000):
        stuck *= 0.9
    assert 0.0 < stuck < np.finfo(np.float64).tiny and stuck * 0.9 == stuck
    rng = np.random.default_rng(4)
    x0 = rng.normal(size=5)
    grads = [rng.normal(size=5) for _ in range(7000)]    # 0.9^t underflows at t = 6720
    s = setup(Adam(), x0.copy())
    x = x0.copy()
    for g in grads:
        update(s, x, g.copy())
    assert s.state[2][0] == 0.0 and s.state[2][1] >= np.finfo(np.float64).tiny
    np.testing.assert_array_equal(x, _adam_in(np.float64, x0, grads))

_PER_ELEMENT = [Descent(0.1), Momentum(0.01, 0.9), Nesterov(0.01, 0.9), RMSProp(0.01),
                Adam(0.01), AdamW(0.01, lambda_=0.1), AdaGrad(0.1), ClipGrad(0.3),
                WeightDecay(0.1), OptimiserChain(WeightDecay(0.1), Adam(0.01))]


@pytest.mark.parametrize("rule", _PER_ELEMENT, ids=lambda r: type(r).__name__)
@settings(max_examples=15, deadline=None)
@given(sizes=st.lists(st.integers(1, 9), min_size=2, max_size=3), seed=st.integers(0, 2**16),
       dtype=st.sampled_from([np.float32, np.float64]))
def test_a_per_element_step_over_arrays_end_to_end_is_the_steps_of_each(rule, sizes, seed, dtype):
    """``Step.per_element``'s claim, which lets a compiled training loop run a step once
    over all parameters: the kernels over the arrays laid end to end, their records
    (``per_element`` False) the first array's, give exactly the steps of each array."""
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal(n).astype(dtype) for n in sizes]
    gs = [rng.standard_normal(n).astype(dtype) for n in sizes]
    states = [rule.init(x) for x in xs]
    for _ in range(2):                              # a step from a state that is not the initial one
        for x, g, s in zip(xs, gs, states):
            rule.apply(s, x, g.copy())
    steps_each = [rule.steps(s) for s in states]
    assert all(step.per_element is not None for steps in steps_each for step in steps)
    joined_x, joined_g = np.concatenate(xs), np.concatenate(gs)
    joined_steps = [Step(step.kernel, tuple(np.concatenate([steps[k].state[m] for steps in steps_each])
                                                 if each else steps_each[0][k].state[m].copy()
                                                 for m, each in enumerate(step.per_element)), step.hyper)
                    for k, step in enumerate(steps_each[0])]
    for st_ in joined_steps:
        st_.kernel(joined_x, joined_g, *st_.state, *st_.hyper)
    for x, g, steps in zip(xs, gs, steps_each):
        for st_ in steps:
            st_.kernel(x, g, *st_.state, *st_.hyper)
    np.testing.assert_array_equal(joined_g, np.concatenate(gs))
    for k, st_ in enumerate(joined_steps):
        for m, each in enumerate(steps_each[0][k].per_element):
            expected = (np.concatenate([steps[k].state[m] for steps in steps_each]) if each
                        else steps_each[0][k].state[m])
            np.testing.assert_array_equal(st_.state[m], expected)
