"""A staged loss whose batch rows are split across Numba's threads.

When ``rows.row_verdict`` proves the loss row-independent and ``split_policy`` finds that
splitting pays, the loss is staged again for one part of the batch (``parts`` equal parts
of ``rows`` rows), and each call runs that part program's gradient on every part at
once (``part_launch.launch``, a ``prange`` over the parts): a part reads its rows of the
batch arguments in place and has its own workspace and its own zeroed copy of every
shadow; the parameters are shared, read only.  After the parts join, the parts'
parameter gradients are added (in part order, so every call rounds the same way) into
the model's shadow, weighted by ``1/parts`` for a mean, on the threads too; the loss
likewise.  A call made while Numba has one thread runs the whole batch's serial program.
"""
import numba
import numpy as np
from numba.core import types

from adcore.annotations import Const, Duplicated
from adcore.calling.addresses import address, view

from .arguments import Kind
from .drivers import Zeroing, _zero
from .operands import LINE_BYTES
from .part_launch import launch
from .rows import NoSplit, row_verdict
from .split_policy import parts_for

BLOCK = 4096            # elements of a shadow each iteration of the parallel reduction adds
STACKED = (Kind.WORK, Kind.KBUF)     # the part program's own buffers: one per part


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
        self.stacks = {k: _stack(parts, sample) for k, (kind, _, _, sample) in enumerate(slots)
                       if kind in STACKED}
        self.param_shadows = [q for q, k in enumerate(part.grad.shadowed)
                              if slots[k][0] == Kind.PARAM]
        self.shadow_stacks = [_stack(parts, s) for s in part.driver_shadow_samples]
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
        self.part_function = _part_function(part, self)
        self.reduce_function, self.blocks = _reduce_function(part, self)
        self.describe = (f"split into {parts} parts of {self.rows} rows on Numba's threads "
                         f"(a per-row loss {'averaged' if weighting == 'mean' else 'summed'} "
                         f"over the batch)")

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


def _stack(parts, sample):
    """``parts`` zeroed rows like ``sample`` (flattened), each starting on a cache line."""
    from .program import line_aligned_zeros
    n = sample.size
    line = LINE_BYTES // sample.dtype.itemsize
    return line_aligned_zeros((parts, -(-n // line) * line), sample.dtype)


def _part_function(part, split):
    """The ``cfunc`` ``part(t, table)`` running the part program's gradient on part ``t``
    (see ``RowSplit.call`` for the table)."""
    scope = {"stub": part.grad.native, "view": view, "_zero": _zero, "np": np}
    slot = {item: 1 + i for i, item in enumerate(split.table_items)}
    body = _table_lines(scope, split)
    call = []
    for k, (_, j, _, sample) in enumerate(part.slots):
        if k in split.scalars:
            scope[f"T_v{k}"] = type(sample)
            body.append(f"v{k} = T_v{k}(values[{split.scalars.index(k)}])")
            call.append(f"v{k}")
            continue
        if k in split.stacks:
            body.append(_part_view(scope, f"x{k}", split.stacks[k], sample))
        elif ("darg", k) in slot:
            shape = (sample.size,) if part.flat[k] else sample.shape
            body.append(_view(scope, f"x{k}", f"table[{slot['darg', k]}]", shape, sample.dtype))
        else:
            size = split.rows * int(np.prod(sample.shape[1:], dtype=np.int64))
            body.append(_view(scope, f"x{k}", f"table[{slot['rowed', j]}]", (size,), sample.dtype,
                              f" + t * {size * sample.dtype.itemsize}"))
        call.append(f"x{k}")
    for q, sample in enumerate(part.driver_shadow_samples):
        body.append(_part_view(scope, f"s{q}", split.shadow_stacks[q],
                               sample.reshape(-1) if part.dflat[q] else sample))
        if q in split.param_shadows or part.zeroing[q] != Zeroing.NEVER:
            body.append(f"_zero(s{q}.reshape(-1))")
        call.append(f"s{q}")
    body.append(f"losses[t] = stub({', '.join(call)})[0]")
    return _cfunc(scope, "part", body)


def _table_lines(scope, split):
    """The lines binding ``table``, ``losses`` and ``values`` (the scalars) in a part or
    reduce function."""
    scope["T_int"], scope["T_float"] = np.int64, np.float64
    return [f"table = view(address, ({1 + len(split.table_items)},), T_int)",
            f"losses = view({address(split.losses)}, ({split.parts},), T_float)",
            f"values = view({address(split.scalar_values)}, "
            f"({len(split.scalar_values)},), T_float)"]


def _cfunc(scope, name, body):
    lines = [f"def {name}(t, address):"] + [f"    {b}" for b in body]
    exec("\n".join(lines) + "\n", scope)
    return numba.cfunc(types.void(types.int64, types.int64), cache=False)(scope[name])


def _view(scope, name, base, shape, dtype, offset=""):
    """The line binding ``name`` to the C-contiguous array of ``shape`` and ``dtype`` at
    the address ``base`` (an expression) plus ``offset``."""
    scope[f"T_{name}"] = np.dtype(dtype).type
    return f"{name} = view({base}{offset}, {tuple(shape)!r}, T_{name})"


def _part_view(scope, name, stack, sample):
    """The line binding ``name`` to part ``t``'s row of ``stack``, shaped like ``sample``."""
    return _view(scope, name, str(address(stack)), sample.shape, sample.dtype,
                 f" + t * {stack.strides[0]}")


def _reduce_function(part, split):
    """``(cfunc reduce(b, table), blocks)``: block ``b`` of ``BLOCK`` elements of the
    parameters' shadows gets their parts' gradients added (in part order, times the
    weight), or set when the table's zero flag is on."""
    scope = {"view": view}
    slot = {item: 1 + i for i, item in enumerate(split.table_items)}
    n = len(part.flat)
    scale = "" if split.weight == 1.0 else f" * {split.weight!r}"
    body, first = _table_lines(scope, split) + ["zero = table[0] != 0", "b = t"], 0
    for q in split.param_shadows:
        stack, sample = split.shadow_stacks[q], part.driver_shadow_samples[q]
        size, blocks = sample.size, -(-sample.size // BLOCK)
        body += [f"{'if' if not first else 'elif'} b < {first + blocks}:",
                 "    " + _view(scope, f"d{q}", f"table[{slot['darg', n + q]}]", (size,),
                                sample.dtype),
                 "    " + _view(scope, f"P{q}", str(address(stack)), stack.shape, stack.dtype),
                 f"    for i in range((b - {first}) * {BLOCK}, min({size}, (b - {first} + 1) * {BLOCK})):",
                 f"        g = P{q}[0, i]",
                 f"        for p in range(1, {split.parts}):",
                 f"            g += P{q}[p, i]",
                 f"        d{q}[i] = g{scale} if zero else d{q}[i] + g{scale}"]
        first += blocks
    return _cfunc(scope, "reduce", body), first


def plan(stage_part, f, args, values, records, tracked, loss_id):
    """``(RowSplit or None, what the program does with threads)`` for a loss staged on
    ``args`` (``values``: their values, ``tracked``: their traced values) that recorded
    ``records`` with the loss ``loss_id``; ``stage_part(f, args)`` stages one part."""
    batch, rowed = batch_arguments(args, values)
    verdict = row_verdict(records, [tracked[j].id for j in rowed], loss_id)
    if isinstance(verdict, NoSplit):
        return None, f"runs serially: {verdict.reason}"
    parts, why = parts_for(batch, records)
    if why is not None:
        return None, f"runs serially: {why}"
    part = stage_part(f, _part_args(args, rowed, batch // parts))
    split = RowSplit(part, rowed, batch, parts, verdict.weighting)
    return split, split.describe
