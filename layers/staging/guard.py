"""Generated Python functions that check a call matches a compiled program and gather
its arrays.

Staging walks the arguments and what the loss reads (``reads.Reads``) once;
``GuardWriter`` turns that walk into straight-line Python: type, shape and dtype checks
on every leaf, identity checks on library objects (activation functions, ``only``, ...),
and equality checks on ints and other plain values.  The generated ``gather(fn, *args)``
(``fn`` the loss) returns ``None`` when anything differs (then the caller stages again)
or the tuple of values the driver needs; a variant returns the driver's call on them
(``program.gradients``).
"""
import numpy as np

from adcore.annotations import Const, Duplicated
from adcore.backend.code_reads import library
from adcore.calling.guard_code import used_bindings
from adcore.errors import ActivityError
from adcore.tree import FrozenDict, child, is_node

from .reads import _contiguous

_PLAIN = (int, float, complex, str, bytes, bool, type(None), np.number, np.bool_)


class GuardWriter:
    """Accumulates checks and gathered expressions for ``gather(fn, a0, a1, ...)``;
    consecutive checks become one ``if``.  The checks of an array (``array``) are kept
    apart, so that a variant of the function can leave them to the native code it calls
    (``source``'s ``checked_natively``)."""

    def __init__(self, nargs):
        self.nargs = nargs
        self.lines, self.pending = [], []   # lines, and each pending check as (cond, array)
        self.env = {"ndarray": np.ndarray, "Duplicated": Duplicated, "Const": Const,
                    "_contiguous": _contiguous, "FrozenDict": FrozenDict}
        self.n = 0

    def name(self, prefix="v"):
        self.n += 1
        return f"{prefix}{self.n}"

    def const(self, obj):
        name = self.name("G")
        self.env[name] = obj
        return name

    def let(self, expr):
        self.flush()
        v = self.name()
        self.lines.append(f"    {v} = {expr}")
        return v

    def check(self, cond, array=None):
        """Add condition ``cond`` (about array variable ``array``, when given)."""
        self.pending.append((f"({cond})", array))

    def flush(self):
        if self.pending:
            self.lines.append(list(self.pending))
            self.pending = []

    def same(self, var, value):
        """Check ``var`` equals the static ``value`` (identity for objects)."""
        if value is None or isinstance(value, bool):
            self.check(f"{var} is {value}")
        elif isinstance(value, _PLAIN) or (isinstance(value, tuple) and
                                         all(isinstance(v, _PLAIN) for v in value)):
            self.check(f"type({var}) is {self.const(type(value))} and {var} == {self.const(value)}")
        else:
            self.check(f"{var} is {self.const(value)}")

    def array(self, var, value):
        """Check type, shape and dtype (contiguity is left to the driver, whose
        ``reshape`` refuses other layouts).  The dtype is checked equal, not only the same
        object: an unpickled array's dtype is a new object."""
        dtype = self.const(value.dtype)
        self.check(f"type({var}) is ndarray and {var}.shape == {value.shape!r} and "
                   f"({var}.dtype is {dtype} or {var}.dtype == {dtype})", var)

    def _body(self, checked_natively, ret):
        lines = []
        for line in self.lines:
            if isinstance(line, str):
                lines.append(line)
                continue
            conds = [c for c, array in line if array is None or array not in checked_natively]
            if conds:
                lines.append(f"    if not ({' and '.join(conds)}): return None")
        return used_bindings(lines, ret)

    def source(self, ret, lead=(), locked=False, checked_natively=(), tail=None):
        """``def gather(*lead, fn, a0, ...)`` returning ``ret`` when every check passes
        (evaluated holding ``LOCK`` when ``locked``), else ``None``; the checks of the
        arrays named in ``checked_natively`` are left out (``ret`` checks them).  ``tail``,
        when given, is the function's last statements instead (lines of source)."""
        self.flush()
        args = ", ".join(list(lead) + ["fn"] + [f"a{k}" for k in range(self.nargs)])
        if tail is None:
            tail = ["with LOCK:", f"    return {ret}"] if locked else [f"return {ret}"]
        body = "\n".join(self._body(set(checked_natively), "\n".join(tail)))
        return (f"def gather({args}):\n    try:\n" +
                "\n".join("    " + line for line in body.splitlines()) +
                "\n    except (AttributeError, KeyError, IndexError, TypeError, ValueError):\n"
                "        return None\n" + "".join(f"    {line}\n" for line in tail))

    def compile(self, ret, lead=(), lock=None, checked_natively=(), tail=None, **names):
        """``source``'s function; ``lock`` is its ``LOCK``, ``names`` more globals ``ret``
        or ``tail`` use."""
        scope = dict(self.env, LOCK=lock, **names)
        exec(self.source(ret, lead, lock is not None, checked_natively, tail), scope)
        return scope["gather"]


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
