"""Repeat calls of reverse mode: ``autodiff`` and ``gradient`` called again with arguments
of the kinds a checked call had.

The first call of a kind runs the full checks in Python (:mod:`adcore.calling.arguments`,
the compile key, :class:`adcore.calling.compiled.CompiledGradient`); when it passes and
its gradient can check the rest itself, the calls after it take one generated guard
(:func:`caller`, written with :mod:`adcore.calling.guard_builder`) that unpacks the
arguments, checks the types of their values, allocates the fresh shadows, checks that no
two arrays share memory (a verdict kept for the same array objects) and calls the
gradient's njit stub, whose dispatch checks the argument types and whose code checks each
shadow's shape and strides before anything runs (or, before the stub is made, the
gradient's ctypes entry, which checks as much natively, writeability included). What one
of these checks refuses returns ``None`` having touched nothing, and the call is made
again the full way, which raises the error or handles the case.
"""
import ctypes

import numpy as np

from ..annotations import Active, Annotation, Duplicated
from .arguments import _overlaps_itself, is_float_scalar
from .compiled import _like_strides, last_cached_cell
from ..errors import ActivityError
from .guard_builder import GuardBuilder
from .ctypes_entry import OUT_OF_RANGE, EntryCall
from .njit_stub import WRONG_LAYOUT
from . import repeat_builtin

_DISPATCH = "No matching definition for argument type(s)"      # Numba's dispatch refusal
_ENTRY = ("must be a numpy array, got", "in native byte order, as compiled", OUT_OF_RANGE)   # the entry's type checks


def call_key(entry, f, args):
    """What selects a call's caller: the entry point (``("autodiff" or "gradient", whether
    the mode returns the primal)``: the two modes compile different gradients), ``f``, a return activity given first, and the type of each argument (the caller checks
    the types of the annotated values)."""
    return (entry, f, args[0] if args and type(args[0]) is type else None, *map(type, args))


def checked_caller(compiled, entry, args, everything, defaults, promote=None):
    """The caller of calls like ``entry(mode, f, *args)`` (annotated ``everything``, the
    kernel's ``defaults`` last) when ``compiled`` can check them natively: a gradient
    compiled for arrays that share no memory, with its njit stub built or its ctypes entry, and each given
    shadow laid out as its array (no copies); else None.  (Calls seeded by a returned
    array do not come here.)  ``promote()``, when given, runs once the caller has served
    ``repeat_builtin.PROMOTE_AFTER`` calls."""
    anns = everything[:len(everything) - len(defaults)]
    if not compiled.distinct or compiled.from_disk and not isinstance(compiled.call, EntryCall) or any(
            isinstance(a, Duplicated) and a.dval.strides != a.val.strides for a in anns):
        return None
    if entry == "gradient" and any(_fresh(a) and not (a.flags.c_contiguous or a.flags.f_contiguous)
                                   for a in args):
        return None                 # a fresh shadow laid out unlike its array: the full way copies
    return caller(compiled, entry, args[len(args) - len(anns):], len(args) - len(anns), defaults, promote)


def _fresh(a):
    """Whether ``gradient`` gives plain argument ``a`` a fresh zero shadow."""
    return isinstance(a, np.ndarray) and a.dtype.kind == "f"


def caller(compiled, entry, args, skip, defaults, promote=None):
    """The generated ``call(args) -> (derivatives, value)``, or ``None`` having touched
    nothing, for calls like ``entry(mode, f, *args)`` whose first ``skip`` arguments (a
    return activity) come before ``args``, and whose gradient ``compiled`` takes the
    kernel's ``defaults`` after them; ``promote`` as for :func:`checked_caller`."""
    g = GuardBuilder({"defaults": defaults, "zeros_like": np.zeros_like, "like_strides": _like_strides,
                      "calls": [repeat_builtin.PROMOTE_AFTER], "promote": promote})
    g.statement(f"[{''.join(f'a{k}, ' for k in range(len(args)))}] = args[{skip}:]")
    values, shadows, whole = _bind_arguments(g, entry, args)
    values += [f"defaults[{i}]" for i in range(len(defaults))]
    arrays = [v for v, a in zip(values, args) if type(a.val if isinstance(a, Annotation) else a) is np.ndarray]
    arrays += [f"defaults[{i}]" for i, d in enumerate(defaults) if type(d) is np.ndarray]
    arrays += [s for k, s in shadows.items() if isinstance(args[k], Annotation)]
    checked = [i for i, x in enumerate(arrays) if x in whole]
    g.distinct_memory(arrays, lambda xs: _disjoint(xs, checked))
    scratch = [shadows.get(k) or f"like_strides({values[k]}, None)" for k in compiled.shadowed]
    counted = ["calls[0] -= 1", "if not calls[0]:", "    promote()"] if promote else []
    return g.compile("call", ("args",), counted + _tail(compiled, entry, args, values + scratch, shadows), **{
        "native": compiled.call.call if compiled.from_disk else compiled.native, "last": last_cached_cell,
        "ArgumentError": ctypes.ArgumentError, "ActivityError": ActivityError,
        "ENTRY": _ENTRY, "DISPATCH": _DISPATCH, "LAYOUT": WRONG_LAYOUT})


def _bind_arguments(g, entry, args):
    """Bind each argument's value ``v{k}`` (and shadow ``s{k}``: a Duplicated one's, or
    a fresh one ``gradient`` makes) and check the types of the annotated values; the
    values' names, ``{k: shadow's name}`` and the Duplicated arrays' and shadows' names."""
    checks, values, shadows, whole = [], [], {}, []
    for k, a in enumerate(args):
        v, s = f"v{k}", f"s{k}"
        if isinstance(a, Annotation):
            g.statement(f"{v} = a{k}.val")
            checks.append(f"type({v}) is {g.const(type(a.val), 'T')}")
        else:
            g.statement(f"{v} = a{k}")
        if isinstance(a, Duplicated):
            g.statement(f"{s} = a{k}.dval")
            checks.append(f"type({s}) is {g.const(type(a.dval), 'S')}")
            shadows[k] = s
            whole += [v, s]
        elif entry == "gradient" and _fresh(a):
            g.statement(f"{s} = zeros_like({v})")
            shadows[k] = s
            whole.append(v)
        values.append(v)
    for c in checks:
        g.check(c)
    return values, shadows, whole


def _tail(compiled, entry, args, passed, shadows):
    """The statements calling the gradient (``native``: its njit stub, or its ctypes
    entry before the stub exists) on the ``passed`` names and returning the derivatives
    and value; a call the gradient refuses returns ``None``."""
    refusals = "any(m in str(err) for m in ENTRY)" if compiled.from_disk else "DISPATCH in str(err)"
    results, j = [], 1 if compiled.has_primal else 0
    for k, a in enumerate(args):
        if isinstance(a, Active) or entry == "gradient" and is_float_scalar(a):
            results.append(f"out[{j}]")
            j += 1
        else:
            results.append(shadows[k] if entry == "gradient" and k in shadows else "None")
    return ["try:",
            f"    out = native({', '.join(passed)})",
            "except (TypeError, ActivityError, ArgumentError) as err:",
            f"    if type(err) is ArgumentError or {refusals} or LAYOUT in str(err):",
            "        return None",
            "    raise",
            "last.value = out[-1]",
            f"return ({''.join(r + ', ' for r in results)}), {'out[0]' if compiled.has_primal else 'None'}"]


def _disjoint(arrays, whole):
    """True when no two of ``arrays`` may share memory and none of those at ``whole`` (the
    Duplicated arrays and shadows) has elements overlapping each other."""
    if any(_overlaps_itself(arrays[i]) for i in whole):
        return False
    return all(not np.may_share_memory(arrays[i], arrays[j])
               for i in range(len(arrays)) for j in range(i + 1, len(arrays)))
