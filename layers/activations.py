"""Activation functions (NNlib's definitions), written with numpy operations and the
tape engine's stable building blocks (``adcore.tape.sigmoid`` etc.), so they work on
plain arrays and on tracked arrays alike, and each is one op in a recording.

Elementwise functions apply to every entry; ``softmax`` and ``logsoftmax`` act on
the feature axis, which is the last one (``axis=-1``).
"""
import numpy as np

from adcore import tape

__all__ = ["identity", "relu", "leakyrelu", "elu", "gelu", "swish", "softplus",
           "sigmoid", "σ", "logsigmoid", "tanh", "softmax", "logsoftmax", "logsumexp"]


def identity(x):
    """``x`` itself: the activation of a layer without one."""
    return x


def relu(x):
    """``max(x, 0)``."""
    return tape.relu(x)


def leakyrelu(x, a=0.01):
    """``x`` for ``x > 0``, else ``a * x``."""
    return np.where(x > 0, x, a * x)


def elu(x, alpha=1.0):
    """``x`` for ``x >= 0``, else ``alpha * (exp(x) - 1)``."""
    return np.where(x >= 0, x, alpha * np.expm1(np.minimum(x, 0)))


def gelu(x):
    """The tanh approximation ``0.5x(1 + tanh(sqrt(2/π)(x + 0.044715x³)))``."""
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def sigmoid(x):
    """``1 / (1 + exp(-x))``, without overflow for large ``|x|``."""
    return tape.sigmoid(x)


σ = sigmoid


def softplus(x):
    """``log(1 + exp(x))``, without overflow."""
    return tape.softplus(x)


def logsigmoid(x):
    """``log(sigmoid(x)) = -softplus(-x)``."""
    return -softplus(-x)


def swish(x):
    """``x * sigmoid(x)``."""
    return x * sigmoid(x)


def tanh(x):
    """``tanh(x)``, elementwise."""
    return np.tanh(x)


def logsumexp(x, axis=-1, keepdims=False):
    """``log(sum(exp(x)))`` along ``axis`` (the feature axis by default), stably."""
    return tape.logsumexp(x, axis=axis, keepdims=keepdims)


def softmax(x, axis=-1):
    """``exp(x) / sum(exp(x))`` along the feature axis, stably."""
    return tape.softmax(x, axis=axis)


def logsoftmax(x, axis=-1):
    """``x - logsumexp(x)`` along the feature axis, stably."""
    return tape.logsoftmax(x, axis=axis)