"""Structured values ("trees"): nested tuples, lists, dicts and model objects.

A class takes part in the tree by naming its tree fields in ``__tree_fields__``
(for example ``("weight", "bias")``); every other attribute is static and shared
by copies.  ``make_zero``, gradients, optimiser state and saving all walk trees
through the functions of this module.
"""
import copy

import numpy as np


def is_node(obj):
    """True when ``obj`` is an object whose class declares ``__tree_fields__``."""
    return hasattr(type(obj), "__tree_fields__")


def node_fields(obj):
    """The ``(name, value)`` pairs of a node's tree fields, in declaration order."""
    return [(name, getattr(obj, name)) for name in type(obj).__tree_fields__]


def is_float_array(x):
    return isinstance(x, np.ndarray) and x.dtype.kind == "f"


def make_zero(x):
    """A zero shadow of ``x`` with the same structure.

    Float arrays become zero arrays of the same shape and dtype (C order), floats
    become ``0.0``; tuples, lists, dicts and tree nodes are rebuilt around zeroed
    children; anything else (ints, functions, integer arrays) is returned as is.
    """
    if isinstance(x, np.ndarray):
        return np.zeros_like(x, order="C") if x.dtype.kind in "fc" else x
    if isinstance(x, (float, np.floating)):
        return type(x)(0.0)
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(make_zero(v) for v in x))
    if isinstance(x, (tuple, list)):
        return type(x)(make_zero(v) for v in x)
    if isinstance(x, dict):
        return type(x)((k, make_zero(v)) for k, v in x.items())
    if is_node(x):
        z = copy.copy(x)
        for name, value in node_fields(x):
            setattr(z, name, make_zero(value))
        return z
    return x
