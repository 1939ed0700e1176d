"""The native functions of a split batch (``row_split.RowSplit``), written as Python
source and compiled as ``numba.cfunc``s of ``void(i64 t, i64 table)`` for
``part_launch.launch``: ``part_function`` runs the part program's gradient on part ``t``,
``reduce_function`` adds the parts' parameter gradients of block ``t`` into the model's
shadows.  ``table`` is the address of the split's int64 table: ``[0]`` the zero flag,
then the addresses of the call's arrays (``RowSplit.table_items``); every view is made
inside the function, from addresses."""
import numba
import numpy as np
from numba.core import types

from adcore.calling.addresses import address, view

from .drivers import Zeroing, _zero
from .operands import LINE_BYTES

BLOCK = 4096            # elements of a shadow each call of the reduce function adds


def stack(parts, sample):
    """``parts`` zeroed rows like ``sample`` (flattened), each starting on a cache line."""
    from .program import line_aligned_zeros
    n = sample.size
    line = LINE_BYTES // sample.dtype.itemsize
    return line_aligned_zeros((parts, -(-n // line) * line), sample.dtype)


def part_function(part, split):
    """The ``cfunc`` ``part(t, table)`` running the part program's gradient on part ``t``
    (see ``RowSplit.call`` for the table)."""
    scope = {"stub": part.grad.njit_call, "view": view, "_zero": _zero, "np": np}
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


def reduce_function(part, split):
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
