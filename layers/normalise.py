"""Normalisation and dropout: ``LayerNorm``, ``BatchNorm`` and ``Dropout``.

``BatchNorm`` and ``Dropout`` follow the mode of ``layers.modes`` (``trainmode`` /
``testmode``, automatic by default).  Their computations are Numba kernels
(``layers.norm_kernels``) that read the running statistics and the random state at run
time: they are the layers' ``__state_fields__``, which a compiled ``Duplicated`` program
takes by reference from the model at each call, reads and updates in place.
"""
import math

import numpy as np

from . import activations, norm_kernels, show
from .core import Layer, as_input
from .init import _rng
from .modes import is_active
from .njit_layer import kernel_call

__all__ = ["LayerNorm", "BatchNorm", "Dropout"]


class LayerNorm(Layer):
    """``act(scale * (x - mean) / sqrt(var + eps) + bias)`` over the last axis of size ``n``
    (mean and biased variance of that axis); ``scale`` starts at ones, ``bias`` at zeros."""

    __tree_fields__ = ("scale", "bias")

    def __init__(self, n, act=activations.identity, *, eps=1e-5, dtype=np.float32):
        self.scale, self.bias = np.ones(n, dtype), np.zeros(n, dtype)
        self.act, self.eps = act, eps

    def __call__(self, x):
        x = as_input(x, self.scale.dtype)
        if np.ndim(x) < 1 or np.shape(x)[-1] != self.scale.shape[0]:
            raise ValueError(f"{self.show_string()} expects an input of shape (..., "
                             f"{self.scale.shape[0]}), got shape {np.shape(x)}")
        d = x - np.mean(x, axis=-1, keepdims=True)
        var = np.mean(d * d, axis=-1, keepdims=True)
        return self.act(d / np.sqrt(var + self.eps) * self.scale + self.bias)

    def show_string(self):
        s = f"LayerNorm({self.scale.shape[0]}"
        if self.act is not activations.identity:
            s += ", " + show.function_name(self.act)
        return s + ")"


class BatchNorm(Layer):
    """Normalises each channel (axis 1) of ``(batch, n, ...)`` inputs, then
    ``act(scale * x + bias)``.

    In training mode with the batch's mean and biased variance, moving ``running_mean`` and
    ``running_var`` (not trainable, saved by ``save``) by ``momentum`` towards the batch's
    mean and unbiased variance; in test mode with the running statistics.
    """

    __tree_fields__ = ("scale", "bias")
    __state_fields__ = ("running_mean", "running_var")

    def __init__(self, n, act=activations.identity, *, eps=1e-5, momentum=0.1,
                 dtype=np.float32):
        self.scale, self.bias = np.ones(n, dtype), np.zeros(n, dtype)
        self.running_mean, self.running_var = np.zeros(n, dtype), np.ones(n, dtype)
        self.act, self.eps, self.momentum = act, eps, momentum
        self.active = None

    def __call__(self, x):
        x = as_input(x, self.scale.dtype)
        n = self.scale.shape[0]
        if np.ndim(x) < 2 or np.shape(x)[1] != n:
            raise ValueError(f"{self.show_string()} expects an input of shape (batch, {n}, "
                             f"...), got shape {np.shape(x)}")
        x3 = x.reshape(x.shape[0], n, math.prod(x.shape[2:]))
        if is_active(self, x, self.scale, self.bias):
            if x3.shape[0] * x3.shape[2] < 2:
                raise ValueError(f"{self.show_string()} in training mode needs more than one "
                                 f"value per channel, got an input of shape {x.shape}")
            y = kernel_call(norm_kernels.batchnorm_train, x3.shape, x3, self.scale, self.bias,
                            self.running_mean, self.running_var, float(self.momentum),
                            float(self.eps))
        else:
            y = kernel_call(norm_kernels.batchnorm_test, x3.shape, x3, self.scale, self.bias,
                            self.running_mean, self.running_var, float(self.eps))
        return self.act(y.reshape(x.shape))

    def show_string(self):
        s = f"BatchNorm({self.scale.shape[0]}"
        if self.act is not activations.identity:
            s += ", " + show.function_name(self.act)
        if self.active is not None:
            s += f", active={self.active}"
        return s + ")"


class Dropout(Layer):
    """Sets each entry to zero with probability ``p`` and scales the others by
    ``1 / (1 - p)`` in training mode; the identity in test mode.

    ``rng`` (a seed or a ``numpy.random.Generator``) seeds the layer's own random state,
    which each call advances (on both engines, and inside compiled programs).
    """

    __state_fields__ = ("state",)

    def __init__(self, p, *, rng=None):
        if not 0 <= p < 1:
            raise ValueError(f"Dropout probability must be in [0, 1), got {p!r}")
        self.p = float(p)
        self.state = np.array([_rng(rng).integers(0, 2 ** 63)], np.uint64)
        self.active = None

    def __call__(self, x):
        if not is_active(self, x) or self.p == 0:
            return x
        flat = x.reshape(math.prod(np.shape(x)))
        return kernel_call(norm_kernels.dropout, flat.shape, flat, self.state,
                           self.p).reshape(np.shape(x))

    def show_string(self):
        s = f"Dropout({self.p:g}"
        if self.active is not None:
            s += f", active={self.active}"
        return s + ")"
