"""Elementwise records in the staged program: computed inline in their one consumer
(``inlined``), by a vector kernel (:mod:`layers.vector_kernels`), or in loops from their
scalar template (``scalar_template``)."""
import re

import numpy as np

from adcore.backend import vector_math
from adcore.tape import RULES

from .. import vector_kernels
from .trace import Derived, TapeRef
from .views import ExprView, View, c_strides

# Ops whose staged scalar replaces the tape rule's: in the value's precision and
# branch-free, so the reverse pass has no control flow per element (the docs MLP's
# sigmoid: gradient 0.79 -> 0.77 ms).
STAGED_SCALARS = {"sigmoid": lambda rec: f"K.sigmoid_{np.asarray(rec.value).dtype.name}({{0}})"}


def scalar_template(op):
    """The scalar template of an elementwise op (a string, or a function of the record),
    ``None`` for other ops."""
    return STAGED_SCALARS.get(op, RULES[op].scalar)


def _template(rec):
    scalar = scalar_template(rec.op)
    return scalar(rec) if callable(scalar) else scalar


class Elementwise:
    """The elementwise records of :class:`layers.staging.lower.Lowering`; those in its
    ``inline`` become expressions, vector kernels go into its ``globals``."""

    def elementwise(self, rec, value):
        """The view of the elementwise record ``rec`` of value ``value``."""
        template = _template(rec)
        operands = [self.operand(rec, k) for k in range(len(rec.args)) if rec.args[k] is not None]
        if rec.out in self.inline:
            cast = "np.float32" if value.dtype == np.float32 else ""   # as a store would
            return ExprView(f"{cast}({template})", [o.broadcast(value.shape) for o in operands],
                            value.shape, value.dtype)
        out = self.buffer(value.shape, value.dtype)
        if self.in_vectors(rec, value, operands):
            self.vector_map(rec, value, out, operands[0])
        else:
            self.store(out, template, operands)
        return out

    @staticmethod
    def in_vectors(rec, value, operands):
        """Whether ``rec`` (a ``tanh``, ``exp``, ... of one contiguous operand of its dtype
        and shape) is computed by :mod:`layers.vector_kernels`: only when adcore maps
        vector math to libmvec, and for at least one vector of elements."""
        if not (vector_math.ENABLED and vector_kernels.vector_op(rec.op, value.dtype) and
                len(operands) == 1 and value.size >= vector_kernels.lanes(value.dtype)):
            return False
        x = operands[0]
        return (type(x) is View and x.base is not None and x.dtype == value.dtype and
                x.shape == value.shape and x.strides == c_strides(value.shape))

    def vector_map(self, rec, value, out, x):
        """``out = rec.op(x)`` by :func:`layers.vector_kernels.map_lines`."""
        name = vector_kernels.vector_name(rec.op, value.dtype)
        width, n = vector_kernels.lanes(value.dtype), value.size
        if (value.dtype, x.off) in self.whole_vectors and x.base == out.base:
            n = -(-n // width) * width     # into both buffers' reserved tails
        for count in {None, n % width or None}:
            self.globals[vector_kernels.vector_name(rec.op, value.dtype, count)] = \
                vector_kernels.vector_op(rec.op, value.dtype, count)
        self.emit_kernel(vector_kernels.map_lines, name, value.dtype, out.base, out.off,
                         x.base, x.off, n)


# A function call in a scalar template (``math.tanh(...)``, ``S.sigmoid(...)``): LLVM keeps
# such loops scalar, so arithmetic moved into one would lose its SIMD loop (measured: the
# seed model's bias add fused into its tanh loop made training 15% slower).
_CALL = re.compile(r"\w\(")


def inlined(records, outputs):
    """The ids of elementwise records computed inline in their one consumer instead of
    stored: the consumer is a sum/mean, or elementwise of the same shape, reads the value
    once (``{k}`` once in its template) and calls no function unless the record does
    (``_CALL``); no kernel call runs in between (it could change a state array the
    expression reads), and the record is not in ``outputs``.  Fusing ``relu(x @ W.T + b)``
    or ``sum(exp(-(y - t) ** 2))`` saves passes over memory and stored intermediates."""
    uses, consumer = {}, {}
    for rec in records:
        for k, i in enumerate(rec.inputs):
            if i is not None:
                uses[i] = uses.get(i, 0) + 1
                consumer[i] = (rec, k)
        for a in rec.args:
            if isinstance(a, Derived):   # recomputed from traced values: keep those stored
                for i in _derived_refs(a):
                    uses[i] = uses.get(i, 0) + 2
    out = set()
    for i, n in uses.items():
        rec = records[i]
        if n != 1 or i in outputs or rec.op not in RULES or scalar_template(rec.op) is None or \
                not isinstance(_template(rec), str):
            continue
        user, k = consumer[i]
        if any(r.op == "njit_kernel" for r in records[i + 1:user.out]):
            continue
        if user.op in ("sum", "mean"):
            out.add(i)
        elif scalar_template(user.op) is not None and np.shape(user.value) == np.shape(rec.value):
            position = sum(1 for a in user.args[:k] if a is not None)
            t = _template(user)
            text = "".join(t) if isinstance(t, tuple) else t
            if text.count(f"{{{position}}}") == 1 and (_CALL.search(_template(rec)) or
                                                      not _CALL.search(text)):
                out.add(i)
    return out


def _derived_refs(v):
    if v.expr is None:
        return
    for o in v.expr[1]:
        if isinstance(o, TapeRef):
            yield o.id
        elif isinstance(o, Derived):
            yield from _derived_refs(o)
