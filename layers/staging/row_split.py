"""A staged loss whose batch rows are split across Numba's threads.

When ``rows.row_verdict`` proves the loss row-independent and ``split_policy`` finds that
splitting pays, the loss is staged again for one part of the batch (``parts`` equal parts
of ``rows`` rows), and each call runs that part program's gradient on every part at
once (``part_launch.launch``, a ``prange`` over the parts, calling the functions of
``part_functions``): a part reads its rows of the
batch arguments in place and has its own workspace and its own zeroed copy of every
shadow; the parameters are shared, read only.  After the parts join, the parts'
parameter gradients are added (in part order, so every call rounds the same way) into
the model's shadow, weighted by ``1/parts`` for a mean, on the threads too; the loss
likewise.  A call made while Numba has one thread runs the whole batch's serial program,
and so do the calls before the program is hot (staging the split costs about a second:
a gradient called a few times never pays for it).
"""
import threading
import time

import numpy as np

from adcore.annotations import Const, Duplicated
from adcore.calling.addresses import address

from . import part_functions
from .arguments import Kind
from .part_launch import launch
from .rows import NoSplit, row_verdict
from .split_policy import largest_product, parts_for, thread_count, work

STACKED = (Kind.WORK, Kind.KBUF)     # the part program's own buffers: one per part
HOT_SECONDS = 1.0                    # serial gradient time after which a program splits


def batch_arguments(args, values):
    """``(batch, [argument index])``: the rows of the first float array argument (not the
    model) and the arguments that are float arrays with those rows; ``(0, [])`` if none."""
    rowed, batch = [], 0
    for j, (a, v) in enumerate(zip(args, values)):
        if isinstance(a, Duplicated) or not isinstance(v, np.ndarray) or v.dtype.kind != "f" \
                or v.ndim < 1:
            continue
        if not rowed:
            batch = v.shape[0]
        if v.shape[0] == batch:
            rowed.append(j)
    return batch, rowed


def _part_args(args, rowed, rows):
    """``args`` with the first ``rows`` rows of the batch arguments (``Const`` kept)."""
    out = list(args)
    for j in rowed:
        a = args[j]
        out[j] = Const(a.val[:rows]) if isinstance(a, Const) else a[:rows]
    return out


class RowSplit:
    """The threaded gradient of a row-independent loss (see the module doc)."""

    def __init__(self, part, rowed, batch, parts, weighting):
        self.part, self.rowed, self.batch, self.parts = part, rowed, batch, parts
        self.rows = batch // parts
        self.weight = 1.0 / parts if weighting == "mean" else 1.0
        slots, n = part.slots, len(part.flat)
        self.stacks = {k: part_functions.stack(parts, sample) for k, (kind, _, _, sample) in enumerate(slots)
                       if kind in STACKED}
        self.param_shadows = [q for q, k in enumerate(part.grad.shadowed)
                              if slots[k][0] == Kind.PARAM]
        self.shadow_stacks = [part_functions.stack(parts, s) for s in part.driver_shadow_samples]
        # What the table of addresses holds, in order: ("rowed", argument index) for the
        # batch's arguments, ("darg", driver position) for the part program's other arrays
        # and the parameters' shadows; ``scalars``: driver positions of numbers.
        self.table_items, self.scalars = [], []
        for k, (kind, j, path, sample) in enumerate(slots):
            if kind == Kind.INPUT and j in rowed and path == ():
                self.table_items.append(("rowed", j))
            elif k not in self.stacks:
                (self.table_items if isinstance(sample, np.ndarray) else self.scalars).append(
                    ("darg", k) if isinstance(sample, np.ndarray) else k)
        self.table_items += [("darg", n + q) for q in self.param_shadows]
        self.table = np.zeros(1 + len(self.table_items), np.int64)   # [0]: zero the shadows
        self.losses = np.zeros(parts, np.float64)
        self.scalar_values = np.zeros(max(1, len(self.scalars)), np.float64)
        self.part_function = part_functions.part_function(part, self)
        self.reduce_function, self.blocks = part_functions.reduce_function(part, self)
        self.describe = (f"split into {parts} parts of {self.rows} rows on Numba's threads "
                         f"(a per-row loss {_HOW[weighting]} over the batch)")

    def call(self, zero, f, args):
        """``(loss, gradient mirror)`` of ``f(*args)``, or ``None`` when the part program's
        guard does not take the arguments or an array is not C-contiguous."""
        got = self.part.gather(f, *_part_args(args, self.rowed, self.rows))
        if got is None:
            return None
        dargs, mirror = got
        keep, table = [], self.table
        for i, (what, k) in enumerate(self.table_items):
            if what == "rowed":
                a = np.ascontiguousarray(args[k].val if isinstance(args[k], Const) else args[k])
            else:
                a = dargs[k]
                if not a.flags.c_contiguous:
                    return None
            keep.append(a)
            table[1 + i] = address(a)
        for i, k in enumerate(self.scalars):
            self.scalar_values[i] = dargs[k]
        table[0] = 1 if zero else 0
        launch(self.part_function.address, self.parts, address(table))
        launch(self.reduce_function.address, self.blocks, address(table))
        return sum(self.losses.tolist()) * self.weight, mirror


class RowThreads:
    """What a staged program does with threads (``describe``, what ``layers.threads``
    shows): whether the recording proves its loss row-independent (else it runs serially,
    and ``describe`` names the operation that couples rows), and, decided once the program
    is hot (:meth:`call_gradient`) with more than one Numba thread, into how many parts a
    batch is split (``split``)."""

    def __init__(self, staged=None, stage_part=None, args=(), values=(), records=(),
                 tracked=(), loss_id=None, serial=None):
        self.staged, self.stage_part, self.split, self.pending = staged, stage_part, None, None
        self.serial_seconds = 0.0        # time spent in serial calls, before the split is staged
        if serial is not None:
            self.describe = f"runs serially: {serial}"
            return
        batch, rowed = batch_arguments(args, values)
        verdict = row_verdict(records, [tracked[j].id for j in rowed], loss_id)
        if isinstance(verdict, NoSplit):
            self.describe = f"runs serially: {verdict.reason}"
            return
        self.signature = verdict.signature
        self.pending = (verdict.weighting, batch, rowed, work(records), largest_product(records))
        self.describe = (f"rows independent (a per-row loss {_HOW[verdict.weighting]} over the "
                         f"batch): splits its {batch} rows on Numba's threads once its gradients "
                         f"have taken {HOT_SECONDS:g} s")

    @property
    def splits(self):
        """Whether calls may run split (now or once Numba has more than one thread)."""
        return self.split is not None or self.pending is not None

    def split_for(self, f, args):
        """The ``RowSplit`` (staging its part program at the first call asking for it with
        more than one Numba thread; ``args``: that call's arguments), or ``None``."""
        if self.pending is not None and thread_count() > 1:
            with _PLANNING:
                if self.pending is not None:
                    self._plan(f, args, *self.pending)
        return self.split

    def _plan(self, f, args, weighting, batch, rowed, ops, product):
        self.pending = None
        parts, why = parts_for(batch, ops, product)
        if why is not None:
            self.describe = f"runs serially: {why}"
            return
        part = self.stage_part(f, _part_args(args, rowed, batch // parts))
        if part.row_signature != self.signature:
            self.describe = ("runs serially: the loss records other operations for a part of "
                             "the batch than for the whole (its Python code depends on the "
                             "batch's size)")
            return
        self.split = RowSplit(part, rowed, batch, parts, weighting)
        self.describe = self.split.describe

    def call_gradient(self, serial):
        """The repeat call of a program that may split: the split gradient while Numba has
        more than one thread and the whole program's guard takes the arguments, else
        ``serial`` (the program's own repeat call).  The split is staged once the program
        is hot: once its serial calls have taken ``HOT_SECONDS`` in all (about what staging
        the split costs), unless ``layers.threads`` or ``train`` asked for it first."""
        staged = self.staged

        def call(zero, f, *args):
            if thread_count() > 1 and (self.split is not None or self.serial_seconds >= HOT_SECONDS) \
                    and staged.gather(f, *args) is not None:
                split = self.split_for(f, args)
                if split is not None:
                    with staged.lock:
                        got = split.call(zero, f, args)
                    if got is not None:
                        return got
            start = time.perf_counter()
            try:
                return serial(zero, f, *args)
            finally:
                self.serial_seconds += time.perf_counter() - start
        return call


def signature_of(args, values, records, tracked, loss_id):
    """The recording's ``row_signature.signature`` when the loss is row-independent, else
    ``None``."""
    _, rowed = batch_arguments(args, values)
    verdict = row_verdict(records, [tracked[j].id for j in rowed], loss_id)
    return None if isinstance(verdict, NoSplit) else verdict.signature


_HOW = {"mean": "averaged", "sum": "summed"}
_PLANNING = threading.Lock()
