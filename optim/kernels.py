"""Per-array update kernels, one ``@njit`` function per rule.

Every kernel has the signature ``kernel(x, g, *state, *hyper)``: ``x`` is the
parameter and ``g`` the gradient, both raveled 1-D contiguous arrays of the
same dtype; the kernel overwrites ``g`` with the step to subtract from ``x``
(Optimisers.jl's ``apply!``) and updates its state arrays in place.  Scalar
hyperparameters are float64.  A compiled training loop can call these directly.
"""
import math

import numba


def _njit(f):
    return numba.njit(cache=False, nogil=True)(f)


@_njit
def descent(x, g, eta):
    for i in range(g.size):
        g[i] = eta * g[i]


@_njit
def momentum(x, g, v, eta, rho):
    for i in range(g.size):
        v[i] = rho * v[i] + eta * g[i]
        g[i] = v[i]


@_njit
def nesterov(x, g, v, eta, rho):
    for i in range(g.size):
        d = g[i]
        g[i] = -rho * rho * v[i] + (1.0 + rho) * eta * d
        v[i] = rho * v[i] - eta * d


@_njit
def rmsprop(x, g, quad, eta, rho, eps):
    for i in range(g.size):
        d = g[i]
        quad[i] = rho * quad[i] + (1.0 - rho) * d * d
        g[i] = d * eta / (math.sqrt(quad[i]) + eps)


@_njit
def adam(x, g, mt, vt, beta_t, eta, b1, b2, eps, lam):
    """Adam; with ``lam != 0`` PyTorch's (coupled) AdamW: ``eta * (adam_step + lam * x)``."""
    c1 = 1.0 - beta_t[0]
    c2 = 1.0 - beta_t[1]
    for i in range(g.size):
        d = g[i]
        mt[i] = b1 * mt[i] + (1.0 - b1) * d
        vt[i] = b2 * vt[i] + (1.0 - b2) * d * d
        g[i] = eta * (mt[i] / c1 / (math.sqrt(vt[i] / c2) + eps) + lam * x[i])
    beta_t[0] *= b1
    beta_t[1] *= b2


@_njit
def adagrad(x, g, acc, eta, eps):
    for i in range(g.size):
        d = g[i]
        acc[i] += d * d
        g[i] = d * eta / (math.sqrt(acc[i]) + eps)


@_njit
def clipgrad(x, g, delta):
    for i in range(g.size):
        g[i] = min(max(g[i], -delta), delta)


@_njit
def clipnorm(x, g, omega, p):
    """Scale ``g`` so its ``p``-norm is at most ``omega``; returns the norm before."""
    n = 0.0
    if math.isinf(p):
        for i in range(g.size):
            n = max(n, abs(g[i]))
    else:
        for i in range(g.size):
            n += abs(g[i]) ** p
        n = n ** (1.0 / p)
    if n > omega:
        s = omega / n
        for i in range(g.size):
            g[i] = s * g[i]
    return n


@_njit
def weightdecay(x, g, lam):
    for i in range(g.size):
        g[i] = g[i] + lam * x[i]
