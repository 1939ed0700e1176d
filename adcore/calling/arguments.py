"""Checking a call's arguments before anything runs: annotations, and the memory shadows
may (not) share.  Misuse is an :class:`ActivityError` naming the argument."""
import weakref

import numpy as np

from ..annotations import Active, Annotation, Const, Duplicated
from ..errors import ActivityError


def is_float_scalar(v):
    return isinstance(v, (float, np.floating)) and not isinstance(v, bool)


def _holds_floats(v):
    if isinstance(v, dict):
        v = tuple(v.values())
    return isinstance(v, (tuple, list)) and any(
        is_float_scalar(x) or (isinstance(x, np.ndarray) and x.dtype.kind == "f") or _holds_floats(x)
        for x in v)


def check_plain_argument(k, v):
    """Refuse a container of floats or float arrays passed to ``gradient`` unannotated:
    it would silently get no gradient."""
    if _holds_floats(v):
        raise ActivityError(f"argument {k}: gradient differentiates floats and float arrays, not "
                            f"a {type(v).__name__} holding them; pass its arrays as separate "
                            f"arguments, or wrap it in Const(...) to hold it constant")


def annotate(args):
    """The annotations of ``args`` (plain values become ``Const``), checked."""
    out = []
    for k, a in enumerate(args):
        ann = a if isinstance(a, Annotation) else Const(a)
        v = ann.val
        if isinstance(ann, Active):
            if isinstance(v, np.ndarray):
                raise ActivityError(f"argument {k}: Active on an array ({v.dtype}{list(v.shape)}); "
                                    f"use Duplicated(x, dx) for arrays")
            if not is_float_scalar(v):
                raise ActivityError(f"argument {k}: Active needs a float scalar, got {type(v).__name__}")
        elif isinstance(ann, Duplicated):
            if is_float_scalar(v):
                raise ActivityError(f"argument {k}: Duplicated on a float scalar; use Active(x)")
            if not isinstance(v, np.ndarray):
                raise ActivityError(f"argument {k}: Duplicated needs a numpy array, got {type(v).__name__}")
            if v.dtype.kind != "f" or v.dtype.itemsize not in (4, 8):
                raise ActivityError(f"argument {k}: Duplicated on a {v.dtype} array; only float32 and "
                                    f"float64 arrays carry derivatives (pass it plainly or as Const)")
            check_shadow(k, v, ann.dval, "shadow")
        out.append(ann)
    _check_memory(out)
    return out


def check_shadow(k, v, d, what):
    """ActivityError unless ``d`` (``what``: "shadow" or "tangent") can stand beside array
    argument ``k`` of value ``v``: an array of its shape and dtype that can be written."""
    if not isinstance(d, np.ndarray) or d.shape != v.shape or d.dtype != v.dtype:
        got = f"{d.dtype}{list(d.shape)}" if isinstance(d, np.ndarray) else type(d).__name__
        raise ActivityError(f"argument {k}: {what} is {got} but its primal is "
                            f"{v.dtype}{list(v.shape)}; they must match in shape and dtype")
    if not d.flags.writeable:
        raise ActivityError(f"argument {k}: the {what} array is read-only")


def _overlaps_itself(x):
    """True when two elements of array ``x`` may share memory (a zero stride from
    ``np.broadcast_to``, or an ``as_strided`` view whose rows overlap)."""
    if x.flags.c_contiguous or x.flags.f_contiguous or x.size == 0:
        return False
    span = x.itemsize
    for stride, n in sorted((abs(s), n) for s, n in zip(x.strides, x.shape) if n > 1):
        if stride < span:
            return True
        span += stride * (n - 1)
    return False


def share_memory(a, b):
    """True when arrays ``a`` and ``b`` may have an element in common."""
    if not np.may_share_memory(a, b):
        return False
    try:
        return bool(np.shares_memory(a, b, max_work=100_000))
    except np.exceptions.TooHardError:
        return True


def _address(x):
    return x.__array_interface__["data"][0]


def mirrored(a, b):
    """True when Duplicated ``a`` and ``b`` alias as their shadows do: each shadow laid out
    like its array, and the shadows as far apart as the arrays (``f(x[1:], x[:-1])`` with
    ``dx[1:], dx[:-1]``)."""
    return a.val.strides == a.dval.strides and b.val.strides == b.dval.strides \
        and _address(a.dval) - _address(b.dval) == _address(a.val) - _address(b.val)


def _check_memory(anns):
    """Shadows must be memory of their own: not overlapping themselves, any primal
    array, or another shadow (unless the shadows alias as their arrays do: ``f(x, x)``).
    The same array objects in the same places as in a call that passed need no new look."""
    roles = [(a.val, a.dval) if isinstance(a, Duplicated) else (a.val, None) for a in anns]
    remembered(("shadows",) + tuple(type(a) for a in anns), [x for pair in roles for x in pair],
               lambda _: _check_shadow_memory(anns))


def _check_shadow_memory(anns):
    arrays = [(k, a.val) for k, a in enumerate(anns) if isinstance(a.val, np.ndarray)]
    dups = [(k, a) for k, a in enumerate(anns) if isinstance(a, Duplicated)]
    for k, a in dups:
        for what, x in (("array", a.val), ("shadow", a.dval)):
            if _overlaps_itself(x):
                raise ActivityError(f"argument {k}: the {what}'s elements overlap in memory (strides "
                                    f"{x.strides}, as from np.broadcast_to or as_strided), so its "
                                    f"derivative is not defined per element; pass the base array or "
                                    f"a copy")
        for j, x in arrays:
            if share_memory(a.dval, x):
                whose = "its own array" if j == k else f"the array of argument {j}"
                raise ActivityError(f"argument {k}: the shadow shares memory with {whose}; a "
                                    f"shadow must be separate memory (e.g. np.zeros_like(x))")
    for i, (k, a) in enumerate(dups):
        for j, b in dups[i + 1:]:
            if share_memory(a.dval, b.dval) and not mirrored(a, b):
                raise ActivityError(f"arguments {k} and {j}: their shadows share memory but not "
                                    f"as their arrays do")


def type_key(v):
    """A cheap key that tells apart what Numba would type differently (an array's dtype,
    dimensions, layout, writeability and alignment; a tuple's type and its items' keys;
    else the Python type)."""
    if isinstance(v, np.ndarray):
        flags = v.flags
        layout = "C" if flags.c_contiguous else ("F" if flags.f_contiguous else "A")
        return (v.dtype.char, v.ndim, layout, flags.writeable, flags.aligned)
    if isinstance(v, tuple):
        return (type(v), *map(type_key, v))
    if type(v) is int and not -2 ** 63 <= v < 2 ** 63:
        return (int, v < 2 ** 64 and v > 0)          # Numba types it uint64, or refuses it
    return type(v)


_verdicts = {}        # a key and the ids of the arrays -> (weak references to them, verdict)
_VERDICTS = 256


def remembered(key, values, verdict):
    """``verdict(values)``, remembered for the same array objects among ``values`` with the
    same shapes and strides (each held by a weak reference, so they are the very objects,
    alive): an array keeps its memory while it lives, so what overlaps what does not
    change.  Raised errors are not remembered."""
    ids = key + tuple((id(v), v.shape, v.strides) if isinstance(v, np.ndarray) else None for v in values)
    hit = _verdicts.get(ids)
    if hit is not None and all(r() is v for r, v in zip(hit[0], values) if r is not None):
        return hit[1]
    result = verdict(values)
    if len(_verdicts) >= _VERDICTS:
        _verdicts.clear()
    _verdicts[ids] = (tuple(weakref.ref(v) if isinstance(v, np.ndarray) else None for v in values), result)
    return result


def distinct(arrays):
    """True when no two of ``arrays`` may share memory."""
    return remembered(("distinct",), arrays, _distinct)


def _distinct(arrays):
    for i in range(len(arrays)):
        for j in range(i + 1, len(arrays)):
            if np.may_share_memory(arrays[i], arrays[j]):
                return False
    return True


# -- compilation -----------------------------------------------------------------------
