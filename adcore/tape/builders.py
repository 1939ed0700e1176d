"""Building arrays from tracked values: ``np.array``, ``np.asarray``, ``np.r_``, ``np.c_``.

numpy does not dispatch these to ``__array_function__``, and on a tracked value they
call ``Tracked.__array__``, which raises.  While ``record`` runs ``f`` they are
replaced by wrappers (module attributes of numpy, put back when the outermost
recording ends) that call numpy first and, only when numpy meets a tracked value,
build the result from recorded ops: a nested list or tuple is stacked level by level,
a ``dtype`` is a recorded cast, ``ndmin`` a reshape.  Code holding its own
reference to the original ``np.array`` keeps getting ``UnsupportedError``.
"""
import threading

import numpy as np

from ..errors import UnsupportedError
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
        try:
            return original(obj, *args, **kwargs)
        except UnsupportedError:
            if not _has_tracked(obj):
                raise
        dtype = args[0] if args else kwargs.get("dtype")
        return build(obj, dtype, kwargs.get("ndmin", 0), copy=kwargs.get("copy", copies) is True)

    wrapper.__name__ = wrapper.__qualname__ = name
    wrapper.__doc__ = original.__doc__
    wrapper.__wrapped__ = original
    return wrapper


_ORIGINAL = {name: getattr(np, name) for name in ("array", "asarray", "asanyarray", "ascontiguousarray")}
_WRAPPED = {"array": _wrapper("array", True), "asarray": _wrapper("asarray", False),
            "asanyarray": _wrapper("asanyarray", False),
            "ascontiguousarray": _wrapper("ascontiguousarray", False)}
_lock = threading.Lock()
_depth = 0


class _BuildingArrays:
    """Context manager installing the wrappers (nested and concurrent recordings share them)."""

    def __enter__(self):
        global _depth
        with _lock:
            if _depth == 0:
                for name, w in _WRAPPED.items():
                    setattr(np, name, w)
                if _index_tricks is not None:
                    _index_tricks.array = _WRAPPED["array"]
            _depth += 1

    def __exit__(self, *exc):
        global _depth
        with _lock:
            _depth -= 1
            if _depth == 0:
                for name, original in _ORIGINAL.items():
                    setattr(np, name, original)
                if _index_tricks is not None:
                    _index_tricks.array = _ORIGINAL["array"]
        return False


_building = _BuildingArrays()


def building_arrays():
    """The context in which ``np.array`` & co. accept tracked values (used by ``record``)."""
    return _building
