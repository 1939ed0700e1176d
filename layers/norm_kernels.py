"""Numba kernels of ``BatchNorm`` and ``Dropout``, called through ``kernel_call``.

Their constant array operands are the layer's own arrays, read and updated in place at
each call: the running statistics, and the random state of dropout (so a compiled
``Duplicated`` program draws a new mask at every call).
"""
import math

import numba
import numpy as np


def _njit(f):
    return numba.njit(cache=False, error_model="numpy")(f)


@_njit
def batchnorm_train(out, x, scale, bias, rmean, rvar, momentum, eps):
    """``x`` of shape ``(batch, channels, n)`` normalised per channel with the batch mean and
    (biased) variance, then ``scale * x + bias``; the running mean and variance move by
    ``momentum`` towards the batch's (the variance unbiased, as Flux)."""
    nb, nc, ns = x.shape
    m = nb * ns
    for c in range(nc):
        s = 0.0
        for b in range(nb):
            for i in range(ns):
                s += x[b, c, i]
        mu = s / m
        v = 0.0
        for b in range(nb):
            for i in range(ns):
                d = x[b, c, i] - mu
                v += d * d
        var = v / m
        inv = 1.0 / math.sqrt(var + eps)
        for b in range(nb):
            for i in range(ns):
                out[b, c, i] = (x[b, c, i] - mu) * inv * scale[c] + bias[c]
        rmean[c] = (1.0 - momentum) * rmean[c] + momentum * mu
        rvar[c] = (1.0 - momentum) * rvar[c] + momentum * var * m / (m - 1)


@_njit
def batchnorm_test(out, x, scale, bias, rmean, rvar, eps):
    """``x`` of shape ``(batch, channels, n)`` normalised with the running statistics."""
    nb, nc, ns = x.shape
    for c in range(nc):
        inv = 1.0 / math.sqrt(rvar[c] + eps)
        for b in range(nb):
            for i in range(ns):
                out[b, c, i] = (x[b, c, i] - rmean[c]) * inv * scale[c] + bias[c]


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


@_njit
def _uniform(s):
    """SplitMix64: the next state after ``s`` and a uniform number in [0, 1) from it."""
    s = s + _GOLDEN
    z = (s ^ (s >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    z = z ^ (z >> np.uint64(31))
    return s, (z >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@_njit
def dropout(out, x, state, p):
    """``out = x / (1 - p)`` where a uniform draw is at least ``p``, else 0 (``x`` flat);
    ``state[0]`` is the random state, advanced by one draw per entry."""
    s = state[0]
    keep = 1.0 / (1.0 - p)
    for i in range(x.shape[0]):
        s, u = _uniform(s)
        if u >= p:
            out[i] = x[i] * keep
    state[0] = s
