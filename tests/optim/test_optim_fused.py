"""``update(state, dup)`` through the fused native plan sees every change between calls."""
import numpy as np
import pytest

import optim
from adcore import Duplicated
from layers import Chain, Dense, tanh
from optim import fused


def _pair(rule):
    """Two equal Duplicated models with equal gradients and states for ``rule``."""
    dups = []
    for _ in range(2):
        m = Chain(Dense(2, 3, tanh, rng=0), Dense(3, 1, rng=1))
        d = Duplicated(m)
        for g, v in ((d.dval.layers[0].weight, 0.5), (d.dval.layers[0].bias, -0.2),
                     (d.dval.layers[1].weight, 0.1), (d.dval.layers[1].bias, 0.3)):
            g[...] = v
        dups.append(d)
    return [(optim.setup(rule, d), d) for d in dups]


def _python_update(state, dup):
    """The Python path: the shadow passed as an explicit gradient."""
    optim.update(state, dup.val, dup.dval)


def _same(a, b):
    for x, y in ((a.val.layers[k].weight, b.val.layers[k].weight) for k in range(2)):
        np.testing.assert_allclose(x, y, rtol=1e-6)
    np.testing.assert_allclose(a.val.layers[0].bias, b.val.layers[0].bias, rtol=1e-6)


@pytest.mark.parametrize("rule", [optim.Adam(), optim.Momentum(),
                                  optim.OptimiserChain(optim.ClipNorm(1.0), optim.Descent())])
def test_fused_matches_python(rule):
    (s1, d1), (s2, d2) = _pair(rule)
    for _ in range(3):
        optim.update(s1, d1)
        _python_update(s2, d2)
    assert fused._plans[id(s1)][1] is not None
    _same(d1, d2)
    assert np.all(d1.dval.layers[0].weight == 0.5)   # the shadow keeps the gradient


def test_adjust_rebinding_and_mutation_are_seen():
    (s1, d1), (s2, d2) = _pair(optim.Adam())
    for s, d, upd in ((s1, d1, optim.update), (s2, d2, _python_update)):
        upd(s, d)
        optim.adjust(s, 0.1)                                  # new hyperparameter
        upd(s, d)
        s["layers"][0]["weight"].rule.eta = 0.05              # a rule changed in place
        upd(s, d)
        d.val.layers[1].weight = d.val.layers[1].weight * 2   # a rebound parameter
        d.dval.layers[1].weight = d.dval.layers[1].weight.copy()
        upd(s, d)
        d.dval.layers[0].bias[:] = 1.0                     # a gradient changed in place
        d.val.layers[0].weight[0, 0] = 3.0                    # a parameter changed in place
        upd(s, d)
        optim.freeze(s["layers"][1])                          # frozen: Python path
        upd(s, d)
        optim.thaw(s["layers"][1])
        upd(s, d)
    _same(d1, d2)
    np.testing.assert_allclose(d1.val.layers[1].weight, d2.val.layers[1].weight, rtol=1e-6)


def test_new_state_gets_its_own_plan():
    (s1, d1), _ = _pair(optim.Adam())
    optim.update(s1, d1)
    s3 = optim.setup(optim.Descent(0.5), d1)
    w = d1.val.layers[1].bias.copy()
    optim.update(s3, d1)
    np.testing.assert_allclose(d1.val.layers[1].bias, w - 0.5 * 0.3, rtol=1e-6)


def test_clipnorm_nonfinite_raises():
    (s1, d1), _ = _pair(optim.ClipNorm(1.0))
    d1.dval.layers[0].weight[0, 0] = np.nan
    with pytest.raises(FloatingPointError, match="gradient norm"):
        optim.update(s1, d1)


def test_a_state_dict_with_other_keys_of_the_same_number_is_not_the_plan_s():
    """The plan's guard checks a dict's length and looks up each of its keys (no tuple
    of the keys built per call): a key renamed in place fails the lookup."""
    (state, dup), _ = _pair(optim.Adam())
    optim.update(state, dup)
    plan = fused._plans[id(state)][1]
    assert plan.ok(state, dup.val, dup.dval)
    layer = state["layers"][0]
    layer["other"] = layer.pop("weight")
    assert len(layer) == 2 and not plan.ok(state, dup.val, dup.dval)
    layer["weight"] = layer.pop("other")
    assert plan.ok(state, dup.val, dup.dval)
