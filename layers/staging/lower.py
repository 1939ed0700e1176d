"""Lowering a recording to the source of one Numba function.

Each record becomes loops (or a kernel call) writing a fresh slice of a flat workspace
buffer, or a ``View`` of an earlier value when it only reinterprets memory (reshape,
transpose, broadcasting, basic indexing, copy).  Shapes are static, so loops have
constant trip counts and views constant strides.  The function returns the loss.

The program's arguments are listed in ``Lowering.args`` (:mod:`layers.staging.arguments`).
``Lowering`` is its operands (:mod:`operands`), its line writer (:mod:`emission`) and the
lowering of each kind of record: elementwise (:mod:`elementwise`), reductions
(:mod:`reductions`), matrix products (:mod:`products`), indexing (:mod:`indexing`), joins
(:mod:`joins`) and user kernels (:mod:`kernel_calls`).
"""
import math

import numpy as np

from adcore.errors import UnsupportedError

from .. import kernels
from .arguments import Arg, Kind
from .elementwise import Elementwise, inlined, scalar_template
from .emission import Emission
from .indexing import Indexing
from .joins import Joins
from .kernel_calls import KernelCalls
from .operands import FLOATS, Operands, literal, work_name
from .products import lower_matmul
from .reductions import Reductions


class Lowering(Operands, Emission, Elementwise, Reductions, Indexing, Joins, KernelCalls):
    """Generate the program for ``records``; ``leaves`` maps input ids to program args:
    ``{id: (Kind.PARAM | Kind.INPUT, name, value)}``; ``indices`` maps ``id(array)`` of
    integer argument arrays to their program names (``Kind.INDEX`` args; the
    ``Kind.INDEX_ND`` arg of one is named with a suffix ``nd``); ``states`` maps
    ``id(array)`` of layers' state arrays to their names (``Kind.STATE`` args); the
    records in ``outputs`` (the loss, traced aux outputs) are kept in memory, others may be
    computed inline where they are used (``inlined``)."""

    # The method lowering each op without a ``scalar`` template (see ``adcore.tape.rules``).
    STRUCTURAL = {
        "sum": "reduce", "mean": "reduce", "max": "reduce", "min": "reduce", "matmul": "matmul",
        "softmax": "softmax", "logsoftmax": "softmax", "logsumexp": "logsumexp",
        "reshape": "reshape", "transpose": "transpose", "broadcast_to": "broadcast_to",
        "copy": "same", "getitem": "getitem", "take": "take", "setitem": "setitem",
        "concatenate": "join", "stack": "join", "njit_kernel": "kernel_call",
    }

    def __init__(self, records, leaves, indices, states, outputs=()):
        self.lines, self.depth, self.counter = [], 1, 0
        self.inline = inlined(records, outputs)
        self.views, self.args, self.work = {}, [], {d: 0 for d in FLOATS}
        self.whole_vectors = set()        # (dtype, offset) of buffers reserving whole vectors
        self.indices, self.states, self.kernel_names = indices, states, {}
        self.globals = {"K": kernels, "S": kernels.S, "math": math, "np": np}
        for rec_id, (kind, name, value) in leaves.items():
            self.views[rec_id] = self.leaf(kind, name, value)
        for rec in records:
            if rec.op != "input":
                self.lower(rec)

    def source(self, loss_id, loss_value):
        """The program's source, returning the loss (the record ``loss_id``, or a constant)."""
        for dtype, size in self.work.items():
            if size:
                self.args.append(Arg(work_name(dtype), Kind.WORK, (size, dtype)))
        if loss_id is None:
            ret = literal(np.asarray(loss_value).reshape(-1)[0])
        else:
            v = self.views[loss_id]
            ret = v.at(["0"] * len(v.shape))
        head = "def program(" + ", ".join(a.name for a in self.args) + "):"
        return "\n".join([head] + self.lines + [f"    return {ret}"]) + "\n"

    def lower(self, rec):
        value = np.asarray(rec.value)
        if scalar_template(rec.op) is not None:
            out = self.elementwise(rec, value)
        elif rec.op in self.STRUCTURAL:
            out = getattr(self, self.STRUCTURAL[rec.op])(rec, value)
        else:
            raise UnsupportedError(f"the recorded operation {rec.op!r}",
                                   detail="the compiled path (Duplicated) has no lowering for it")
        self.views[rec.out] = out

    # -- records that reinterpret memory, and matrix products ------------------------------
    def reshape(self, rec, value):
        x = self.views[rec.inputs[0]]
        return x.reshape(value.shape) or self.copy(x).reshape(value.shape)

    def transpose(self, rec, value):
        return self.views[rec.inputs[0]].transpose(rec.attrs["axes"])

    def broadcast_to(self, rec, value):
        return self.views[rec.inputs[0]].broadcast(value.shape)

    def same(self, rec, value):
        return self.views[rec.inputs[0]]

    def matmul(self, rec, value):
        a, b = self.operand(rec, 0), self.operand(rec, 1)
        if a.base is None or b.base is None:
            raise UnsupportedError("matmul with a 0-d operand")
        return lower_matmul(self, a, b, value)
