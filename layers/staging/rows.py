"""Whether a traced loss is row-independent: the proof that lets a batch's rows be split.

``row_verdict(records, rowed, loss_id)`` follows the recording from the leaves in
``rowed`` (the batch's arguments, whose axis 0 is the row axis) and proves that every
value computed from them keeps the row axis first, with each row computed from the same
row of its operands only (elementwise operations with row-free operands broadcast along
it, products ``rows @ weights``, reductions and softmaxes over other axes, reshapes and
slices that keep axis 0 whole, the per-sample layer kernels), until the loss, a sum or
a mean over every element of a row value.  Then the loss over a batch is the sum (or
the row-weighted mean) of the losses over its parts, and so is its gradient.  Anything
else (a reduction over rows before the end, softmax over axis 0, a reshape that moves
rows, a row-free array as long as the batch, a user kernel, state) is a ``NoSplit``
naming the operation.
"""
from typing import NamedTuple

import numpy as np

from adcore.tape.rules import RULES

from .. import conv_kernels, recurrent_kernels
from .row_signature import signature
from .trace import Derived, TapeRef

# Layer kernels that compute each sample from the same sample of their first operand.
PER_SAMPLE_KERNELS = (conv_kernels.conv2d, conv_kernels.pool2d, recurrent_kernels.rnn,
                      recurrent_kernels.lstm, recurrent_kernels.gru)
ROW_REDUCTIONS = {"sum": "sum", "mean": "mean"}


class Split(NamedTuple):
    """The loss is ``weighting`` ("sum" or "mean") over rows of independent values;
    ``signature`` is the recording's ``row_signature.signature``."""
    weighting: str
    signature: list


class NoSplit(NamedTuple):
    """The rows cannot be split; ``reason`` says where."""
    reason: str


class _Coupled(Exception):
    """A record couples rows (its message is the reason)."""


def row_verdict(records, rowed, loss_id):
    """``Split`` or ``NoSplit`` for the recording ``records`` (see the module doc)."""
    if not rowed:
        return NoSplit("the loss has no batch argument (a float array whose axis 0 is rows)")
    walk = _RowWalk(set(rowed), records)
    try:
        for rec in records:
            if rec.op == "input":
                continue
            if rec.out == loss_id:
                return Split(walk.loss(rec), signature(records[:rec.out + 1], walk.rowed))
            walk.record(rec)
    except _Coupled as err:
        return NoSplit(str(err))
    return NoSplit("the loss is not a recorded reduction of the batch")


class _RowWalk:
    """The set of record ids whose axis 0 is the row axis, grown record by record."""

    def __init__(self, rowed, records):
        self.rowed, self.records = rowed, records

    def loss(self, rec):
        """The weighting of the loss ``rec``: "sum" or "mean"."""
        x = rec.inputs[0]
        if rec.op not in ROW_REDUCTIONS or x not in self.rowed:
            raise _Coupled(f"the loss is {rec.op!r} of a value, not a sum or a mean over the "
                           "batch's rows")
        axis, ndim = rec.attrs.get("axis"), np.ndim(rec.args[0])
        if axis is not None and sorted(a % ndim for a in _axes(axis)) != list(range(ndim)):
            raise _Coupled(f"the loss is a {rec.op} over axes {axis}, not over every element")
        return ROW_REDUCTIONS[rec.op]

    def record(self, rec):
        if not any(self._is_rowed(rec, k) for k in range(len(rec.inputs))):
            return
        op = rec.op
        if RULES.get(op) is not None and RULES[op].scalar is not None:
            self._elementwise(rec)
        elif op in _CHECKS:
            _CHECKS[op](self, rec)
        else:
            raise _Coupled(f"{op!r} of batch rows is not known to keep rows apart")
        self.rowed.add(rec.out)

    def _is_rowed(self, rec, k):
        i = rec.inputs[k]
        if i is not None:
            return i in self.rowed
        return isinstance(rec.args[k], Derived) and self._derived_rowed(rec.args[k])

    def _derived_rowed(self, d):
        """Whether a mask computed from traced values (``Derived``) depends on rows; it is
        checked like the elementwise operation it is."""
        if d.expr is None:
            return False
        operands = []
        for v in d.expr[1]:
            if isinstance(v, TapeRef):
                operands.append((np.shape(self.records[v.id].value), v.id in self.rowed))
            else:
                operands.append((np.shape(v), isinstance(v, Derived) and self._derived_rowed(v)))
        rowed = any(r for _, r in operands)
        if rowed:
            _aligned(np.shape(d), operands, repr(d.expr[0]))
        return rowed

    def _elementwise(self, rec):
        _aligned(np.shape(rec.value), [(np.shape(a), self._is_rowed(rec, k))
                                       for k, a in enumerate(rec.args)], repr(rec.op))

    def _only_first_rowed(self, rec):
        if not self._is_rowed(rec, 0) or any(self._is_rowed(rec, k)
                                             for k in range(1, len(rec.inputs))):
            raise _Coupled(f"{rec.op!r} with batch rows in an operand other than its first")

    def _matmul(self, rec):
        self._only_first_rowed(rec)
        if np.ndim(rec.args[0]) < 2 or np.ndim(rec.args[1]) > 2:
            raise _Coupled("a matrix product contracting over the batch's rows")

    def _same_first_axis(self, rec):
        x = np.shape(rec.args[0])
        if rec.op == "transpose" and tuple(rec.attrs["axes"])[:1] != (0,):
            raise _Coupled("a transpose that moves the batch's rows off axis 0")
        if np.ndim(rec.value) < 1 or np.shape(rec.value)[0] != x[0] or (
                rec.op == "broadcast_to" and np.ndim(rec.value) != len(x)):
            raise _Coupled(f"a {rec.op} that mixes the batch's rows")

    def _getitem(self, rec):
        index = rec.attrs["index"]
        items = index if isinstance(index, tuple) else (index,)
        if not items or not isinstance(items[0], slice) or items[0] != slice(None) or any(
                isinstance(i, (list, np.ndarray)) or i is Ellipsis for i in items):
            raise _Coupled("indexing that does not keep the batch's rows whole on axis 0")

    def _along_other_axis(self, rec):
        axis, ndim = rec.attrs.get("axis"), np.ndim(rec.args[0])
        if axis is None or 0 in (a % ndim for a in _axes(axis)):
            raise _Coupled(f"{rec.op!r} over the batch's rows (axis 0)")

    def _kernel(self, rec):
        if not any(rec.attrs["kernel"] is k for k in PER_SAMPLE_KERNELS):
            name = getattr(rec.attrs["kernel"], "__name__", "a kernel")
            raise _Coupled(f"the kernel {name!r}, not known to compute each sample apart")
        self._only_first_rowed(rec)
        if np.shape(rec.value)[0] != np.shape(rec.args[0])[0]:
            raise _Coupled("a kernel whose output has other rows than its input")

    def _join(self, rec):
        if not all(self._is_rowed(rec, k) for k in range(len(rec.inputs))) or \
                rec.attrs.get("axis", 0) % max(1, np.ndim(rec.value)) == 0:
            raise _Coupled(f"{rec.op!r} along the batch's rows or with row-free operands")


def _axes(axis):
    return axis if isinstance(axis, tuple) else (axis,)


def _aligned(shape, operands, what):
    """Raise unless every row operand (``(shape, True)``) has the result's rank (rows on
    axis 0) and every row-free one broadcasts along axis 0 (lower rank, or size 1)."""
    for s, rowed in operands:
        if rowed and (len(s) != len(shape) or len(s) == 0 or s[0] != shape[0]):
            raise _Coupled(f"{what} broadcasting the batch's rows off axis 0")
        if not rowed and len(s) == len(shape) and len(s) and s[0] != 1:
            raise _Coupled(f"{what} with a row-free array as long as the batch")


_CHECKS = {
    "matmul": _RowWalk._matmul, "reshape": _RowWalk._same_first_axis,
    "transpose": _RowWalk._same_first_axis, "broadcast_to": _RowWalk._same_first_axis,
    "copy": _RowWalk._same_first_axis, "getitem": _RowWalk._getitem,
    "sum": _RowWalk._along_other_axis, "mean": _RowWalk._along_other_axis,
    "max": _RowWalk._along_other_axis, "min": _RowWalk._along_other_axis,
    "softmax": _RowWalk._along_other_axis, "logsoftmax": _RowWalk._along_other_axis,
    "logsumexp": _RowWalk._along_other_axis, "njit_kernel": _RowWalk._kernel,
    "concatenate": _RowWalk._join, "stack": _RowWalk._join,
}
