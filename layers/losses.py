"""Loss functions (Flux's definitions): ``loss(ŷ, y, agg=np.mean)``.

Classes lie along the last axis (``crossentropy`` and friends sum over it, then
``agg`` aggregates over the batch).  Prediction and target must have the same
shape, unless one of them is a scalar.
"""
import numpy as np

from .activations import logsigmoid, logsoftmax

__all__ = ["mse", "mae", "crossentropy", "logitcrossentropy", "binarycrossentropy",
           "logitbinarycrossentropy", "huber_loss", "kldivergence"]


def _check(yhat, y):
    """The target as an array (bool targets become floats); shapes must match unless
    one side is a scalar."""
    if isinstance(y, (int, float)):
        return y
    y = np.asarray(y) if isinstance(y, (list, tuple, np.bool_, np.number)) else y
    if np.ndim(yhat) and np.ndim(y) and np.shape(yhat) != np.shape(y):
        raise ValueError(f"loss function expects the prediction's shape {np.shape(yhat)} "
                         f"to match the target's shape {np.shape(y)}")
    if isinstance(y, np.ndarray) and y.dtype.kind in "biu":
        y = y.astype(getattr(yhat, "dtype", np.float64) if _is_float(yhat) else np.float64)
    return y


def _is_float(yhat):
    return np.dtype(getattr(yhat, "dtype", np.float64)).kind == "f"


def _eps(yhat):
    return np.finfo(np.dtype(getattr(yhat, "dtype", np.float64))).eps if _is_float(yhat) \
        else np.finfo(np.float64).eps


def mse(yhat, y, agg=np.mean):
    """``agg((ŷ - y)²)``."""
    y = _check(yhat, y)
    return agg((yhat - y) ** 2)


def mae(yhat, y, agg=np.mean):
    """``agg(|ŷ - y|)``."""
    y = _check(yhat, y)
    return agg(np.abs(yhat - y))


def huber_loss(yhat, y, agg=np.mean, delta=1.0):
    """``½e²`` where ``e = |ŷ - y| < delta``, else ``delta (e - ½delta)``."""
    y = _check(yhat, y)
    e = np.abs(yhat - y)
    return agg(np.where(e < delta, 0.5 * e ** 2, delta * (e - 0.5 * delta)))


def crossentropy(yhat, y, agg=np.mean, eps=None):
    """``agg(-sum(y log(ŷ + eps)))`` over the last axis; ``ŷ`` holds probabilities."""
    y = _check(yhat, y)
    eps = _eps(yhat) if eps is None else eps
    return agg(-np.sum(y * np.log(yhat + eps), axis=-1))


def logitcrossentropy(yhat, y, agg=np.mean):
    """``crossentropy(softmax(ŷ), y)`` computed stably from logits."""
    y = _check(yhat, y)
    return agg(-np.sum(y * logsoftmax(yhat), axis=-1))


def binarycrossentropy(yhat, y, agg=np.mean, eps=None):
    """``agg(-y log(ŷ + eps) - (1 - y) log(1 - ŷ + eps))``; ``ŷ`` holds probabilities."""
    y = _check(yhat, y)
    eps = _eps(yhat) if eps is None else eps
    return agg(-y * np.log(yhat + eps) - (1 - y) * np.log(1 - yhat + eps))


def logitbinarycrossentropy(yhat, y, agg=np.mean):
    """``binarycrossentropy(sigmoid(ŷ), y)`` computed stably from logits."""
    y = _check(yhat, y)
    return agg((1 - y) * yhat - logsigmoid(yhat))


def kldivergence(yhat, y, agg=np.mean, eps=None):
    """``agg(sum(y log y) - sum(y log(ŷ + eps)))`` over the last axis (with ``0 log 0 = 0``)."""
    y = _check(yhat, y)
    eps = _eps(yhat) if eps is None else eps
    ylogy = np.sum(y * np.log(np.where(y > 0, y, 1)), axis=-1)
    return agg(ylogy - np.sum(y * np.log(yhat + eps), axis=-1))
