"""Tracking of argument trees and assembly of gradient trees.

A tree is a float or complex array or scalar (a differentiable leaf), a tuple/list/dict of
trees, a node (an object whose class declares ``__tree_fields__``, see
``adcore.tree``), ``Const(value)`` (not differentiated), or anything else
(ints, integer arrays, strings, functions: not differentiated).
"""
import copy

import numpy as np

from ..annotations import Const
from ..tree import is_node, node_fields
from .tracked import Tracked


def track(tree, tape):
    """A copy of ``tree`` whose float leaves are new leaves of ``tape``.

    Containers and nodes are rebuilt (nodes by ``copy.copy`` and field assignment);
    ``Const`` wrappers are removed and their contents left untracked.
    """
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
    if is_node(tree):
        node = copy.copy(tree)
        for name, value in node_fields(tree):
            setattr(node, name, track(value, tape))
        return node
    if type(tree) is Tracked:
        raise TypeError("an argument is already tracked: nested adcore.tape.gradient calls "
                        "(higher-order derivatives) are not supported")
    return tree


def grad_tree(tracked, adjoints):
    """The gradient of a tree built by ``track``, from the adjoint list of ``Tape.backward``.

    Float and complex arrays get arrays of their dtype (zeros when the output does not
    depend on them), floats get floats, complex numbers complex numbers, tuples/lists give tuples, dicts give dicts, nodes give
    ``{field: gradient}`` dicts, and everything else gives ``None``.
    """
    if type(tracked) is Tracked:
        value = tracked.value
        g = None if adjoints is None else adjoints[tracked.id]
        if isinstance(value, np.generic):
            g = 0.0 if g is None else g
            if value.dtype == np.float64:
                return float(g)
            return complex(g) if value.dtype == np.complex128 else type(value)(g)
        return np.zeros_like(value) if g is None else g
    if isinstance(tracked, (tuple, list)):
        return tuple(grad_tree(v, adjoints) for v in tracked)
    if isinstance(tracked, dict):
        return {k: grad_tree(v, adjoints) for k, v in tracked.items()}
    if is_node(tracked):
        return {name: grad_tree(value, adjoints) for name, value in node_fields(tracked)}
    return None
