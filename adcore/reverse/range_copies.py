"""Copies of a parallel loop's own range: LLVM compiles a loop ``out[i] = x[i]`` in Numba's
chunk function to one ``memcpy`` of the piece's elements, which reads and writes at the
loop index like the loop it stands for (:func:`adcore.reverse.parallel_loops.plan`)."""
from numba.core import types as nbtypes
from numba.np.numpy_support import as_dtype

from .. import numba_abi
from .value_stack import SIZES

_COPIES = ("llvm.memcpy.", "llvm.memmove.")


def range_copies(func, groups, sched):
    """``{memcpy call: (destination, source)}`` (positions among the chunk function's
    arguments) for each ``memcpy`` of the piece's own range of one array into another:
    the bytes from ``sched[0] * size`` for at most ``sched[1] - sched[0] + 1`` elements,
    as the iterations of a loop ``out[i] = x[i]`` would copy (LLVM's form of that loop)."""
    calls = [i for i in func.instructions() if i.opcode == "call" and (i.callee or "").startswith(_COPIES)]
    ends = _schedule_loads(func, sched) if calls else []
    if len(ends) != 2:
        return {}
    ends = {ends[0]: "lo", ends[1]: "hi"}
    data = {id(args[numba_abi.DATA]): (k, t) for k, (t, args) in enumerate(groups) if isinstance(t, nbtypes.Array)}
    copies = {}
    for call in calls:
        dst, src, length = call.operands[:3]
        placed = [_element_offset(p.defn, data, ends) for p in (dst, src)]
        if None in placed or placed[0][1:] != placed[1][1:] or placed[0][2] != "lo" or \
                not _element_count(length.defn, placed[0][1], ends):
            continue
        (k_dst, t_dst), (k_src, t_src) = (data[id(p[0])] for p in placed)
        if k_dst != k_src and t_dst.ndim == t_src.ndim == 1 and t_dst.dtype == t_src.dtype and \
                placed[0][1] == as_dtype(t_dst.dtype).itemsize:
            copies[call] = (k_dst, k_src)
    return copies


def copied_range(func, copies):
    """``(destination, source)`` when all the chunk function does is one of ``copies``
    (:func:`range_copies`): a loop ``out[i] = x[i]`` that LLVM made one ``memcpy``."""
    effects = [i for i in func.instructions() if i.opcode == "call" or
               i.opcode == "store" and i.operands[1].defn is not func.args[0]]
    return copies.get(effects[0]) if len(effects) == 1 else None


def _schedule_loads(func, sched):
    """The loads of the schedule's items 0 and 1 (a one-dimensional loop's first and last
    index), in that order, when those are all the schedule's loads."""
    loads = {}
    for i in func.instructions():
        if i.opcode != "load" or i.type != "i64":
            continue
        p, k = i.operands[0].defn, 0
        if getattr(p, "opcode", None) == "getelementptr" and len(p.operands) == 2 and p.operands[1].is_const \
                and p.element_type in ("i8", "i64"):
            k = int(p.operands[1].ref) // (1 if p.element_type == "i64" else 8)
            p = p.operands[0].defn
        if p is sched:
            loads[k] = i
    return [loads[0], loads[1]] if set(loads) == {0, 1} else []


def _element_offset(pointer, data, ends):
    """``(data pointer, element bytes, end)`` for ``getelementptr T, data, end`` (or ``i8``
    with ``end * bytes``), ``end`` a schedule load named in ``ends``; else None."""
    if getattr(pointer, "opcode", None) != "getelementptr" or len(pointer.operands) != 2 or \
            id(pointer.operands[0].defn) not in data:
        return None
    index, size = pointer.operands[1].defn, SIZES.get(pointer.element_type)
    if pointer.element_type == "i8":
        index, size = _scaled(index)
    return (pointer.operands[0].defn, size, ends.get(index)) if size and index in ends else None


def _scaled(value):
    """``(x, k)`` for ``x << log2(k)`` or ``x * k`` (k a constant), else ``(value, 1)``."""
    op = getattr(value, "opcode", None)
    if op == "shl" and value.operands[1].is_const:
        return value.operands[0].defn, 1 << int(value.operands[1].ref)
    if op == "mul" and value.operands[1].is_const:
        return value.operands[0].defn, int(value.operands[1].ref)
    return value, 1


def _element_count(length, size, ends):
    """Whether byte count ``length`` is at most ``(hi - lo + 1) * size``: the count, or
    Numba's clamp of it at zero (``select c, 0, count``)."""
    count, scale = _scaled(length)
    if scale != size:
        return False
    if getattr(count, "opcode", None) == "select":
        zero = [o.is_const and o.ref == "0" for o in count.operands[1:]]
        if zero.count(True) != 1:
            return False
        count = count.operands[1 + zero.index(False)].defn
    if getattr(count, "opcode", None) != "add" or count.operands[1].ref != "1":
        return False
    diff = count.operands[0].defn
    return getattr(diff, "opcode", None) == "sub" and ends.get(diff.operands[0].defn) == "hi" and \
        ends.get(diff.operands[1].defn) == "lo"
