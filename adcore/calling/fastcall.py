"""Python builtins compiled from LLVM IR: the cheapest call from Python into native code.

A ctypes call costs about a microsecond, Numba's dispatch of an njit function about as
much plus a little per argument.  A builtin function (``PyCFunction`` with CPython's
``METH_FASTCALL`` convention, ``PyObject *f(PyObject *self, PyObject *const *args,
Py_ssize_t nargs)``) costs what calling ``len`` costs.  :func:`numba_caller` generates one
that checks each argument against what a native function following Numba's calling
convention was compiled for and calls it:

- an array must be a ``numpy.ndarray`` (exactly) with the expected shape, the very dtype
  object of the sample (dtype and byte order) and the flags of a C-contiguous, aligned
  array, writeable if it is written; it is passed with those fields (constants, since
  they were checked), flattened to one dimension when the function takes it so; before
  the call it may be zeroed, always or when the leading ``zero`` argument is ``True``;
- a scalar must be of the expected Python type (``float``, numpy's float32/float64/int64/
  int32 scalars, ``bool``);
- a constant, or a fixed array (its data address), is compiled in and not passed.

It returns the function's result (the first item of a tuple) as a ``float`` or ``int``,
or ``None`` when an argument is not as compiled (then nothing was touched) or the
function failed: :meth:`NumbaCaller.error` tells which.  The builtin holds the GIL and
runs no Python; the addresses it compares with (numpy's array type, ``True``, the
samples' dtypes) and the fixed arrays' are this process's, so it is compiled anew in each
process and never cached on disk.  Its straight-line checks are compiled without LLVM's
code-generation optimisations (fast instruction selection: 3-6 ms instead of 11-16 ms for
a program of two layers, a third of a ``Duplicated`` gradient's first call from the disk
cache; a call costs the same).
"""
import ctypes
import threading

import llvmlite.binding as llvm
import numpy as np
from numba.core.types import unliteral

from ..ir.writer import Emitter, fill, float_const
from .. import numba_abi as abi
from ..numba_abi import flat_types, target_context, target_machine_at
from .ctypes_entry import kernel_exception

REFUSED = abi.STATUS_WRONG_ARGUMENT      # status REFUSED - k: argument k is not as compiled
_CARRAY = abi.NPY_ARRAY_C_CONTIGUOUS | abi.NPY_ARRAY_ALIGNED | abi.NPY_ARRAY_WRITEABLE
_SCALARS = {float: "double", np.float64: "double", np.float32: "float", np.int64: "i64",
            np.int32: "i32"}

_lock = threading.Lock()
_engine = None
_names = iter(range(1 << 62))


class ArrayArg:
    """An array argument like ``sample`` (shape and dtype); ``flatten``: the function takes
    it as one dimension; ``zero``: None, ``"always"`` or ``"on_request"``; ``written``: it
    must be writeable (the function or the zeroing writes it)."""

    def __init__(self, sample, flatten, zero=None, written=False):
        self.sample, self.flatten, self.zero = sample, flatten, zero
        self.written = written or zero is not None


class ScalarArg:
    """A scalar argument of exactly the type of ``sample``."""

    def __init__(self, sample):
        self.type = type(sample)


class ConstArg:
    """An argument that is always ``value`` (compiled in; the caller still passes it)."""

    def __init__(self, value):
        self.value = value


class FixedArray:
    """An array argument that is always ``array`` (its address compiled in; not passed:
    whoever holds the caller keeps the array alive)."""

    def __init__(self, array):
        self.array = array


class _PyMethodDef(ctypes.Structure):
    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p),
                ("ml_flags", ctypes.c_int), ("ml_doc", ctypes.c_char_p)]


_new_builtin = ctypes.pythonapi.PyCFunction_NewEx
_new_builtin.restype = ctypes.py_object
_new_builtin.argtypes = [ctypes.POINTER(_PyMethodDef), ctypes.c_void_p, ctypes.c_void_p]


def _c_address(function):
    return ctypes.cast(function, ctypes.c_void_p).value


def supported(slots):
    """Whether :func:`numba_caller` can pass every argument of ``slots``."""
    for s in slots:
        if isinstance(s, ArrayArg):
            if type(s.sample) is not np.ndarray or s.sample.dtype.hasobject:
                return False
        elif isinstance(s, ScalarArg):
            if s.type not in _SCALARS and s.type is not bool:
                return False
        elif isinstance(s, FixedArray):
            if not (type(s.array) is np.ndarray and s.array.flags.c_contiguous):
                return False
        elif not (isinstance(s, ConstArg) and _constant(s.value) is not None):
            return False
    return True


def _constant(value):
    """``(LLVM type, literal)`` of a scalar constant, or None."""
    if isinstance(value, (bool, np.bool_)):
        return "i8", str(int(value))
    if isinstance(value, (int, np.integer)):
        return "i64", str(int(value))
    if isinstance(value, (float, np.floating)):
        ty = "float" if isinstance(value, np.float32) else "double"
        return ty, float_const(ty, float(value))
    return None


class _Unpassable(Exception):
    """An argument that the function takes as another type."""


def _refuse_unless(e, cond, k):
    """Go on when ``cond`` holds, else refuse as argument ``k`` (block ``%refuse<k>``)."""
    ok = e.fresh("ok")
    e.branch(cond, ok, f"%refuse{k}")
    e.label(ok)


def _checked(e, obj, k, a, written):
    """Refuse (as argument ``k``) unless ``obj`` is an array of the shape and dtype of
    ``a``, C-contiguous, aligned and (when ``written``) writeable; its data pointer."""
    _refuse_unless(e, _is(e, e.load_at(obj, abi.PYOBJECT_TYPE, "ptr"), id(np.ndarray)), k)
    conds = [_eq(e, e.load_at(obj, abi.NDARRAY_NDIM, "i32"), a.ndim, "i32"),
             _is(e, e.load_at(obj, abi.NDARRAY_DESCR, "ptr"), id(a.dtype))]
    want = _CARRAY if written else _CARRAY & ~abi.NPY_ARRAY_WRITEABLE
    conds.append(_eq(e, e(f"and i32 {e.load_at(obj, abi.NDARRAY_FLAGS, 'i32')}, {want}"), want, "i32"))
    dims = e.load_at(obj, abi.NDARRAY_DIMS, "ptr")
    for axis, n in enumerate(a.shape):
        conds.append(_eq(e, e.load_at(dims, abi.NDARRAY_DIM_BYTES * axis, "i64"), n, "i64"))
    _refuse_unless(e, e.all_of(conds), k)
    return e.load_at(obj, abi.NDARRAY_DATA, "ptr")


def array_fields(shape, itemsize, data):
    """The flattened fields (typed LLVM operands) of a C-contiguous array of ``shape`` and
    ``itemsize`` whose data pointer is ``data`` (no meminfo: memory someone else owns)."""
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.insert(0, step)
        step *= max(n, 1)
    size = 1
    for n in shape:
        size *= n
    return (["ptr null", "ptr null", f"i64 {size}", f"i64 {itemsize}", f"ptr {data}"] +
            [f"i64 {n}" for n in shape] + [f"i64 {s}" for s in strides])


def _array(e, obj, k, slot, ptype_count):
    """Check array ``obj`` (argument ``k``); its data pointer and the flattened fields to
    pass."""
    a = slot.sample
    data = _checked(e, obj, k, a, slot.written)
    fields = array_fields((a.size,) if slot.flatten else a.shape, a.itemsize, data)
    assert len(fields) == ptype_count, "Numba's array layout changed"
    return data, fields


def _watch(e, k, a):
    """Refuse (as ``k``) unless array object ``a`` still has its shape, dtype, flags and
    data (it is not passed: its memory is reached through addresses)."""
    data = _checked(e, f"inttoptr (i64 {id(a)} to ptr)", k, a, a.flags.writeable)
    _refuse_unless(e, _is(e, data, a.ctypes.data), k)


def _is(e, ptr, address):
    return e(f"icmp eq ptr {ptr}, inttoptr (i64 {address} to ptr)", "c")


def _eq(e, value, constant, ty):
    return e(f"icmp eq {ty} {value}, {constant}", "c")


def _scalar(e, obj, k, slot, ptype):
    """Check scalar ``obj`` (argument ``k``); the field to pass, of LLVM type ``ptype``."""
    if slot.type is bool:
        c = _is(e, obj, id(True))
        _refuse_unless(e, e.any_of([c, _is(e, obj, id(False))]), k)
        return f"{ptype} {e(f'zext i1 {c} to {ptype}')}"
    _refuse_unless(e, _is(e, e.load_at(obj, abi.PYOBJECT_TYPE, "ptr"), id(slot.type)), k)
    stored = _SCALARS[slot.type]
    if stored != ptype:
        raise _Unpassable
    return f"{ptype} {e.load_at(obj, abi.PYOBJECT_VALUE, stored)}"


def _fixed(slot):
    """The flattened fields of fixed array ``slot``: its data address compiled in."""
    a = slot.array
    return array_fields(a.shape, a.itemsize, f"inttoptr (i64 {a.ctypes.data} to ptr)")


def _result(restype):
    """``(Numba type of the result returned to Python, whether ``restype`` is a tuple)``."""
    items = getattr(restype, "types", None)
    return (unliteral(items[0]), True) if items else (unliteral(restype), False)


_BOXES = {"float32": ("float", "PyFloat_FromDouble", "double"),
          "float64": ("double", "PyFloat_FromDouble", "double"),
          "int64": ("i64", "PyLong_FromLongLong", "i64")}


def numba_caller(target, argtypes, restype, slots, zero=False, watched=(), busy=None):
    """A :class:`NumbaCaller` of native ``target`` (a symbol or an address; Numba's
    calling convention, arguments of Numba types ``argtypes``, result ``restype``: a float
    or int64, or a tuple whose first item is one) for Python arguments ``(zero,)*args``
    described by ``slots`` (one per argument of the function; ``zero`` leads when
    ``zero``), or None when an argument or the result cannot be passed this way.  The
    arrays ``watched`` (kept alive by the caller's holder) are refused unless they still
    have the shape, dtype, flags and data they have now.  ``busy``, an int64 array the
    caller keeps alive: every call is refused while its first item is not 0 (a lock's
    holder raises it, see ``layers.staging.program.Exclusive``)."""
    address = target if isinstance(target, int) else llvm.address_of_symbol(target)
    result, _ = _result(restype)
    if not address or str(result) not in _BOXES or not supported(slots) or not all(
            type(a) is np.ndarray and a.flags.c_contiguous and a.flags.aligned for a in watched):
        return None
    if busy is not None and not (type(busy) is np.ndarray and busy.dtype == np.int64):
        raise TypeError("busy must be an int64 array")
    try:
        return _numba_caller(address, argtypes, restype, slots, zero, watched,
                             None if busy is None else busy.ctypes.data)
    except _Unpassable:
        return None


def _numba_caller(address, argtypes, restype, slots, zero, watched, busy):
    result, _ = _result(restype)
    context = target_context()
    ret_type = str(context.get_value_type(restype))
    e = Emitter()
    params, passed, zeroed = _passed(e, context, slots, argtypes, zero)
    for w, a in enumerate(watched):
        _watch(e, len(slots) + w, a)
    _zeroing(e, zeroed, zero)
    loaded, box, boxed = _BOXES[str(result)]
    widen = {"float": "fpext float %ret.v to double"}.get(loaded)
    e.lines += [f"  %status = call i32 %target(ptr %ret, ptr %exc, {', '.join(params)})",
                f"  %failed = icmp ne i32 %status, {abi.STATUS_OK}",
                "  br i1 %failed, label %error, label %done",
                "done:",
                f"  %ret.v = load {loaded}, ptr %ret"]
    if widen:
        e.lines.append(f"  %ret.w = {widen}")
    e.lines += [f"  %result = call ptr @{box}({boxed} {'%ret.w' if widen else '%ret.v'})",
                "  ret ptr %result",
                "error:",
                "  %info = load ptr, ptr %exc",
                "  store ptr %info, ptr @excinfo",
                "  store i32 %status, ptr @status",
                "  br label %none"]
    for k in range(len(slots) + len(watched)):
        e.lines += [f"refuse{k}:", f"  store i32 {REFUSED - k}, ptr @status", "  br label %none"]
    e.lines += ["none:"] + _returned(None)
    name = f"adcore_fastcall_{next(_names)}"
    ir = _builtin_module(name, [f"declare ptr @{box}({boxed})",
                                "declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)"], [
        f"  %target = inttoptr i64 {address} to ptr",
        f"  %ret = alloca {ret_type}",
        "  %exc = alloca ptr",
        "  store ptr null, ptr %exc",
        f"  %count = icmp eq i64 %nargs, {passed}"] + _free(busy) + [
        "  br i1 %free, label %args.ok, label %refuse.count",
        "refuse.count:",
        f"  store i32 {REFUSED}, ptr @status",
        "  br label %none",
        "args.ok:"] + e.lines)
    return NumbaCaller(*_compile(ir, name, [box]), len(slots) + len(watched))


def _passed(e, context, slots, argtypes, zero):
    """Check and convert each argument of ``slots`` (Numba types ``argtypes``; after the
    leading ``zero`` when ``zero``): the parameters to pass, the number of Python
    arguments, and ``{"always" or "on_request": [(data pointer, bytes)]}`` to zero."""
    params, passed = [], int(zero)
    zeroed = {"always": [], "on_request": []}
    for k, (slot, nbtype) in enumerate(zip(slots, argtypes)):
        ptypes = flat_types(context, nbtype)
        if isinstance(slot, FixedArray):
            params += _fixed(slot)
            continue
        if isinstance(slot, ConstArg):
            ty, literal = _constant(slot.value)
            if [ty] != ptypes:
                raise _Unpassable
            params.append(f"{ty} {literal}")
            passed += 1
            continue
        obj = e(f"load ptr, ptr {e(f'getelementptr ptr, ptr %args, i64 {passed}')}", "arg")
        passed += 1
        if isinstance(slot, ArrayArg):
            data, fields = _array(e, obj, k, slot, len(ptypes))
            params += fields
            if slot.zero:
                zeroed[slot.zero].append((data, slot.sample.nbytes))
        else:
            params.append(_scalar(e, obj, k, slot, ptypes[0]))
    return params, passed, zeroed


def _zeroing(e, zeroed, zero):
    """Zero the arrays of ``zeroed`` (see :func:`_passed`): always, or when the leading
    argument is ``True`` (``zero``)."""
    for data, nbytes in zeroed["always"]:
        e.lines.append(f"  call void @llvm.memset.p0.i64(ptr {data}, i8 0, i64 {nbytes}, i1 false)")
    if zeroed["on_request"] and zero:
        e.lines += ["  %zero.p = load ptr, ptr %args",
                    f"  %zero = icmp eq ptr %zero.p, inttoptr (i64 {id(True)} to ptr)",
                    "  br i1 %zero, label %zeroing, label %call", "zeroing:"]
        for data, nbytes in zeroed["on_request"]:
            e.lines.append(f"  call void @llvm.memset.p0.i64(ptr {data}, i8 0, i64 {nbytes}, i1 false)")
        e.lines += ["  br label %call", "call:"]


def _returned(obj):
    """The lines returning a new reference to ``obj`` (a builtin's result)."""
    return [f"  call void @Py_IncRef(ptr inttoptr (i64 {id(obj)} to ptr))",
            f"  ret ptr inttoptr (i64 {id(obj)} to ptr)"]


def _builtin_module(name, declarations, body):
    """The IR of builtin ``name`` (``ptr name(ptr %self, ptr %args, i64 %nargs)``, its
    lines ``body`` after the entry label) with its status and exception globals and their
    accessors ``name.state`` and ``name.excinfo`` (:func:`_compile`)."""
    return fill("builtin", name=name, declarations="\n".join(declarations), refused=REFUSED,
                body="\n".join(body))


def row_copier(columns):
    """A builtin ``copy(*tuples)`` for ``columns``, ``[(sample, buffer)]``: its argument
    ``k`` must be a tuple of ``len(buffer)`` arrays, each of the shape and dtype of
    column ``k``'s ``sample``, C-contiguous and aligned; it copies them into the rows of
    ``buffer`` (C-contiguous, whoever holds the builtin keeps it alive) and returns True,
    or copies nothing and returns None when one is not so."""
    e = Emitter()
    e.lines += [f"  %count = icmp eq i64 %nargs, {len(columns)}",
                "  br i1 %count, label %check0, label %refuse0"]
    for k, (sample, buffer) in enumerate(columns):
        e.lines += [f"check{k}:", f"  %col{k}.p = getelementptr ptr, ptr %args, i64 {k}",
                    f"  %col{k} = load ptr, ptr %col{k}.p"]
        _refuse_unless(e, _is(e, e.load_at(f"%col{k}", abi.PYOBJECT_TYPE, "ptr"), id(tuple)), k)
        _refuse_unless(e, _eq(e, e.load_at(f"%col{k}", abi.PYTUPLE_SIZE, "i64"), len(buffer), "i64"), k)
        _over_items(e, k, "checked", len(buffer),
                    lambda item, i, k=k, sample=sample: _checked(e, item, k, sample, False))
        e.lines.append(f"  br label %{'check' if k + 1 < len(columns) else 'copy'}{k + 1}")
    e.lines.append(f"copy{len(columns)}:")
    for k, (sample, buffer) in enumerate(columns):
        def copy(item, i, buffer=buffer, nbytes=sample.nbytes):
            data = e.load_at(item, abi.NDARRAY_DATA, "ptr")
            row = e(f"getelementptr [{nbytes} x i8], ptr inttoptr (i64 {buffer.ctypes.data} to ptr), i64 {i}", "row")
            e.line(f"call void @llvm.memcpy.p0.p0.i64(ptr {row}, ptr {data}, i64 {nbytes}, i1 false)")
        _over_items(e, k, "copied", len(buffer), copy)
    e.lines += _returned(True)
    for k in range(len(columns)):
        e.lines += [f"refuse{k}:", "  br label %none"]
    e.lines += ["none:"] + _returned(None)
    name = f"adcore_rows_{next(_names)}"
    ir = _builtin_module(name, ["declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)"], e.lines)
    builtin, method, _, _ = _compile(ir, name)
    return builtin, method


def _over_items(e, k, tag, n, body):
    """A loop over the ``n`` items of tuple ``%col{k}``: ``body(item, index)`` for each."""
    head = f"{tag}{k}"
    e.lines += [f"  br label %{head}.before", f"{head}.before:", f"  br label %{head}", f"{head}:",
                f"  %{head}.i = phi i64 [ 0, %{head}.before ], [ %{head}.next, %{head}.latch ]"]
    items = e(f"getelementptr i8, ptr %col{k}, i64 {abi.PYTUPLE_ITEMS}", "items")
    item = e(f"load ptr, ptr {e(f'getelementptr ptr, ptr {items}, i64 %{head}.i')}", "item")
    body(item, f"%{head}.i")
    e.lines += [f"  br label %{head}.latch", f"{head}.latch:",
                f"  %{head}.next = add nuw nsw i64 %{head}.i, 1",
                f"  %{head}.done = icmp eq i64 %{head}.next, {n}",
                f"  br i1 %{head}.done, label %{head}.end, label %{head}", f"{head}.end:"]


def _free(busy):
    """The lines setting ``%free``: the argument count is right and (with a ``busy``
    address) the int64 there is 0."""
    if busy is None:
        return ["  %free = and i1 %count, true"]
    return [f"  %busy = load volatile i64, ptr inttoptr (i64 {busy} to ptr)",
            "  %idle = icmp eq i64 %busy, 0",
            "  %free = and i1 %count, %idle"]


def _compile(ir, name, symbols=()):
    """``(builtin, its method struct, address of its status, of its excinfo)`` of function
    ``name`` in ``ir``, which calls CPython's ``Py_IncRef`` and functions ``symbols``."""
    global _engine
    for symbol in ("Py_IncRef", *symbols):
        if not llvm.address_of_symbol(symbol):
            llvm.add_symbol(symbol, _c_address(getattr(ctypes.pythonapi, symbol)))
    module = llvm.parse_assembly(ir)
    module.name = name
    module.verify()
    with _lock:
        if _engine is None:
            _engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target_machine_at(0))
        _engine.add_module(module)
        _engine.finalize_object()
        address = _engine.get_function_address(name)
        status, excinfo = (ctypes.CFUNCTYPE(ctypes.c_void_p)(
            _engine.get_function_address(f"{name}.{part}"))() for part in ("state", "excinfo"))
    method = _PyMethodDef(name.encode(), address, abi.METH_FASTCALL, None)
    return _new_builtin(ctypes.byref(method), None, None), method, status, excinfo


class NumbaCaller:
    """``call(*args)``: a builtin (see the module doc) returning the result, or None;
    ``error()`` is then the exception of the function's failure, or None when the
    arguments were refused (nothing ran)."""

    def __init__(self, call, method, status, excinfo, nargs):
        self.call, self.nargs = call, nargs
        self._method = method            # the builtin's PyMethodDef must outlive it
        self._status = status
        self._excinfo = excinfo

    def error(self):
        status = ctypes.c_int32.from_address(self._status).value
        if REFUSED - self.nargs < status <= REFUSED:
            return None
        return kernel_exception(ctypes.c_void_p.from_address(self._excinfo).value)

    def miss(self):
        """After ``call`` returned None: None when the arguments were refused (nothing
        ran), else raises the function's exception."""
        error = self.error()
        if error is not None:
            raise error
