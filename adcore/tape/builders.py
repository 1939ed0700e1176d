"""Building arrays from tracked values: ``np.array``, ``np.asarray``, ``np.r_``, ``np.c_``.

numpy does not dispatch these to ``__array_function__``, and on a tracked value they
call ``Tracked.__array__``, which raises.  While ``record`` runs ``f`` they are
replaced by wrappers (module attributes of numpy, put back when the outermost
recording ends) that call numpy first and, only when numpy meets a tracked value,
build the result from recorded ops: a nested list or tuple is stacked level by level,
a ``dtype`` is a recorded cast, ``ndmin`` a reshape.  ``dtype=object`` with tracked
values is refused (an object array would hide them from the tape).

The reductions HIPS autograd accepts lists of tracked values in (``np.mean([x, x + 2])``,
``np.std``, ``np.var``, ``np.linalg.norm``, and ``np.sum``, ``np.prod``, ``np.max``,
``np.min``, ``np.amax``, ``np.amin``) are wrapped the same way: a list
or tuple holding tracked values is built into a tracked array first.  Other numpy
functions and ufuncs given such a list raise ``UnsupportedError`` (build the array
with ``np.array`` first).  Code holding its own reference to the original functions
(``from numpy import array``) keeps getting ``UnsupportedError``.

Assigning a tracked value into a plain numpy array (``a = np.zeros(3); a[0] = x``) cannot
be recorded (the plain array cannot hold it) and raises, as in autograd: numpy reports
``ValueError: setting an array element with a sequence`` (for a tracked scalar; its cause
is the tape's ``UnsupportedError``) or the ``UnsupportedError`` itself.  Build the array
from the values (``np.array([x, 0.0, 0.0])``, ``np.stack``, ``np.concatenate``), or update
an array that is already tracked (``a = np.zeros(3) * x; a[0] = x`` is recorded).
"""
import threading

import numpy as np

from ..errors import UnsupportedError
from .numpy_api import FUNCTIONS
from .tracked import Tracked, apply

try:  # np.r_ and np.c_ call this module's own ``array``
    from numpy.lib import _index_tricks_impl as _index_tricks
except ImportError:  # pragma: no cover - another numpy layout: r_/c_ then refuse tracked values
    _index_tricks = None


def _has_tracked(obj):
    if type(obj) is Tracked:
        return True
    return isinstance(obj, (list, tuple)) and any(_has_tracked(o) for o in obj)


def build(obj, dtype=None, ndmin=0, copy=False):
    """An array (tracked when ``obj`` holds tracked values) from nested lists/tuples of values."""
    if type(obj) is Tracked:
        x = apply("copy", (obj,)) if copy else obj
    elif isinstance(obj, (list, tuple)) and _has_tracked(obj):
        x = apply("stack", tuple(build(o) for o in obj), {"axis": 0})
    else:
        return _ORIGINAL["array"](obj, dtype=dtype, ndmin=ndmin)
    if dtype is not None and np.dtype(dtype) != x.dtype:
        x = x.astype(dtype)
    if x.ndim < ndmin:
        x = x.reshape((1,) * (ndmin - x.ndim) + x.shape)
    return x


def _wrapper(name, copies):
    original = getattr(np, name)

    def wrapper(obj, *args, **kwargs):
        dtype = args[0] if args else kwargs.get("dtype")
        if dtype is not None and np.dtype(dtype) == object and _has_tracked(obj):
            raise UnsupportedError(f"numpy.{name} with dtype=object of tracked values",
                                   detail="the tape cannot follow values inside an object array")
        try:
            return original(obj, *args, **kwargs)
        except UnsupportedError:
            if not _has_tracked(obj):
                raise
        return build(obj, dtype, kwargs.get("ndmin", 0), copy=kwargs.get("copy", copies) is True)

    wrapper.__name__ = wrapper.__qualname__ = name
    wrapper.__doc__ = original.__doc__
    wrapper.__wrapped__ = original
    return wrapper


def _list_wrapper(module, name):
    """``module.name(a, ...)`` whose first argument may be a list or tuple of tracked values;
    a tracked ``a`` goes to the tape's implementation directly (where numpy would send it
    through ``__array_function__``)."""
    original = getattr(module, name)

    def wrapper(a, *args, **kwargs):
        if type(a) is Tracked:
            handler = FUNCTIONS.get(original)
            if handler is not None:
                return handler(a, *args, **kwargs)
        elif (type(a) is list or type(a) is tuple) and _has_tracked(a):
            a = build(a)
        return original(a, *args, **kwargs)

    wrapper.__name__ = wrapper.__qualname__ = name
    wrapper.__doc__ = original.__doc__
    wrapper.__wrapped__ = original
    return wrapper


_ORIGINAL = {name: getattr(np, name) for name in ("array", "asarray", "asanyarray", "ascontiguousarray")}
_WRAPPED = {"array": _wrapper("array", True), "asarray": _wrapper("asarray", False),
            "asanyarray": _wrapper("asanyarray", False),
            "ascontiguousarray": _wrapper("ascontiguousarray", False)}
# (module, name, original, wrapper) of the functions taking lists of tracked values
_LIST_FUNCTIONS = [(m, n, getattr(m, n), _list_wrapper(m, n)) for m, n in (
    (np, "sum"), (np, "mean"), (np, "std"), (np, "var"), (np, "prod"), (np, "max"), (np, "min"),
    (np, "amax"), (np, "amin"), (np.linalg, "norm"))]
# the module dicts to update on entering and on leaving (one dict update each: this runs on
# every gradient call)
_INSTALL, _RESTORE = [], []
_by_module = {}
for _name in _WRAPPED:
    _by_module.setdefault(np, ({}, {}))
    _by_module[np][0][_name] = _WRAPPED[_name]
    _by_module[np][1][_name] = _ORIGINAL[_name]
for _module, _name, _original, _w in _LIST_FUNCTIONS:
    _by_module.setdefault(_module, ({}, {}))
    _by_module[_module][0][_name] = _w
    _by_module[_module][1][_name] = _original
if _index_tricks is not None:
    _by_module[_index_tricks] = ({"array": _WRAPPED["array"]}, {"array": _ORIGINAL["array"]})
for _module, (_wrapped, _originals) in _by_module.items():
    _INSTALL.append((vars(_module), _wrapped))
    _RESTORE.append((vars(_module), _originals))
del _by_module
_lock = threading.Lock()
_depth = 0


class _BuildingArrays:
    """Context manager installing the wrappers (nested and concurrent recordings share them)."""

    def __enter__(self):
        global _depth
        with _lock:
            if _depth == 0:
                for namespace, values in _INSTALL:
                    namespace.update(values)
            _depth += 1

    def __exit__(self, *exc):
        global _depth
        with _lock:
            _depth -= 1
            if _depth == 0:
                for namespace, values in _RESTORE:
                    namespace.update(values)
        return False


_building = _BuildingArrays()


def building_arrays():
    """The context in which ``np.array`` & co. accept tracked values (used by ``record``)."""
    return _building
