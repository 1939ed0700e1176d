"""The tape: a public list of records, and the reverse sweep over it.

Every tracked value is the output of exactly one record, and its id is the index
of that record in ``Tape.records``, so a recording is a straight-line program
that other tools (the compiled path of ``layers``) can read and lower.
"""
import numpy as np

from ..errors import ADError
from .sums import blas_matrix, column_sums


class Record:
    """One recorded operation.

    ``op``      the rule name in ``adcore.tape.rules.RULES`` (``"input"`` for a leaf);
    ``inputs``  a tuple with, per operand, the id of a tracked operand or ``None``
                for a constant;
    ``args``    the operands' primal values (constants included), same order;
    ``out``     the id of the output (its index in ``Tape.records``);
    ``value``   the output's primal value;
    ``attrs``   keyword attributes of the op (``axis``, ``keepdims``, ``index``, ...).
    """

    __slots__ = ("op", "inputs", "args", "out", "value", "attrs")

    def __init__(self, op, inputs, args, out, value, attrs):
        self.op = op
        self.inputs = inputs
        self.args = args
        self.out = out
        self.value = value
        self.attrs = attrs

    def __repr__(self):
        ins = ", ".join("const" if i is None else f"%{i}" for i in self.inputs)
        attrs = "".join(f", {k}={v!r}" for k, v in self.attrs.items())
        shape = np.shape(self.value)
        return f"%{self.out} = {self.op}({ins}{attrs})  # {shape} {np.result_type(self.value)}"


class Tape:
    """A recording: ``records`` in execution order; ``inputs`` are the ids of the leaves.

    ``print(tape)`` shows the program one record per line.
    """

    def __init__(self):
        self.records = []
        self.inputs = []

    def __len__(self):
        return len(self.records)

    def __repr__(self):
        return "\n".join(repr(r) for r in self.records)

    def push(self, op, inputs, args, value, attrs):
        """Append a record and return the id of its output."""
        out = len(self.records)
        self.records.append(Record(op, inputs, args, out, value, attrs))
        return out

    def leaf(self, value):
        """Record a leaf (an input being differentiated) and return its id."""
        records = self.records
        rec = _new(Record)  # Record("input", (), (), out, value, {}) without __init__'s call
        rec.op = "input"
        rec.inputs = rec.args = ()
        rec.out = out = len(records)
        rec.value = value
        rec.attrs = {}
        records.append(rec)
        self.inputs.append(out)
        return out

    def backward(self, out, seed=None):
        """Reverse sweep from the output id ``out``.

        ``seed`` is the cotangent of the output (default ones).  Returns a list
        indexed by id holding the adjoint of every leaf (``None`` where no path
        from the output reaches it); adjoints of intermediate values are dropped
        as soon as they have been propagated.
        """
        rules = _RULES if _RULES is not None else _load_rules()
        records = self.records
        value = records[out].value
        if seed is None:
            seed = value.dtype.type(1) if isinstance(value, np.generic) else np.ones_like(value)
        elif np.shape(seed) != np.shape(value):
            raise ADError(f"seed of shape {np.shape(seed)} for an output of shape {np.shape(value)}")
        adj = [None] * len(records)
        owned = bytearray(len(records))  # adj[i] is a private buffer we may add into
        adj[out] = seed
        for k in range(out, -1, -1):
            g = adj[k]
            if g is None:
                continue
            rec = records[k]
            inputs = rec.inputs
            if not inputs:
                continue
            adj[k] = None
            rule = rules[rec.op]
            kind = rule.cotangents  # are the cotangents private arrays? (see rules.Rule)
            private = kind == "new" or kind == "of g" and owned[k]
            contribs = rule.vjp(g, rec)
            args = rec.args
            j = -1
            for i in inputs:  # (indexing: zipping the three tuples costs 0.15 µs a record)
                j += 1
                if i is None:
                    continue
                c = contribs[j]
                if c is None:
                    continue
                arg = args[j]
                old = adj[i]
                if c.shape != arg.shape or c.dtype is not arg.dtype and c.dtype != arg.dtype:
                    c = fit(c, arg)
                    if old is None:  # a sum or a cast is a new array: ours to add into
                        adj[i] = c
                        owned[i] = type(c) is np.ndarray and c.base is None
                        continue
                if old is None:
                    adj[i] = c
                    owned[i] = private and type(c) is np.ndarray
                elif owned[i]:
                    np.add(old, c, out=old)
                else:
                    adj[i] = old + c
                    owned[i] = isinstance(adj[i], np.ndarray)
        for i, a in enumerate(adj):  # the leaves' adjoints (the rest is None by now) as private arrays
            if a is not None and not owned[i]:
                adj[i] = np.array(a)
        return adj


_RULES = None
_new = object.__new__


def _load_rules():
    """The rule table (imported on first use: ``rules`` imports this module)."""
    global _RULES
    from .rules import RULES
    _RULES = RULES
    return RULES


def unbroadcast(g, shape):
    """Sum ``g`` over the axes that broadcasting added to reach ``g.shape`` from ``shape``."""
    extra = g.ndim - len(shape)
    if extra == 1 and blas_matrix(g):  # a bias's cotangent
        g = column_sums(g)
    elif extra:
        g = np.add.reduce(g, axis=tuple(range(extra)))
    if g.shape != shape:
        axes = tuple([a for a, n in enumerate(shape) if n == 1 and g.shape[a] != 1])
        g = np.add.reduce(g, axis=axes, keepdims=True)
    return g


def fit(c, like):
    """Bring a cotangent ``c`` to the shape and dtype of the primal ``like`` (a numpy value)."""
    if c.shape != like.shape:
        c = unbroadcast(np.asarray(c), like.shape)
    if c.dtype != like.dtype:
        if c.dtype.kind == "c" and like.dtype.kind != "c":
            c = c.real  # a real operand of a complex op: the real part (see rules)
        c = c.astype(like.dtype)
    return c
