"""Tracing a loss for the compiled path: the tape's recording, refusing value-dependent code.

The compiled program replays one recording, so a loss whose Python code looks at the
values of traced arrays (``if``, ``float()``, ``.item()``, ``argmax``) would silently
replay stale decisions.  While ``tracing()`` is active on this thread, the tape reports
such values to this module's observer (``adcore.tape.observe``): converting a traced
value to a Python number raises ``ValueDependentError``, and plain (non-differentiable)
results computed from traced values come back as ``Derived`` arrays.  Results of ufuncs
(comparisons, ``isfinite``, logical operators, ``sign``, arithmetic on those...) remember
how they were computed (``Derived.expr``), so the lowering recomputes them in the program
(``np.where(x > 0, x, 0.1 * x)`` works); any other ``Derived`` (``argmax``, ``round``,
reductions) raises the same error when converted or met by the lowering.
"""
import numpy as np

from adcore.errors import ADError
from adcore.tape import observe
from adcore.tape.tracked import Tracked


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


class _Tracer:
    """The tape's observer while a loss is traced (see ``adcore.tape.observe``)."""

    def to_python(self, how):
        raise ValueDependentError(_CONVERSIONS.get(how) or f"converts a traced value with {how}")

    def plain(self, out, ufunc, operands):
        return derived(out, (ufunc, tuple(map(_operand, operands))) if ufunc else None)


_CONVERSIONS = {"bool()": "branches on a traced value (`if`, `and`, `or`, bool())"}
_TRACER = _Tracer()


def active():
    """Whether a loss is being traced on this thread."""
    return observe.observer() is _TRACER


def tracing():
    """Make value-dependent Python code raise (on this thread) while the block runs."""
    return observe.observing(_TRACER)


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
    return TapeRef(v.id) if type(v) is Tracked else v
