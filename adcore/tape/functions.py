"""Building blocks for models, computed stably; each works on plain and tracked arrays.

On plain numpy input they return plain numpy results; on tracked input they are
recorded as one op each (rules ``sigmoid``, ``softplus``, ``relu``, ``softmax``,
``logsoftmax``, ``logsumexp``).
"""
import numpy as np

from .tracked import EMPTY, Tracked, apply, apply1, _norm_axis


def _arg(x):
    return x if type(x) is Tracked else np.asarray(x)


def _one(op, x, attrs=EMPTY):
    """``op`` on one operand, tracked or plain."""
    return apply1(op, x, attrs) if type(x) is Tracked else apply(op, (np.asarray(x),), attrs)


def sigmoid(x):
    """The logistic function 1 / (1 + exp(-x)), without overflow."""
    return apply1("sigmoid", x) if type(x) is Tracked else _one("sigmoid", x)


def softplus(x):
    """log(1 + exp(x)), without overflow."""
    return _one("softplus", x)


def relu(x):
    """max(x, 0); its derivative at 0 is taken as 0."""
    return _one("relu", x)


def logsumexp(x, axis=None, keepdims=False):
    """log(sum(exp(x), axis)), shifted by the maximum so it cannot overflow."""
    x = _arg(x)
    return _one("logsumexp", x, {"axis": _norm_axis(axis, x.ndim), "keepdims": keepdims})


def softmax(x, axis=-1):
    """exp(x) / sum(exp(x), axis), shifted by the maximum."""
    if type(x) is Tracked:
        return apply1("softmax", x, {"axis": _norm_axis(axis, x.value.ndim)[0]})
    x = np.asarray(x)
    return apply("softmax", (x,), {"axis": _norm_axis(axis, x.ndim)[0]})


def logsoftmax(x, axis=-1):
    """x - logsumexp(x, axis, keepdims=True): log-probabilities along ``axis``."""
    x = _arg(x)
    return _one("logsoftmax", x, {"axis": _norm_axis(axis, x.ndim)[0]})
