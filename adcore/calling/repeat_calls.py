"""Repeat calls of reverse mode: ``autodiff`` and ``gradient`` called again with arguments
of the kinds a checked call had.

The first call of a kind runs the full checks in Python (:mod:`adcore.calling.arguments`, the
compile key, :class:`adcore.calling.compiled.CompiledGradient`); when it passes and its gradient can
check the rest itself, the calls after it take one generated function (:func:`caller`) that
unpacks the arguments, checks the types of their values, allocates the fresh shadows,
checks that no two arrays share memory (a verdict kept for the same array objects) and
calls the gradient's njit stub, whose dispatch checks the argument types and whose code
checks each shadow's shape and strides before anything runs (or, before the stub is made,
the gradient's ctypes entry, which checks as much natively; the caller checks the arrays'
writeability and alignment).  What one of these checks
refuses returns ``None`` having touched nothing, and the call is made again the full way,
which raises the error or handles the case.
"""
import ctypes
import weakref

import numpy as np

from ..annotations import Active, Annotation, Duplicated
from .arguments import _overlaps_itself, is_float_scalar
from .compiled import _last, _like_strides
from ..errors import ActivityError
from .python_entry import EntryCall

_DISPATCH = "No matching definition for argument type(s)"      # Numba's dispatch refusal
_LAYOUT = "must have the shape and strides of its array"         # the stub's layout check
_ENTRY = ("must be a numpy array, got", "in native byte order, as compiled")   # the entry's type checks


def call_key(entry, f, args):
    """What selects a call's caller: the entry point (``("autodiff" or "gradient", whether
    the mode returns the primal)``: the two modes compile different gradients), ``f``, a return activity given first, and the type of each argument (the caller checks
    the types of the annotated values)."""
    return (entry, f, args[0] if args and type(args[0]) is type else None, *map(type, args))


def checked_caller(compiled, entry, args, everything, defaults):
    """The caller of calls like ``entry(mode, f, *args)`` (annotated ``everything``, the
    kernel's ``defaults`` last) when ``compiled`` can check them natively: a gradient
    compiled for arrays that share no memory, with its njit stub built or its ctypes entry, and each given
    shadow laid out as its array (no copies); else None.  (Calls seeded by a returned
    array do not come here.)"""
    anns = everything[:len(everything) - len(defaults)]
    if not compiled.distinct or compiled.from_disk and not isinstance(compiled.call, EntryCall) or any(
            isinstance(a, Duplicated) and a.dval.strides != a.val.strides for a in anns):
        return None
    if entry == "gradient" and any(_fresh(a) and not (a.flags.c_contiguous or a.flags.f_contiguous)
                                   for a in args):
        return None                 # a fresh shadow laid out unlike its array: the full way copies
    return caller(compiled, entry, args[len(args) - len(anns):], len(args) - len(anns), defaults)


def _fresh(a):
    """Whether ``gradient`` gives plain argument ``a`` a fresh zero shadow."""
    return isinstance(a, np.ndarray) and a.dtype.kind == "f"


def caller(compiled, entry, args, skip, defaults):
    """The generated ``call(args) -> (derivatives, value)``, or ``None`` having touched
    nothing, for calls like ``entry(mode, f, *args)`` whose first ``skip`` arguments (a
    return activity) come before ``args``, and whose gradient ``compiled`` takes the
    kernel's ``defaults`` after them."""
    scope = {}
    lines = [f"    [{''.join(f'a{k}, ' for k in range(len(args)))}] = args[{skip}:]"]
    checks, values, shadows, results, arrays, whole = [], [], {}, [], [], []
    for k, a in enumerate(args):
        v, s = f"v{k}", f"s{k}"
        value = a.val if isinstance(a, Annotation) else a
        if isinstance(a, Annotation):
            lines.append(f"    {v} = a{k}.val")
            scope[f"T{k}"] = type(value)
            checks.append(f"type({v}) is T{k}")
        else:
            lines.append(f"    {v} = a{k}")
        if isinstance(a, Duplicated):
            lines.append(f"    {s} = a{k}.dval")
            scope[f"S{k}"] = type(a.dval)
            checks.append(f"type({s}) is S{k}")
            shadows[k] = s
            whole += [v, s]
        elif entry == "gradient" and _fresh(a):
            lines.append(f"    {s} = zeros_like({v})")
            shadows[k] = s
            whole.append(v)
        values.append(v)
        if type(value) is np.ndarray:
            arrays.append(v)
        active = isinstance(a, Active) or entry == "gradient" and is_float_scalar(a)
        results.append("ACTIVE" if active else s if entry == "gradient" and k in shadows else "None")
    if checks:
        lines.append(f"    if not ({' and '.join(checks)}):\n        return None")
    values += [f"defaults[{i}]" for i in range(len(defaults))]
    arrays += [f"defaults[{i}]" for i, d in enumerate(defaults) if type(d) is np.ndarray]
    arrays += [s for k, s in shadows.items() if isinstance(args[k], Annotation)]
    lines += _memory_check(arrays)
    scratch = [shadows.get(k) or f"like_strides({values[k]}, None)" for k in compiled.shadowed]
    # before its njit stub exists (a fresh gradient), the gradient's ctypes entry: it checks
    # dimensions, dtype, byte order and contiguity; writeability and alignment, which Numba
    # types apart (arguments.type_key), are checked here against the first call's
    entry = compiled.from_disk
    if entry:
        flagged = [(x, v) for x, v in zip(values, [a.val if isinstance(a, Annotation) else a for a in args])
                   if type(v) is np.ndarray]
        flagged += [(f"defaults[{i}]", d) for i, d in enumerate(defaults) if type(d) is np.ndarray]
        if flagged:
            lines.append(f"    if not ({' and '.join(f'{x}.flags.writeable is {v.flags.writeable} and {x}.flags.aligned is {v.flags.aligned}' for x, v in flagged)}):")
            lines.append("        return None")
    refusals = "ENTRY[0] in str(err) or ENTRY[1] in str(err)" if entry else "DISPATCH in str(err)"
    lines += ["    try:",
              f"        out = native({', '.join(values + scratch)})",
              "    except (TypeError, ActivityError, ArgumentError) as err:",
              f"        if type(err) is ArgumentError or {refusals} or LAYOUT in str(err):",
              "            return None",
              "        raise",
              "    last['cached_bytes'] = out[-1]"]
    j = 1 if compiled.has_primal else 0
    for k, r in enumerate(results):
        if r == "ACTIVE":
            results[k], j = f"out[{j}]", j + 1
    lines.append(f"    return ({''.join(r + ', ' for r in results)}), "
                 f"{'out[0]' if compiled.has_primal else 'None'}")
    checked = [i for i, x in enumerate(arrays) if x in whole]
    scope.update({"native": compiled.call.call if entry else compiled.native, "defaults": defaults,
                  "ENTRY": _ENTRY, "ArgumentError": ctypes.ArgumentError, "zeros_like": np.zeros_like,
                  "like_strides": _like_strides, "last": _last, "seen": [None], "ref": weakref.ref,
                  "ActivityError": ActivityError, "DISPATCH": _DISPATCH, "LAYOUT": _LAYOUT,
                  "disjoint": lambda xs: _disjoint(xs, checked)})
    exec("def call(args):\n" + "\n".join(lines) + "\n", scope)
    return scope["call"]


def _memory_check(arrays):
    """Lines returning ``None`` unless the ``arrays`` (names) share no memory: the verdict
    of the last call that passed holds for the same array objects (alive: held by weak
    references) with the same shapes and strides, as an array keeps its memory while it
    lives; else :func:`_disjoint` looks."""
    if not arrays:
        return []
    n = len(arrays)
    layout = "".join(f"{x}.shape, {x}.strides, " for x in arrays)
    same = " and ".join(f"m[{i}]() is {x}" for i, x in enumerate(arrays))
    return [f"    layout = ({layout})",
            "    m = seen[0]",
            f"    if m is None or not ({same} and m[{n}] == layout):",
            f"        if not disjoint(({''.join(x + ', ' for x in arrays)})):",
            "            return None",
            f"        seen[0] = ({''.join(f'ref({x}), ' for x in arrays)}layout)"]


def _disjoint(arrays, whole):
    """True when no two of ``arrays`` may share memory and none of those at ``whole`` (the
    Duplicated arrays and shadows) has elements overlapping each other."""
    if any(_overlaps_itself(arrays[i]) for i in whole):
        return False
    return all(not np.may_share_memory(arrays[i], arrays[j])
               for i in range(len(arrays)) for j in range(i + 1, len(arrays)))
