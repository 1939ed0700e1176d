"""Tracking of argument trees and assembly of gradient trees.

A tree is a float or complex array or scalar (a differentiable leaf), a tuple/list/dict of
trees, a node (an object whose class declares ``__tree_fields__``, see
``adcore.tree``), ``Const(value)`` (not differentiated), or anything else
(ints, integer arrays, strings, functions: not differentiated).
"""
import copy

import numpy as np

from ..annotations import Const
from .tracked import Tracked

# How track and grad_tree treat an object, by its class (cached: classes do not change
# their fields): a node, an exact tuple or list, an object passed through untouched
# (functions, None, ints, strings...), or one of the other kinds, told apart by isinstance.
NODE, SEQUENCE, OPAQUE, OTHER = range(4)
_KINDS = {tuple: (SEQUENCE, None), list: (SEQUENCE, None)}
_OTHER_KINDS = (Const, np.ndarray, np.generic, float, complex, tuple, list, dict, Tracked)


def _kind(cls):
    """``(kind, fields)`` of ``cls``; ``fields`` are a node's ``__tree_fields__``."""
    try:
        return _KINDS[cls]
    except KeyError:
        # containers and numbers keep their own meaning even if a subclass declared fields
        other = issubclass(cls, _OTHER_KINDS)
        if hasattr(cls, "__tree_fields__") and not other:
            kind = (NODE, tuple(cls.__tree_fields__))
        else:
            kind = (OTHER if other else OPAQUE, None)
        _KINDS[cls] = kind
        return kind


def track(tree, tape):
    """A copy of ``tree`` whose float leaves are new leaves of ``tape``.

    Containers and nodes are rebuilt (nodes by ``copy.copy`` and field assignment);
    ``Const`` wrappers are removed and their contents left untracked.
    """
    t = type(tree)
    if t is np.ndarray:  # the common leaves first: this runs on every gradient call
        return _leaf(tree, tape) if tree.dtype.kind in "fc" else tree
    kind, fields = _KINDS.get(t) or _kind(t)
    if kind is OPAQUE:
        return tree
    if kind is NODE:
        node = _shallow_copy(tree)
        for name in fields:
            v = getattr(tree, name)
            setattr(node, name, _leaf(v, tape) if type(v) is np.ndarray and v.dtype.kind in "fc"
                    else track(v, tape))
        return node
    if kind is SEQUENCE:
        return t([track(v, tape) for v in tree])
    if isinstance(tree, Const):
        return tree.val
    if isinstance(tree, np.ndarray):
        return Tracked(tree, tape) if tree.dtype.kind in "fc" else tree
    if isinstance(tree, (np.floating, np.complexfloating)):
        return Tracked(tree, tape)
    if isinstance(tree, float):
        return Tracked(np.float64(tree), tape)
    if isinstance(tree, complex):
        return Tracked(np.complex128(tree), tape)
    if isinstance(tree, (tuple, list)):
        items = [track(v, tape) for v in tree]
        return type(tree)(*items) if hasattr(tree, "_fields") else type(tree)(items)
    if isinstance(tree, dict):
        return type(tree)((k, track(v, tape)) for k, v in tree.items())
    if t is Tracked:
        raise TypeError("an argument is already tracked: nested adcore.tape.gradient calls "
                        "(higher-order derivatives) are not supported")
    return tree


_new = object.__new__


def _leaf(value, tape):
    """A float or complex array as a new leaf of ``tape``."""
    leaf = _new(Tracked)
    leaf.value = value
    leaf._tape = tape
    leaf._id = tape.leaf(value)
    leaf._alias = True  # the caller holds the array: never update it in place
    return leaf


_PLAIN_COPY = {}  # class -> True when copy.copy(obj) is a new instance with obj.__dict__ copied


def _shallow_copy(obj):
    """``copy.copy(obj)``, without copy's dispatch for the plain classes of models."""
    cls = type(obj)
    plain = _PLAIN_COPY.get(cls)
    if plain is None:
        plain = _PLAIN_COPY[cls] = (
            "__copy__" not in dir(cls) and cls.__reduce_ex__ is object.__reduce_ex__
            and cls.__reduce__ is object.__reduce__
            and not any("__getstate__" in vars(k) for k in cls.__mro__[:-1])
            and "__setstate__" not in dir(cls) and cls.__new__ is object.__new__
            and not any("__slots__" in vars(k) for k in cls.__mro__) and hasattr(obj, "__dict__"))
    if not plain:
        return copy.copy(obj)
    new = object.__new__(cls)
    new.__dict__.update(obj.__dict__)
    return new


def grad_tree(tracked, adjoints):
    """The gradient of a tree built by ``track``, from the adjoint list of ``Tape.backward``.

    Float and complex arrays get arrays of their dtype (zeros when the output does not
    depend on them), floats get floats, complex numbers complex numbers, tuples/lists give tuples, dicts give dicts, nodes give
    ``{field: gradient}`` dicts, and everything else gives ``None``.
    """
    t = type(tracked)
    if t is Tracked:
        value = tracked.value
        g = None if adjoints is None else adjoints[tracked._id]
        if type(value) is np.ndarray:
            return np.zeros_like(value) if g is None else g
        if isinstance(value, np.generic):
            g = 0.0 if g is None else g
            if value.dtype == np.float64:
                return float(g)
            return complex(g) if value.dtype == np.complex128 else type(value)(g)
        return np.zeros_like(value) if g is None else g
    if t is np.ndarray:
        return None
    kind, fields = _KINDS.get(t) or _kind(t)
    if kind is OPAQUE:
        return None
    if kind is NODE:
        return _node_gradient(tracked, fields, adjoints)
    if kind is SEQUENCE:
        return tuple([grad_tree(v, adjoints) for v in tracked])
    if isinstance(tracked, (tuple, list)):
        return tuple(grad_tree(v, adjoints) for v in tracked)
    if isinstance(tracked, dict):
        return {k: grad_tree(v, adjoints) for k, v in tracked.items()}
    return None


def _node_gradient(node, fields, adjoints):
    """``{field: gradient}`` of a node; an array field's adjoint is taken directly (the
    fields of layers are mostly arrays: one call fewer each)."""
    out = {}
    for name in fields:
        v = getattr(node, name)
        g = None
        if type(v) is Tracked and adjoints is not None and type(v.value) is np.ndarray:
            g = adjoints[v._id]
        out[name] = grad_tree(v, adjoints) if g is None else g
    return out
