"""The native repeat call of ``autodiff``: one builtin (:mod:`adcore.calling.fastcall`)
that takes the call's argument tuple, checks it and calls the gradient's entry.

After a kernel has been called often enough with arguments of one kind (the call key of
:mod:`adcore.calling.repeat_guard`), ``autodiff`` passes the tuple of its annotated
arguments straight to a builtin compiled for that kind.  The builtin, holding the GIL and
running no Python:

- checks the tuple's length and each item's type (the very annotation class, or the plain
  value's type), and reads ``val`` and ``dval`` from the annotations' slots;
- checks each array is a ``numpy.ndarray`` (exactly) with the number of dimensions it was
  compiled for, and that no two arrays reach the same bytes (their extents are disjoint)
  and no Duplicated array or shadow overlaps itself (it is C- or Fortran-contiguous and
  not empty); a scalar must be of its sample's type (``float``, ``int`` within int64,
  ``bool`` or a numpy scalar);
- calls the gradient's ctypes entry (:func:`adcore.calling.ctypes_entry.entry_ir`), which
  checks dtype, byte order, contiguity, writeability and each shadow's layout;
- returns ``(derivatives, primal value)`` as ``autodiff`` does, and stores the bytes
  cached in ``last_cached_bytes``'s cell.

Anything not as compiled returns ``None`` having touched nothing (the Python guard, then
the full checks, take the call); a failure of the kernel returns the address of Numba's
exception info as an ``int`` (0 when there is none), which :func:`after_builtin` turns into
the kernel's exception.
"""
import ctypes

import numpy as np

from .. import numba_abi as abi
from ..annotations import Active, Annotation, Duplicated
from ..ir.writer import Emitter
from .compiled import last_cached_cell
from .ctypes_entry import kernel_exception
from .fastcall import _builtin_module, _compile, _eq, _is, _names, _refuse_unless

_INTEGERS = {np.int64: "i64", np.int32: "i32"}
_FLOATS = {float: "double", np.float64: "double", np.float32: "float"}
_BOXES = {"double": "PyFloat_FromDouble", "float": "PyFloat_FromDouble", "i64": "PyLong_FromLongLong"}
_CALLED = ["PyTuple_New", "PyFloat_FromDouble", "PyLong_FromLongLong", "PyErr_Occurred",
           "PyLong_AsLongLongAndOverflow"]


def slot_offset(cls, name):
    """The byte offset of slot ``name`` in instances of ``cls`` (found by storing a
    sentinel in a fresh instance and looking for its address)."""
    probe, sentinel = cls.__new__(cls), object()
    setattr(probe, name, sentinel)
    for offset in range(abi.PYOBJECT_VALUE, cls.__basicsize__, 8):
        if ctypes.c_void_p.from_address(id(probe) + offset).value == id(sentinel):
            return offset
    raise RuntimeError(f"{cls.__name__}.{name} is not a slot")


# Calls through the Python guard before the builtin is compiled (2-6 ms, what about 1000
# calls save): a kernel called in a loop gets it soon, one called a few times never pays it.
PROMOTE_AFTER = 200


def after_builtin(kept, guard):
    """What ``autodiff`` calls when builtin ``kept`` did not return a result ``got``: the
    kernel's exception when it failed, else the Python ``guard``'s call (or its None)."""
    def after(args, got):
        if got is not None:
            raise kernel_exception(got)
        return guard(args)
    after.kept = kept          # the builtin's method struct lives as long as the caller
    return after


class _Unsupported(Exception):
    """An argument or result the builtin does not pass."""


def repeat_builtin(entry, shadowed, has_primal, args, skip):
    """The builtin ``call(args)`` for calls like ``autodiff(mode, f, *args)`` (the
    kernel's arguments after the first ``skip`` items of the tuple) of a gradient whose
    ctypes entry is ``entry`` (an :class:`adcore.calling.ctypes_entry.EntryCall`), with the
    shadows of the arguments ``shadowed`` passed after them; None when an argument or the
    result is of a kind it does not pass (the Python guard keeps the calls)."""
    if entry is None or len(entry.kinds) != len(args) + len(shadowed) or \
            any(not isinstance(args[k], Duplicated) for k in shadowed):
        return None
    try:
        ir, name = _builtin_ir(entry, shadowed, has_primal, args, skip)
    except _Unsupported:
        return None
    builtin, method, _, _ = _compile(ir, name, _CALLED)
    return _Kept(builtin, method, entry)


class _Kept:
    """A builtin and what must outlive it (its method struct, the entry's ctypes
    function)."""

    def __init__(self, builtin, method, entry):
        self.call, self._method, self._entry = builtin, method, entry


def _builtin_ir(entry, shadowed, has_primal, args, skip):
    e = Emitter()
    e.lines += ["  %one = icmp eq i64 %nargs, 1", "  br i1 %one, label %tuple, label %refuse0", "tuple:"]
    given = e("load ptr, ptr %args", "given")
    _refuse_unless(e, _is(e, e.load_at(given, abi.PYOBJECT_TYPE, "ptr"), id(tuple)), 0)
    _refuse_unless(e, _eq(e, e.load_at(given, abi.PYTUPLE_SIZE, "i64"), skip + len(args), "i64"), 0)
    passed, arrays, shadows = [], [], {}
    for k, a in enumerate(args):
        item = e.load_at(given, abi.PYTUPLE_ITEMS + 8 * (skip + k), "ptr", "item")
        value, sample = item, a
        if isinstance(a, Annotation):
            _refuse_unless(e, _is(e, e.load_at(item, abi.PYOBJECT_TYPE, "ptr"), id(type(a))), k)
            value, sample = e.load_at(item, slot_offset(type(a), "val"), "ptr", "val"), a.val
            if isinstance(a, Duplicated):
                shadows[k] = e.load_at(item, slot_offset(type(a), "dval"), "ptr", "dval")
        kind = entry.kinds[k]
        if kind is None:
            passed.append(_scalar(e, value, k, sample, entry.flat[k], dict(entry.ranged).get(k)))
            continue
        _array(e, value, k, sample, kind)
        passed.append(f"ptr {value}")
        arrays.append((value, kind, isinstance(a, Duplicated)))
    for j, k in enumerate(shadowed):
        kind = entry.kinds[len(args) + j]
        if kind is None:
            raise _Unsupported
        _array(e, shadows[k], k, args[k].dval, kind)
        passed.append(f"ptr {shadows[k]}")
        arrays.append((shadows[k], kind, True))
    _disjoint(e, arrays)
    _call(e, entry, passed)
    _results(e, entry.fields, has_primal, args)
    for k in range(len(args)):
        e.lines += [f"refuse{k}:", "  br label %none"]
    e.lines += ["none:", f"  call void @Py_IncRef(ptr inttoptr (i64 {id(None)} to ptr))",
                f"  ret ptr inttoptr (i64 {id(None)} to ptr)"]
    name = f"adcore_repeat_{next(_names)}"
    declarations = ["declare ptr @PyTuple_New(i64)", "declare ptr @PyFloat_FromDouble(double)",
                    "declare ptr @PyLong_FromLongLong(i64)", "declare ptr @PyErr_Occurred()",
                    "declare i64 @PyLong_AsLongLongAndOverflow(ptr, ptr)",
                    "declare i64 @llvm.smin.i64(i64, i64)", "declare i64 @llvm.smax.i64(i64, i64)"]
    return _builtin_module(name, declarations, e.entry + e.lines), name


def _scalar(e, obj, k, sample, flat, bounds):
    """Check scalar ``obj`` (argument ``k``) is of ``sample``'s type (an integer within
    ``bounds``, the range of the type it was compiled for); the typed operand passing it
    as LLVM type ``flat[0]``."""
    ty = flat[0]
    if type(sample) is bool and ty in ("i1", "i8"):
        true = _is(e, obj, id(True))
        _refuse_unless(e, e.any_of([true, _is(e, obj, id(False))]), k)
        return f"{ty} {e(f'zext i1 {true} to {ty}') if ty != 'i1' else true}"
    _refuse_unless(e, _is(e, e.load_at(obj, abi.PYOBJECT_TYPE, "ptr"), id(type(sample))), k)
    if type(sample) is int:
        if ty != "i64" or bounds != (-2 ** 63, 2 ** 63 - 1):
            raise _Unsupported
        overflow = e.alloca("i32", "overflow")
        got = e(f"call i64 @PyLong_AsLongLongAndOverflow(ptr {obj}, ptr {overflow})", "int")
        _refuse_unless(e, _eq(e, e(f"load i32, ptr {overflow}"), 0, "i32"), k)
        return f"i64 {got}"
    stored = _FLOATS.get(type(sample)) or _INTEGERS.get(type(sample))
    if stored != ty:
        raise _Unsupported
    return f"{ty} {e.load_at(obj, abi.PYOBJECT_VALUE, ty)}"


def _array(e, obj, k, sample, kind):
    """Check ``obj`` (of argument ``k``) is a numpy array of ``kind``'s dimensions."""
    if type(sample) is not np.ndarray:
        raise _Unsupported
    _refuse_unless(e, _is(e, e.load_at(obj, abi.PYOBJECT_TYPE, "ptr"), id(np.ndarray)), k)
    _refuse_unless(e, _eq(e, e.load_at(obj, abi.NDARRAY_NDIM, "i32"), kind[0], "i32"), k)


def _disjoint(e, arrays):
    """Refuse (as argument 0) unless the ``arrays`` (``(object, kind, whole)``) reach no
    byte in common and each ``whole`` one is contiguous and not empty."""
    extents, conds = [], []
    for obj, (ndim, _, _, itemsize, _), whole in arrays:
        data = e(f"ptrtoint ptr {e.load_at(obj, abi.NDARRAY_DATA, 'ptr')} to i64", "data")
        dims = e.load_at(obj, abi.NDARRAY_DIMS, "ptr", "dims")
        strides = e.load_at(obj, abi.NDARRAY_STRIDES, "ptr", "strides")
        lo, hi = data, e(f"add i64 {data}, {itemsize}", "hi")
        for axis in range(ndim):
            n = e.load_at(dims, abi.NDARRAY_DIM_BYTES * axis, "i64", "n")
            step = e.load_at(strides, abi.NDARRAY_DIM_BYTES * axis, "i64", "step")
            conds.append(e(f"icmp sgt i64 {n}, 0", "some"))
            reach = e(f"mul i64 {step}, {e(f'sub i64 {n}, 1')}", "reach")
            lo = e(f"add i64 {lo}, {e(f'call i64 @llvm.smin.i64(i64 {reach}, i64 0)')}", "lo")
            hi = e(f"add i64 {hi}, {e(f'call i64 @llvm.smax.i64(i64 {reach}, i64 0)')}", "hi")
        if whole:
            flags = e.load_at(obj, abi.NDARRAY_FLAGS, "i32", "flags")
            contiguous = abi.NPY_ARRAY_C_CONTIGUOUS | abi.NPY_ARRAY_F_CONTIGUOUS
            conds.append(e(f"icmp ne i32 {e(f'and i32 {flags}, {contiguous}')}, 0", "contiguous"))
        extents.append((lo, hi))
    for i, (lo_i, hi_i) in enumerate(extents):
        for lo_j, hi_j in extents[i + 1:]:
            conds.append(e.any_of([e(f"icmp sle i64 {hi_i}, {lo_j}"), e(f"icmp sle i64 {hi_j}, {lo_i}")]))
    if conds:
        _refuse_unless(e, e.all_of(conds), 0)


def _call(e, entry, passed):
    """Call the entry; on a failed call return None (refused), the exception info as an
    int (the kernel failed), or NULL (a Python exception is set)."""
    struct = "{" + ", ".join(entry.fields) + "}"
    e.lines += [f"  %out = alloca {struct}", "  %exc = alloca ptr", "  store ptr null, ptr %exc",
                f"  %status = call i32 inttoptr (i64 {entry.address} to ptr)(ptr %out, ptr %exc, "
                f"{', '.join(passed)})",
                f"  %ok = icmp eq i32 %status, {abi.STATUS_OK}",
                "  br i1 %ok, label %done, label %failed",
                "failed:",
                f"  %refused = icmp sle i32 %status, {abi.STATUS_WRONG_ARGUMENT}",
                "  br i1 %refused, label %none, label %kernel",
                "kernel:",
                "  %set = call ptr @PyErr_Occurred()",
                "  %raised = icmp ne ptr %set, null",
                "  br i1 %raised, label %null, label %info",
                "null:",
                "  ret ptr null",
                "info:",
                "  %thrown = load ptr, ptr %exc",
                "  %thrown.i = ptrtoint ptr %thrown to i64",
                "  %thrown.box = call ptr @PyLong_FromLongLong(i64 %thrown.i)",
                "  ret ptr %thrown.box",
                "done:"]


def _results(e, fields, has_primal, args):
    """Return ``((derivative or None per argument), primal value or None)`` from the
    result struct ``%out`` of LLVM ``fields``, storing the bytes cached (its last field)."""
    struct = "{" + ", ".join(fields) + "}"
    if fields[-1] != "i64":
        raise _Unsupported

    def field(j):
        return e(f"load {fields[j]}, ptr {e(f'getelementptr {struct}, ptr %out, i32 0, i32 {j}')}", "field")

    def box(j):
        if fields[j] not in _BOXES:
            raise _Unsupported
        value = field(j)
        if fields[j] == "float":
            value = e(f"fpext float {value} to double", "wide")
        boxed = e(f"call ptr @{_BOXES[fields[j]]}({'i64' if fields[j] == 'i64' else 'double'} {value})", "box")
        _fail_unless(e, boxed)
        return boxed

    e.line(f"store i64 {field(len(fields) - 1)}, ptr inttoptr (i64 {ctypes.addressof(last_cached_cell)} to ptr)")
    derivatives = e(f"call ptr @PyTuple_New(i64 {len(args)})", "derivatives")
    _fail_unless(e, derivatives)
    j = 1 if has_primal else 0
    for k, a in enumerate(args):
        if isinstance(a, Active):
            item, j = box(j), j + 1
        else:
            item = _none(e)
        e.line(f"store ptr {item}, ptr {e(f'getelementptr i8, ptr {derivatives}, i64 {abi.PYTUPLE_ITEMS + 8 * k}')}")
    value = box(0) if has_primal else _none(e)
    pair = e("call ptr @PyTuple_New(i64 2)", "pair")
    _fail_unless(e, pair)
    e.line(f"store ptr {derivatives}, ptr {e(f'getelementptr i8, ptr {pair}, i64 {abi.PYTUPLE_ITEMS}')}")
    e.line(f"store ptr {value}, ptr {e(f'getelementptr i8, ptr {pair}, i64 {abi.PYTUPLE_ITEMS + 8}')}")
    e.line(f"ret ptr {pair}")


def _none(e):
    e.line(f"call void @Py_IncRef(ptr inttoptr (i64 {id(None)} to ptr))")
    return f"inttoptr (i64 {id(None)} to ptr)"


def _fail_unless(e, obj):
    """Return NULL (CPython's MemoryError is set) when allocating ``obj`` failed."""
    ok = e.fresh("allocated")
    e.branch(e(f"icmp ne ptr {obj}, null", "allocated"), ok, "%null")
    e.label(ok)
