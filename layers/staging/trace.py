"""Tracing a loss for the compiled path: the tape's recording, refusing value-dependent code.

The compiled program replays one recording, so a loss whose Python code looks at the
values of traced arrays (``if``, ``float()``, ``.item()``, ``argmax``) would silently
replay stale decisions.  While ``tracing()`` is active on this thread, converting a
traced value to a Python number raises ``ValueDependentError``, and plain
(non-differentiable) results computed from traced values come back as ``Derived``
arrays.  Results of ufuncs (comparisons, ``isfinite``, logical operators, ``sign``,
arithmetic on those...) remember how they were computed (``Derived.expr``), so the
lowering recomputes them in the program (``np.where(x > 0, x, 0.1 * x)`` works); any
other ``Derived`` (``argmax``, ``round``, reductions) raises the same error when
converted or met by the lowering.
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


class TapeRef:
    """A traced operand of a ``Derived`` expression: the tape id of its value."""

    __slots__ = ("id",)

    def __init__(self, id):
        self.id = id


class Derived(np.ndarray):
    """A plain array computed from traced values outside recorded ops (a comparison, ...).

    ``expr`` is ``(ufunc name, operands)`` for a ufunc call, an operand being a
    ``TapeRef`` to a traced value, a ``Derived``, or a plain value; else ``None``.
    An operation with a traced operand is left to the tape (which records the
    ``Derived`` as a constant operand, and the lowering recomputes it)."""

    expr = None

    def __array_finalize__(self, obj):
        self.expr = None

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if any(type(i) is Tracked for i in inputs):
            return NotImplemented
        plain = [np.asarray(i) if isinstance(i, Derived) else i for i in inputs]
        out = getattr(ufunc, method)(*plain, **kwargs)
        if not isinstance(out, (np.ndarray, np.generic)):
            return out
        return derived(out, (ufunc.__name__, inputs) if method == "__call__" and not kwargs
                       else None)

    def astype(self, dtype, *args, **kwargs):
        return derived(np.asarray(self).astype(dtype, *args, **kwargs), ("astype", (self,)))

    def __bool__(self):
        raise ValueDependentError("branches on a value computed from traced arrays (`if`/`and`/`or`)")

    def __float__(self):
        raise ValueDependentError("converts a value computed from traced arrays with float()")

    def __int__(self):
        raise ValueDependentError("converts a value computed from traced arrays with int()")

    __index__ = __int__

    def item(self, *args):
        raise ValueDependentError("converts a value computed from traced arrays with .item()")


def derived(x, expr=None):
    out = np.asarray(x).view(Derived)
    out.expr = expr
    return out


def _operand(v):
    return TapeRef(v._id) if type(v) is Tracked else v


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


def _plain_result(name, ufunc=None):
    def method(self, *args, **kw):
        out = original[name](self, *args, **kw)
        if not active():
            return out
        return derived(out, (ufunc, (TapeRef(self._id),) + tuple(map(_operand, args)))
                       if ufunc else None)
    return method


def _ufunc_call(ufunc, method, inputs, kwargs):
    out = original["ufunc_call"](ufunc, method, inputs, kwargs)
    if active() and type(out) is not Tracked and _involves_traced(inputs):
        call = method == "__call__" and not kwargs
        return derived(out, (ufunc.__name__, tuple(map(_operand, inputs))) if call else None)
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
for _name, _ufunc in (("__lt__", "less"), ("__le__", "less_equal"), ("__gt__", "greater"),
                      ("__ge__", "greater_equal"), ("__eq__", "equal"), ("__ne__", "not_equal"),
                      ("argmax", None), ("argmin", None)):
    setattr(Tracked, _name, _plain_result(_name, _ufunc))
numpy_api.ufunc_call = _ufunc_call
numpy_api.function_call = _function_call
