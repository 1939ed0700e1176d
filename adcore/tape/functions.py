"""Building blocks for models, computed stably; each works on plain and tracked arrays.

On plain numpy input they return plain numpy results; on tracked input they are
recorded as one op each (rules ``sigmoid``, ``softplus``, ``relu``, ``softmax``,
``logsoftmax``, ``logsumexp``).
"""
import numpy as np

from .tracked import Tracked, apply, _norm_axis


def _arg(x):
    return x if type(x) is Tracked else np.asarray(x)


def sigmoid(x):
    """The logistic function 1 / (1 + exp(-x)), without overflow."""
    return apply("sigmoid", (_arg(x),))


def softplus(x):
    """log(1 + exp(x)), without overflow."""
    return apply("softplus", (_arg(x),))


def relu(x):
    """max(x, 0); its derivative at 0 is taken as 0."""
    return apply("relu", (_arg(x),))


def logsumexp(x, axis=None, keepdims=False):
    """log(sum(exp(x), axis)), shifted by the maximum so it cannot overflow."""
    x = _arg(x)
    return apply("logsumexp", (x,), {"axis": _norm_axis(axis, np.ndim(x.value if type(x) is Tracked else x)),
                                     "keepdims": keepdims})


def softmax(x, axis=-1):
    """exp(x) / sum(exp(x), axis), shifted by the maximum."""
    x = _arg(x)
    return apply("softmax", (x,), {"axis": _norm_axis(axis, x.ndim)[0]})


def logsoftmax(x, axis=-1):
    """x - logsumexp(x, axis, keepdims=True): log-probabilities along ``axis``."""
    x = _arg(x)
    return apply("logsoftmax", (x,), {"axis": _norm_axis(axis, x.ndim)[0]})
