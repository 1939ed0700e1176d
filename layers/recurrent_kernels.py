"""Numba kernels of the recurrent layers, called through ``kernel_call`` (adcore
differentiates them on both engines; none has a written backward).

Each kernel runs a whole sequence: ``out`` is ``(batch, time, n)``, ``proj`` the input
projections ``x_t @ Wi.T + b`` of every step, ``(batch, time, gates * n)``, computed
before the call with one BLAS product; the kernel adds the hidden products ``Wh @ h``
with loops over time.  The state starts at zero.  The gate blocks of ``proj`` and ``Wh``
are in Flux's (and PyTorch's) order.  Every state is written once (``out[:, t]`` is
``h_t``, read back at step ``t + 1``), so the reverse pass needs no copies of overwritten
values.
"""
import math

import numba
import numpy as np

# The activations an RNN kernel can apply, by code.
IDENTITY, TANH, RELU, SIGMOID = range(4)


def _njit(f):
    return numba.njit(cache=False, error_model="numpy")(f)


@_njit
def sigmoid(v):
    """``1 / (1 + exp(-v))`` without overflow on either side."""
    if v >= 0:
        return 1.0 / (1.0 + math.exp(-v))
    e = math.exp(v)
    return e / (1.0 + e)


@_njit
def activate(code, v):
    """The activation numbered ``code`` (``IDENTITY``, ``TANH``, ``RELU``, ``SIGMOID``) of ``v``."""
    if code == TANH:
        return math.tanh(v)
    if code == RELU:
        return max(v, 0.0)
    if code == SIGMOID:
        return sigmoid(v)
    return v


@_njit
def rnn(out, proj, wh, code):
    """``h_t = act(proj_t + Wh h_{t-1})``, ``act`` given by ``code``."""
    nb, nt, n = out.shape
    for t in range(nt):
        for b in range(nb):
            for j in range(n):
                s = proj[b, t, j]
                if t > 0:
                    for k in range(n):
                        s += wh[j, k] * out[b, t - 1, k]
                out[b, t, j] = activate(code, s)


@_njit
def lstm(out, proj, wh):
    """Gates ``i, f, g, o`` (rows ``0, n, 2n, 3n`` onwards):
    ``c_t = σ(f) c_{t-1} + σ(i) tanh(g)``, ``h_t = σ(o) tanh(c_t)``."""
    nb, nt, n = out.shape
    cell = np.zeros(out.shape, out.dtype)
    for t in range(nt):
        for b in range(nb):
            for j in range(n):
                si, sf = proj[b, t, j], proj[b, t, n + j]
                sg, so = proj[b, t, 2 * n + j], proj[b, t, 3 * n + j]
                if t > 0:
                    for k in range(n):
                        h = out[b, t - 1, k]
                        si += wh[j, k] * h
                        sf += wh[n + j, k] * h
                        sg += wh[2 * n + j, k] * h
                        so += wh[3 * n + j, k] * h
                c = sigmoid(si) * math.tanh(sg)
                if t > 0:
                    c += sigmoid(sf) * cell[b, t - 1, j]
                cell[b, t, j] = c
                out[b, t, j] = sigmoid(so) * math.tanh(c)


@_njit
def gru(out, proj, wh):
    """Gates ``r, z, h̃`` (rows ``0, n, 2n`` onwards), as Flux's ``GRUCell``:
    ``h̃ = tanh(proj_h + r (Wh_h h_{t-1}))``, ``h_t = (1 - z) h̃ + z h_{t-1}``."""
    nb, nt, n = out.shape
    for t in range(nt):
        for b in range(nb):
            for j in range(n):
                sr, sz, sh = proj[b, t, j], proj[b, t, n + j], 0.0
                if t > 0:
                    for k in range(n):
                        h = out[b, t - 1, k]
                        sr += wh[j, k] * h
                        sz += wh[n + j, k] * h
                        sh += wh[2 * n + j, k] * h
                z = sigmoid(sz)
                g = math.tanh(proj[b, t, 2 * n + j] + sigmoid(sr) * sh)
                h = (1.0 - z) * g
                if t > 0:
                    h += z * out[b, t - 1, j]
                out[b, t, j] = h
