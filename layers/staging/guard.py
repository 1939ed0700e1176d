"""Generated Python functions that check a call matches a compiled program and gather
its arrays.

Staging walks the arguments and what the loss reads (``reads.Reads``) once;
``GuardWriter`` (adcore's guard builder, :mod:`adcore.calling.guard_builder`) turns
that walk into straight-line Python: type, shape and dtype checks
on every leaf, identity checks on library objects (activation functions, ``only``, ...),
and equality checks on ints and other plain values.  The generated ``gather(fn, *args)``
(``fn`` the loss) returns ``None`` when anything differs (then the caller stages again)
or the tuple of values the driver needs; a variant returns the driver's call on them
(``program.gradients``).
"""
import numpy as np

from adcore.annotations import Const, Duplicated
from adcore.backend.code_reads import library
from adcore.calling.guard_builder import GuardBuilder, compiled
from adcore.errors import ActivityError
from adcore.tree import FrozenDict, child, is_node

from .reads import _contiguous

# what a guard's walk of the arguments may raise on arguments unlike the compiled ones
_CAUGHT = (AttributeError, KeyError, IndexError, TypeError, ValueError)


class GuardWriter(GuardBuilder):
    """The guard ``gather(fn, a0, a1, ...)`` of a staged program (``fn`` the loss, the
    arguments after it).  The checks of an array (``array``) are kept apart, so that a
    variant of the function can leave them to the native code it calls
    (``source``'s ``checked_natively``)."""

    def __init__(self, nargs):
        super().__init__({"ndarray": np.ndarray, "Duplicated": Duplicated, "Const": Const,
                          "_contiguous": _contiguous, "FrozenDict": FrozenDict})
        self.nargs = nargs

    def source(self, ret, lead=(), locked=False, checked_natively=(), tail=None):
        """``def gather(*lead, fn, a0, ...)`` returning ``ret`` when every check passes
        (evaluated holding ``LOCK`` when ``locked``), else ``None``; the checks of the
        arrays named in ``checked_natively`` are left out (``ret`` checks them).  ``tail``,
        when given, is the function's last statements instead (lines of source)."""
        params = list(lead) + ["fn"] + [f"a{k}" for k in range(self.nargs)]
        if tail is None:
            tail = ["with LOCK:", f"    return {ret}"] if locked else [f"return {ret}"]
        return super().source("gather", params, tail, _CAUGHT, checked_natively)

    def compile(self, ret, lead=(), lock=None, checked_natively=(), tail=None, **names):
        """``source``'s function; ``lock`` is its ``LOCK``, ``names`` more globals ``ret``
        or ``tail`` use."""
        return compiled(self.source(ret, lead, lock is not None, checked_natively, tail),
                        dict(self.env, LOCK=lock, **names), "gather")


def emit_state(w, reads, var, value, sink, path):
    """Check ``var`` holds a layer's state array like ``value`` (a name of the layer's
    ``__state_fields__``: running statistics, a random state), which the program reads and
    writes in place, so it must be that very array: writeable and C-contiguous."""
    if not (value.flags.c_contiguous and value.flags.writeable):
        raise ActivityError(f"{'.'.join(map(str, path))} is not a writeable C-contiguous "
                            "array; the compiled program updates it in place "
                            "(np.ascontiguousarray)")
    w.array(var, value)
    w.check(f"{var}.flags.c_contiguous and {var}.flags.writeable")
    reads.argument(var, value)
    sink(path, var, None, value, True)


def emit_tree(w, reads, var, value, dvar, dvalue, sink, path=()):
    """Write the checks for ``var`` holding a tree like ``value`` (and ``dvar`` its shadow
    like ``dvalue``, or ``None``).  Each float or integer array and float leaf goes to
    ``sink(path, var, dvar, value, False)``, each layer's state array (``emit_state``) to
    ``sink(path, var, None, value, True)``; everything else (static attributes of nodes,
    other objects) is walked by ``reads`` (a ``layers.staging.reads.Reads``).  Returns the
    expression of the gradient mirror (FrozenDicts for nodes and dicts, tuples, the shadow
    arrays at float array leaves, else ``None``)."""
    where = ".".join(map(str, path)) or "argument"
    if isinstance(value, np.ndarray) and value.dtype.kind in "fiu":
        w.array(var, value)
        reads.argument(var, value)
        if dvar is not None and value.dtype.kind == "f":
            w.array(dvar, value)
            sink(path, var, dvar, value, False)
            return dvar
        sink(path, var, None, value, False)
        return "None"
    if isinstance(value, (float, np.floating)) and not isinstance(value, bool):
        w.check(f"type({var}) is {w.const(type(value))}")
        sink(path, var, None, value, False)
        return "None"

    def sub(key, attr):
        get = (lambda v: f"{v}.{key}") if attr else (lambda v: f"{v}[{key!r}]")
        dget = (lambda v: f"{v}.{key}") if is_node(dvalue) else (lambda v: f"{v}[{key!r}]")
        dv = w.let(dget(dvar)) if dvar is not None else None
        return emit_tree(w, reads, w.let(get(var)), child(value, key), dv,
                         child(dvalue, key) if dvar is not None else None, sink, path + (key,))

    if is_node(value):
        fields = type(value).__tree_fields__
        w.check(f"type({var}) is {w.const(type(value))}")
        d = getattr(value, "__dict__", {})
        if not library(type(value)):
            reads.cls(type(value))
            w.check(f"tuple({var}.__dict__) == {w.const(tuple(d))}")
        states = getattr(type(value), "__state_fields__", ())
        for k in d:
            if k in states and isinstance(d[k], np.ndarray):
                emit_state(w, reads, w.let(f"{var}.{k}"), d[k], sink, path + (k,))
            elif k not in fields:
                reads.item(d, k, f"{var}.__dict__[{k!r}]", f"{where}.{k}")
        items = [f"{k!r}: {sub(k, True)}" for k in fields]
        return "FrozenDict({" + ", ".join(items) + "})"
    if isinstance(value, (tuple, list)):
        w.check(f"type({var}) is {w.const(type(value))} and len({var}) == {len(value)}")
        return "(" + "".join(f"{sub(i, False)}, " for i in range(len(value))) + ")"
    if isinstance(value, dict):
        w.check(f"type({var}) is dict and tuple({var}) == {w.const(tuple(value))}")
        return "FrozenDict({" + ", ".join(f"{k!r}: {sub(k, False)}" for k in value) + "})"
    reads.value(value, var, where)
    return "None"
