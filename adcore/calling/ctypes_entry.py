"""Calling native code from Python through ctypes, with numpy arrays passed as objects.

A function following Numba's calling convention takes each array as its flattened
fields (meminfo, parent, nitems, itemsize, data, shape, strides).  Flattening them in
Python costs about 3 us per array (``a.ctypes.data``) and ctypes' conversion of every
field as much again; instead, an *entry* compiled with the function takes each array as
a ``PyObject *``, reads its fields from numpy's array struct, checks its number of
dimensions, dtype and contiguity, and calls the function: a call costs about what
Numba's own dispatch of an njit function costs, and needs no Numba compile.
"""
import ctypes
import pickle

import numpy as np
from numba.core import types as nbtypes
from numba.np.numpy_support import as_dtype

from .. import numba_abi as abi
from ..ir.writer import Emitter
from ..errors import ActivityError
from .guard_builder import unless
from .njit_stub import WRONG_LAYOUT

_CONTIGUOUS = {"C": abi.NPY_ARRAY_C_CONTIGUOUS, "F": abi.NPY_ARRAY_F_CONTIGUOUS, "A": 0}
_REQUIRED = ((abi.NPY_ARRAY_WRITEABLE, "writeable "), (abi.NPY_ARRAY_C_CONTIGUOUS, "C-contiguous "),
             (abi.NPY_ARRAY_F_CONTIGUOUS, "Fortran-contiguous "))

# ctypes converts a Python int modulo 2**bits: the entry's call checks the range first
OUT_OF_RANGE = "the range of the type compiled"


def integer_ranges(numba_types):
    """``{k: (least, greatest)}`` of the integer arguments among ``numba_types``."""
    return {k: (int(t.minval), int(t.maxval)) for k, t in enumerate(numba_types)
            if isinstance(t, nbtypes.Integer)}


def _signed_ranges(flat, kinds):
    """The ranges of integer parameters taken to be signed (known only by LLVM type)."""
    bits = {f"i{b}": b for b in (8, 16, 32, 64)}
    return {k: (-2 ** (bits[g[0]] - 1), 2 ** (bits[g[0]] - 1) - 1)
            for k, (g, kind) in enumerate(zip(flat, kinds)) if kind is None and g[0] in bits}


_CTYPES = {"ptr": ctypes.c_void_p, "i64": ctypes.c_int64, "i32": ctypes.c_int32,
           "i16": ctypes.c_int16, "i8": ctypes.c_int8, "i1": ctypes.c_bool,
           "double": ctypes.c_double, "float": ctypes.c_float}


def entry_name(symbol):
    """The entry's symbol for native function ``symbol``."""
    return f"{symbol}.py"


def array_kinds(numba_types):
    """Per argument, ``[ndim, numpy type numbers, required flags, itemsize, dtype name]``
    of an array (the type numbers of every dtype that is its dtype: int64 is both
    ``long`` and ``long long``; the flags of its contiguity, and writeable where it was
    compiled so: Numba types an unaligned array as an aligned one, and so does the entry),
    else None; None when an argument is neither an array nor a number or bool."""
    kinds = []
    for t in numba_types:
        if isinstance(t, nbtypes.Array):
            d = as_dtype(t.dtype)
            nums = sorted({np.dtype(c).num for c in np.typecodes["All"] if np.dtype(c) == d})
            flags = _CONTIGUOUS[t.layout] | (abi.NPY_ARRAY_WRITEABLE if t.mutable else 0)
            kinds.append([t.ndim, nums, flags, d.itemsize, d.name])
        elif isinstance(t, (nbtypes.Number, nbtypes.Boolean)):
            kinds.append(None)
        else:
            return None
    return kinds


def callable_from_python(flat, fields):
    """Whether an entry can pass parameters of LLVM types ``flat`` (per argument) and
    ctypes read a result struct of LLVM ``fields``."""
    return all(t in _CTYPES for group in flat for t in group) and all(t in _CTYPES for t in fields)


def entry_ir(symbol, flat, kinds, same_layout=()):
    """LLVM IR of the entry of ``symbol`` (which it declares): ``i32 (ptr retptr, ptr
    excinfo, ...)`` taking a ``PyObject *`` for each array argument (``kinds[k]`` not
    None) and each scalar as ``flat[k]``; returns ``symbol``'s status, or
    ``STATUS_WRONG_ARGUMENT - k`` when array ``k`` has not the dimensions, dtype, byte order,
    contiguity or writeability of ``kinds[k]``, or ``STATUS_WRONG_LAYOUT - q`` when the arrays ``i`` and ``j``
    of ``same_layout[q] = (i, j, what)`` differ in shape or strides."""
    e = Emitter()
    params, passed, layouts = ["ptr %ret", "ptr %exc"], ["ptr %ret", "ptr %exc"], {}
    for k, (group, kind) in enumerate(zip(flat, kinds)):
        if kind is None:
            params.append(f"{group[0]} %s{k}")
            passed.append(f"{group[0]} %s{k}")
            continue
        params.append(f"ptr %a{k}")
        fields, layouts[k] = _checked_array(e, k, kind)
        passed += fields
    for q, (i, j, _) in enumerate(same_layout):
        differ = e.any_of([e(f"icmp ne i64 {x}, {y}") for x, y in zip(layouts[i], layouts[j])])
        other, same = e.fresh("layout"), e.fresh("same")
        e.branch(differ, other, same)
        e.label(other)
        e.line(f"ret i32 {abi.STATUS_WRONG_LAYOUT - q}")
        e.label(same)
    status = e(f'call i32 @"{symbol}"({", ".join(passed)})', "status")
    e.line(f"ret i32 {status}")
    types = ", ".join(["ptr", "ptr"] + [t for group in flat for t in group])
    e.declare(symbol, f'declare i32 @"{symbol}"({types})')
    return e.module(f'i32 @"{entry_name(symbol)}"({", ".join(params)})')


def _checked_array(e, k, kind):
    """Return ``STATUS_WRONG_ARGUMENT - k`` unless the array object ``%a<k>`` is of
    ``kind``; ``(its flattened fields, [its shape's and strides' values])``."""
    ndim, nums, required, itemsize, _ = kind
    a = f"%a{k}"
    descr = e.load_at(a, abi.NDARRAY_DESCR, "ptr", "descr")
    layout = e(f"and i32 {e.load_at(a, abi.NDARRAY_FLAGS, 'i32', 'flags')}, {required}")
    number = e.load_at(descr, abi.DESCR_TYPE_NUM, "i32", "num")
    ok = e.all_of([
        e(f"icmp eq i32 {e.load_at(a, abi.NDARRAY_NDIM, 'i32', 'nd')}, {ndim}"),
        e(f"icmp ne i8 {e.load_at(descr, abi.DESCR_BYTEORDER, 'i8', 'order')}, {ord('>')}"),  # little-endian hosts
        e(f"icmp eq i32 {layout}, {required}"),
        e.any_of([e(f"icmp eq i32 {number}, {n}") for n in nums])])   # int64 is two type numbers
    good, wrong = e.fresh("good"), e.fresh("wrong")
    e.branch(ok, good, wrong)
    e.label(wrong)
    e.line(f"ret i32 {abi.STATUS_WRONG_ARGUMENT - k}")
    e.label(good)
    data = e.load_at(a, abi.NDARRAY_DATA, "ptr", "data")
    dims = e.load_at(a, abi.NDARRAY_DIMS, "ptr", "dims")
    strides = e.load_at(a, abi.NDARRAY_STRIDES, "ptr", "strides")
    shape = [e.load_at(dims, abi.NDARRAY_DIM_BYTES * i, "i64", "sh") for i in range(ndim)]
    steps = [e.load_at(strides, abi.NDARRAY_DIM_BYTES * i, "i64", "st") for i in range(ndim)]
    count = "1"
    for n in shape:
        count = e(f"mul i64 {count}, {n}", "n")
    fields = ["ptr null", "ptr null", f"i64 {count}", f"i64 {itemsize}", f"ptr {data}"]
    return fields + [f"i64 {v}" for v in shape + steps], shape + steps


class EntryCall:
    """``call(*arguments)`` of a native function through its entry at ``address`` (see
    :func:`entry_ir`): arrays as objects, scalars as ``flat`` says.  ``fields`` are the
    LLVM types of the result struct; for each ``(i, j, what)`` in ``same_layout``, arrays
    ``i`` and ``j`` must have the same shape and strides (else :class:`ActivityError`; the
    entry checks it, made with the same ``same_layout``); an integer argument ``k`` must
    lie in ``ranges[k]`` (:func:`integer_ranges`; by default, the range of its LLVM type
    taken as signed), else a TypeError.
    Returns the result tuple; re-raises an exception the function raised; a TypeError for
    an argument of another type than the function was compiled for.  The call is one
    generated Python function (no loops over the arguments) and a ctypes call that keeps
    the GIL (the entry runs no Python)."""

    def __init__(self, address, flat, fields, kinds, same_layout=(), ranges=None):
        params = [ctypes.py_object if kind is not None else _CTYPES[group[0]]
                  for group, kind in zip(flat, kinds)]
        function = ctypes.PYFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, *params)(address)
        result = type("Result", (ctypes.Structure,),
                      {"_fields_": [(f"f{k}", _CTYPES[t]) for k, t in enumerate(fields)]})
        self.kinds, self.same_layout = kinds, same_layout
        self.address, self.flat, self.fields = address, flat, fields
        names = [f"a{k}" for k in range(len(flat))]
        arrays = [names[k] for k, kind in enumerate(kinds) if kind is not None]
        lines = [f"def call({', '.join(names)}):"]
        if arrays:
            lines.append("    " + unless([f"isinstance({a}, ndarray)" for a in arrays],
                                       f"raise not_arrays(({', '.join(names)},))"))
        ranged = sorted((_signed_ranges(flat, kinds) if ranges is None else ranges).items())
        if ranged:                    # ctypes would wrap an integer out of range silently
            lines.append("    " + unless([f"{lo} <= a{k} <= {hi}" for k, (lo, hi) in ranged],
                                       f"raise out_of_range(({', '.join(names)},))"))
        lines += ["    out, exc = Result(), c_void_p()",
                  f"    status = function(byref(out), byref(exc){''.join(', ' + x for x in names)})",
                  "    if status:",
                  f"        raise error(status, exc.value, ({', '.join(names)},))",
                  f"    return ({''.join(f'out.f{k}, ' for k in range(len(fields)))})"]
        self.ranged = ranged
        scope = dict(ndarray=np.ndarray, Result=result, out_of_range=self._out_of_range,
                     c_void_p=ctypes.c_void_p, byref=ctypes.byref, function=function,
                     error=self._error, not_arrays=self._not_arrays)
        exec("\n".join(lines) + "\n", scope)
        self.call, self.function = scope["call"], function

    def __call__(self, *args):
        return self.call(*args)

    def _not_arrays(self, args):
        k = next(k for k, kind in enumerate(self.kinds) if kind is not None and not isinstance(args[k], np.ndarray))
        return TypeError(f"argument {k} must be a numpy array, got {type(args[k]).__name__}")

    def _out_of_range(self, args):
        k, (lo, hi) = next((k, r) for k, r in self.ranged if not r[0] <= args[k] <= r[1])
        return TypeError(f"argument {k} must be an integer from {lo} to {hi}, {OUT_OF_RANGE}; got {args[k]}")

    def _error(self, status, excinfo, args):
        if 0 <= abi.STATUS_WRONG_LAYOUT - status < len(self.same_layout):
            return ActivityError(f"{self.same_layout[abi.STATUS_WRONG_LAYOUT - status][2]} {WRONG_LAYOUT}")
        k = abi.STATUS_WRONG_ARGUMENT - status
        if 0 <= k < len(self.kinds) and self.kinds[k] is not None:
            ndim, _, required, _, dtype = self.kinds[k]
            layout = "".join(word for flag, word in _REQUIRED if required & flag)
            return TypeError(f"argument {k} must be a {layout}{ndim}-d {dtype} array in native "
                             f"byte order, as compiled; got a {args[k].ndim}-d {args[k].dtype} array"
                             f"{'' if args[k].flags.writeable else ' (read-only)'}")
        return kernel_exception(excinfo)


def kernel_exception(excinfo):
    """The Python exception a kernel raised: Numba's ``excinfo`` points at the pickled
    ``(class, arguments, location...)`` of a static exception and its length."""
    if excinfo:
        pointer, size = ctypes.cast(excinfo + abi.EXCINFO_PICKLED, ctypes.POINTER(ctypes.c_void_p))[0], \
            ctypes.cast(excinfo + abi.EXCINFO_PICKLED_SIZE, ctypes.POINTER(ctypes.c_int32))[0]
        try:
            info = pickle.loads(ctypes.string_at(pointer, size))
            return info[0](*info[1])
        except Exception:        # noqa: BLE001  (a dynamic exception: its class is all we know)
            pass
    return RuntimeError("the kernel raised an exception inside its gradient")
