"""Optimiser state trees: ``setup``, ``update``, ``adjust``, ``freeze`` and ``thaw``.

``setup(rule, model)`` mirrors the model (see ``adcore.tree.mirror``): a ``Leaf``
at every float array, ``None`` elsewhere, dicts for layer fields and tuples for
``Chain.layers``.  Gradients have the same shape, so ``update`` walks the model,
the state and the gradient together.
"""
import numpy as np

from adcore.annotations import Duplicated
from adcore.tree import FrozenDict, child, children, is_float_array, mirror

from . import fused
from .leaf import Leaf
from .rules import Rule


class StateTree(dict):
    """The dict at the top of a state tree, with a readable indented ``repr``."""

    def __repr__(self):
        return _pformat(self, 0)


def _pformat(t, indent):
    pad = "  " * (indent + 1)
    if isinstance(t, dict):
        if not t:
            return "{}"
        body = "".join(f"{pad}{k!r}: {_pformat(v, indent + 1)},\n" for k, v in t.items())
        return "{\n" + body + "  " * indent + "}"
    if isinstance(t, (tuple, list)):
        if not t:
            return repr(t)
        o, c = ("(", ")") if isinstance(t, tuple) else ("[", "]")
        body = "".join(f"{pad}{_pformat(v, indent + 1)},\n" for v in t)
        return o + "\n" + body + "  " * indent + c
    return repr(t)


def _model(model):
    return model.val if isinstance(model, Duplicated) else model


def check_state(tree, fname):
    if isinstance(tree, Rule):
        raise TypeError(
            f"{fname} expects the optimiser state, but got the rule {tree!r}; "
            f"make the state first with  state = optim.setup({tree!r}, model)")


def setup(rule, model):
    """The optimiser state for ``model`` (a model, a ``Duplicated`` model or any tree)."""
    if not isinstance(rule, Rule):
        raise TypeError(f"setup expects a rule such as optim.Adam() first, got {rule!r}")
    seen = {}

    def leaf(x):   # an array appearing twice (tied weights) shares one Leaf
        if id(x) not in seen:
            seen[id(x)] = Leaf(rule, rule.init(x))
        return seen[id(x)]

    tree = mirror(leaf, _model(model))
    return StateTree(tree) if isinstance(tree, dict) else tree


def update(state, model, grad=None):
    """Apply one optimiser step to ``model``'s arrays in place; returns ``(state, model)``.

    ``grad`` mirrors the model (as from ``layers.gradient``); for a ``Duplicated``
    model it defaults to the gradient stored in its shadow, and the update is then one
    native call (``optim.fused``).  ``None`` gradients and
    frozen leaves are skipped.
    """
    if grad is None and type(state) is StateTree and type(model) is Duplicated and \
            _fused_step(state, model):
        return state, model                                   # the repeat call: one step
    check_state(state, "update")
    if grad is None:
        if not isinstance(model, Duplicated):
            raise TypeError("update(state, model) without a gradient needs a Duplicated model")
        grad = model.dval
        if isinstance(state, StateTree) and _fused_step(state, model):
            return state, model
    pending = {}
    _collect(state, _model(model), grad, (), pending)
    for leaf, x, g in pending.values():
        leaf.rule.apply(leaf.state, x.reshape(-1), g)
        x -= g.reshape(x.shape)
    return state, model


def _fused_step(state, dup):
    """Whether ``optim.fused`` made the step; when its plan refused an array changed in
    place, the plan is dropped (and the Python path copes)."""
    plan = fused.plan_for(state, dup.val, dup.dval)
    if plan is None:
        return False
    if plan.run():
        return True
    fused.forget(state)
    return False


def _collect(s, x, dx, path, pending):
    """Gather ``{id(leaf): [leaf, array, gradient]}``, summing the gradients of an array
    that appears more than once (tied weights share one Leaf).  ``path`` is ``(parent's
    path, key)``, spelled out only in an error.  The walk runs on every training step: the
    children are looked up by their exact types first (``adcore.tree.child`` for the rest)."""
    if isinstance(x, np.ndarray):
        if x.dtype.kind == "f" and dx is not None:
            _gather(s, x, dx, path, pending)
        return
    fields = getattr(type(x), "__tree_fields__", None)
    if fields is not None:
        kids = [(k, getattr(x, k)) for k in fields]
    elif isinstance(x, dict):
        kids = x.items()
    elif isinstance(x, (tuple, list)):
        kids = enumerate(x)
    else:
        return
    for k, c in kids:
        t = type(c)
        if t is np.ndarray:
            sk, dk = _child(s, k), _child(dx, k)
            if c.dtype.kind == "f" and dk is not None:
                _gather(sk, c, dk, (path, k), pending)
        elif t is tuple or t is dict or t is list or isinstance(c, (np.ndarray, dict, tuple, list)) \
                or hasattr(t, "__tree_fields__"):
            _collect(_child(s, k), c, _child(dx, k), (path, k), pending)


def _child(y, key):
    """``adcore.tree.child``, with the exact containers of state and gradient trees first."""
    t = type(y)
    if t is dict or t is StateTree or t is FrozenDict:
        return y.get(key)
    if t is tuple or t is list:
        return y[key]
    return child(y, key)


def _gather(s, x, dx, path, pending):
    """Add the gradient ``dx`` of the float array ``x`` (state ``s``) to ``pending``."""
    if not isinstance(s, Leaf):
        raise TypeError(f"optimiser state at {_where(path)} is {s!r}, not a Leaf; "
                        "was the state made by setup for this model?")
    if s.frozen:
        return
    if type(dx) is not np.ndarray:
        dx = np.asarray(dx)
    if dx.shape != x.shape:
        raise ValueError(f"gradient at {_where(path)} has shape {dx.shape}, "
                         f"the parameter {x.shape}")
    entry = pending.get(id(s))
    if entry is None:
        pending[id(s)] = [s, x, np.array(dx, dtype=x.dtype, order="C").reshape(-1)]
    else:
        entry[2] += dx.reshape(-1)


def _where(path):
    keys = []
    while path:
        path, key = path
        keys.append(str(key))
    return ".".join(reversed(keys)) or "the top"


def _leaves(tree):
    if isinstance(tree, Leaf):
        yield tree
    for _, c in children(tree):
        yield from _leaves(c)


def adjust(tree, eta=None, **kw):
    """Change hyperparameters in place for every leaf of ``tree`` (a state or a subtree):
    ``adjust(state, 0.01)``, ``adjust(state["layers"][0], beta=(0.8, 0.99))``."""
    check_state(tree, "adjust")
    if eta is not None:
        kw["eta"] = eta
    leaves = list(_leaves(tree))
    known = set().union(*(l.rule.hyperparameters() for l in leaves))
    unknown = set(kw) - known
    if unknown:
        raise TypeError(f"adjust: no rule in this state has hyperparameter(s) "
                        f"{sorted(unknown)}; they have {sorted(known)}")
    for l in leaves:
        l.rule = l.rule.adjust(**kw)
    return tree


def freeze(tree):
    """Stop updating every array under ``tree`` (a state or a subtree), in place."""
    check_state(tree, "freeze")
    for l in _leaves(tree):
        l.frozen = True
    return tree


def thaw(tree):
    """Undo ``freeze`` for every array under ``tree``, in place."""
    check_state(tree, "thaw")
    for l in _leaves(tree):
        l.frozen = False
    return tree
