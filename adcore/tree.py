"""Structured values ("trees"): nested tuples, lists, dicts and model objects.

A class takes part in the tree by naming its tree fields in ``__tree_fields__``
(for example ``("weight", "bias")``); every other attribute is static and shared
by copies.  ``make_zero``, gradients, optimiser state, ``destructure``, printing
and saving all walk trees through the functions of this module.

Two shapes of the same tree appear: the *model* shape (nodes are objects) and
the *mirror* shape (nodes become dicts of their fields, tuples and dicts stay,
float arrays are leaves and everything else is ``None``).  Gradients and
optimiser state have the mirror shape; the walkers below accept either shape
for their extra arguments.
"""
import copy

import numpy as np


class FrozenDict(dict):
    """A dict that cannot be changed: the node of a gradient mirror that the compiled path
    returns again from call to call (like Flux's NamedTuples; ``dict(g)`` or
    ``copy.copy(g)`` is a plain dict to change)."""

    def _refuse(self, *args, **kwargs):
        raise TypeError("a gradient's dict is returned again by the next call and cannot "
                        "be changed; change dict(g) instead")

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self):
        return dict, (dict(self),)


def is_node(obj):
    """True when ``obj`` is an object whose class declares ``__tree_fields__``."""
    return hasattr(type(obj), "__tree_fields__")


def node_fields(obj):
    """The ``(name, value)`` pairs of a node's tree fields, in declaration order."""
    return [(name, getattr(obj, name)) for name in type(obj).__tree_fields__]


def is_float_array(x):
    return isinstance(x, np.ndarray) and x.dtype.kind == "f"


def children(x):
    """The ``(key, child)`` pairs of a container or node; ``[]`` for a leaf."""
    if is_node(x):
        return node_fields(x)
    if isinstance(x, dict):
        return list(x.items())
    if isinstance(x, (tuple, list)):
        return list(enumerate(x))
    return []


def child(y, key):
    """``y``'s child at ``key`` whatever shape ``y`` has (``None`` stays ``None``)."""
    if y is None:
        return None
    if is_node(y):
        return getattr(y, key)
    if isinstance(y, dict):
        return y.get(key)
    if isinstance(y, (tuple, list)):
        return y[key]
    raise TypeError(f"expected a tree with a child {key!r}, got {type(y).__name__}")


def _rebuild(x, items):
    """``x``'s container type around new children ``items`` (a list of values)."""
    if is_node(x):
        z = copy.copy(x)
        for (name, _), value in zip(node_fields(x), items):
            setattr(z, name, value)
        return z
    if isinstance(x, dict):
        return type(x)(zip(x.keys(), items))
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*items)
    return type(x)(items)


def fmap(f, x, *ys):
    """Rebuild ``x`` with the same types, ``f(leaf, *y_leaves)`` at each float array.

    Nodes are shallow-copied, so static attributes are shared; non-float leaves are
    kept.  ``ys`` are trees of the model or mirror shape walked alongside ``x``.
    """
    if is_float_array(x):
        return f(x, *ys)
    kids = children(x)
    if not kids and not isinstance(x, (tuple, list, dict)):
        return x
    return _rebuild(x, [fmap(f, c, *(child(y, k) for y in ys)) for k, c in kids])


def mirror(f, x, *ys):
    """The mirror of ``x``: dicts for nodes, ``f(leaf, *y_leaves)`` at float arrays, ``None``
    at every other leaf (functions, ints, integer arrays)."""
    if is_float_array(x):
        return f(x, *ys)
    if is_node(x):
        return {k: mirror(f, c, *(child(y, k) for y in ys)) for k, c in node_fields(x)}
    if isinstance(x, dict):
        return {k: mirror(f, c, *(child(y, k) for y in ys)) for k, c in x.items()}
    if isinstance(x, (tuple, list)):
        return type(x)(mirror(f, c, *(child(y, k) for y in ys)) for k, c in enumerate(x))
    return None


def leaves(x):
    """The float arrays of ``x`` with their paths, ``[(path_tuple, array), ...]``, in order."""
    out = []

    def walk(v, path):
        if is_float_array(v):
            out.append((path, v))
        for k, c in children(v):
            walk(c, path + (k,))

    walk(x, ())
    return out


def path_string(path):
    """``("layers", 0, "weight")`` -> ``"layers.0.weight"``."""
    return ".".join(str(k) for k in path)


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
