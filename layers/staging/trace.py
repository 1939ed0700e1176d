"""Tracing a loss for the compiled path: the tape's recording, refusing value-dependent code.

The compiled program replays one recording, so a loss whose Python code looks at the
values of traced arrays (``if``, ``float()``, ``.item()``, comparisons, ``argmax``)
would silently replay stale decisions.  While ``tracing()`` is active on this thread,
converting a traced value to a Python number raises ``ValueDependentError``, and
comparisons and other plain (non-differentiable) results computed from traced values
come back as ``Derived`` arrays, which raise the same error when converted or when the
lowering meets them in the recording.
"""
import contextlib
import threading

import numpy as np

from adcore.errors import ADError
from adcore.tape import numpy_api
from adcore.tape.tracked import Tracked

_local = threading.local()


class ValueDependentError(ADError):
    """The loss's Python code depends on the values of traced arrays."""

    def __init__(self, what):
        super().__init__(
            f"the loss {what}: its Python code depends on the values of traced arrays. "
            "The compiled path (Duplicated) records the loss once and replays the recording, "
            "so it cannot follow value-dependent control flow or values computed outside "
            "recorded numpy operations. Write it with differentiable array operations "
            "(np.maximum, np.minimum, np.abs, np.clip, ...), or pass the plain model to use "
            "the tape engine")


def active():
    return getattr(_local, "active", False)


@contextlib.contextmanager
def tracing():
    """Make value-dependent Python code raise (on this thread) while the block runs."""
    old = active()
    _local.active = True
    try:
        yield
    finally:
        _local.active = old


class Derived(np.ndarray):
    """A plain array computed from traced values outside recorded ops (a comparison, ...)."""

    def __bool__(self):
        raise ValueDependentError("branches on a value computed from traced arrays (`if`/`and`/`or`)")

    def __float__(self):
        raise ValueDependentError("converts a value computed from traced arrays with float()")

    def __int__(self):
        raise ValueDependentError("converts a value computed from traced arrays with int()")

    __index__ = __int__

    def item(self, *args):
        raise ValueDependentError("converts a value computed from traced arrays with .item()")


def derived(x):
    return np.asarray(x).view(Derived)


def _involves_traced(values):
    for v in values:
        if type(v) is Tracked or isinstance(v, Derived):
            return True
        if isinstance(v, (tuple, list)) and _involves_traced(v):
            return True
    return False


def _refuse(what):
    def method(self, *args, **kw):
        if active():
            raise ValueDependentError(what)
        return original[method.__name__](self, *args, **kw)
    return method


def _plain_result(name):
    def method(self, *args, **kw):
        out = original[name](self, *args, **kw)
        return derived(out) if active() else out
    return method


def _ufunc_call(ufunc, method, inputs, kwargs):
    out = original["ufunc_call"](ufunc, method, inputs, kwargs)
    if active() and type(out) is not Tracked and _involves_traced(inputs):
        return derived(out)
    return out


_VALUE_FUNCTIONS = {np.argmax, np.argmin, np.argsort, np.nonzero, np.count_nonzero, np.any,
                    np.all, np.isclose, np.allclose, np.array_equal, np.round, np.around}


def _function_call(func, args, kwargs):
    out = original["function_call"](func, args, kwargs)
    if active() and func in _VALUE_FUNCTIONS and _involves_traced(args):
        return derived(out)
    return out


original = {name: getattr(Tracked, name) for name in (
    "__bool__", "__float__", "__int__", "item", "tolist",
    "__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__", "argmax", "argmin")}
original["ufunc_call"] = numpy_api.ufunc_call
original["function_call"] = numpy_api.function_call

for _name, _what in (("__bool__", "branches on a traced value (`if`, `and`, `or`, bool())"),
                     ("__float__", "converts a traced value with float()"),
                     ("__int__", "converts a traced value with int()"),
                     ("item", "converts a traced value with .item()"),
                     ("tolist", "converts a traced value with .tolist()")):
    _m = _refuse(_what)
    _m.__name__ = _name
    setattr(Tracked, _name, _m)
for _name in ("__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__", "argmax", "argmin"):
    setattr(Tracked, _name, _plain_result(_name))
numpy_api.ufunc_call = _ufunc_call
numpy_api.function_call = _function_call
