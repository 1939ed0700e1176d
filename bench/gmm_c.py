"""ADBench's GMM objective written the way ADBench's C is (``gmm.h``): helper functions on
one point and one component (``subtract``, ``Qtimesx``, ``sqnorm``, ``logsumexp``; a row is
passed as its array and index, as C passes a pointer into it; inlined, as a C compiler
inlines them) and
scratch buffers for one point's centred vector, its product with Q and the components'
terms, reused across points and components; Q's diagonals and the sums of the q's are
computed once (``preprocess_qs``).  The same objective as :mod:`bench.gmm`'s kernel (its
hand-written gradient is the reference); ``python -m bench scale`` times adcore's gradient
of it beside that kernel's.
"""
import math

import numba
import numpy as np

from . import gmm


@numba.njit
def preprocess_qs(d, K, icf, sum_qs, Qdiags):
    for ik in range(K):
        sum_qs[ik] = 0.0
        for id_ in range(d):
            q = icf[ik, id_]
            sum_qs[ik] += q
            Qdiags[ik, id_] = math.exp(q)


@numba.njit(inline="always")
def subtract(d, x, ix, y, iy, out):
    """out = x[ix] - y[iy] (rows passed as array and index, as C passes &x[ix * d]: a row
    view per call would cost Numba a reference count each)."""
    for id_ in range(d):
        out[id_] = x[ix, id_] - y[iy, id_]


@numba.njit(inline="always")
def Qtimesx(d, Qdiags, icf, ik, x, out):
    """out = Q_ik x for Q_ik = diag(Qdiags[ik]) + the strictly lower triangle of icf[ik]
    (column by column, after its d diagonal entries)."""
    for id_ in range(d):
        out[id_] = Qdiags[ik, id_] * x[id_]
    li = d
    for i in range(d):
        for j in range(i + 1, d):
            out[j] = out[j] + icf[ik, li] * x[i]
            li += 1


@numba.njit(inline="always")
def sqnorm(d, x):
    res = x[0] * x[0]
    for i in range(1, d):
        res = res + x[i] * x[i]
    return res


@numba.njit(inline="always")
def arr_max(n, x):
    m = x[0]
    for i in range(1, n):
        if m < x[i]:
            m = x[i]
    return m


@numba.njit(inline="always")
def logsumexp(n, x):
    mx = arr_max(n, x)
    semx = 0.0
    for i in range(n):
        semx = semx + math.exp(x[i] - mx)
    return math.log(semx) + mx


@numba.njit
def log_wishart_prior(d, K, gamma, m, sum_qs, Qdiags, icf):
    out = 0.0
    for ik in range(K):
        frobenius = 0.0
        for j in range(d):
            frobenius = frobenius + Qdiags[ik, j] * Qdiags[ik, j]
        for j in range(d, icf.shape[1]):
            frobenius = frobenius + icf[ik, j] * icf[ik, j]
        out = out + 0.5 * gamma * gamma * frobenius - m * sum_qs[ik]
    return out


@numba.njit
def objective(alphas, means, icf, x, gamma, m, Qdiags, sum_qs, xcentered, Qxcentered, main_term):
    """ADBench's ``gmm_objective``; Qdiags (K, d), sum_qs (K,), xcentered (d,), Qxcentered
    (d,) and main_term (K,) are scratch."""
    n, d = x.shape
    K = alphas.shape[0]
    preprocess_qs(d, K, icf, sum_qs, Qdiags)
    slse = 0.0
    for ix in range(n):
        for ik in range(K):
            subtract(d, x, ix, means, ik, xcentered)
            Qtimesx(d, Qdiags, icf, ik, xcentered, Qxcentered)
            main_term[ik] = alphas[ik] + sum_qs[ik] - 0.5 * sqnorm(d, Qxcentered)
        slse = slse + logsumexp(K, main_term)
    lse_alphas = logsumexp(K, alphas)
    return gmm.constant(n, d, K, gamma, m) + slse - n * lse_alphas + \
        log_wishart_prior(d, K, gamma, m, sum_qs, Qdiags, icf)


class Kernels(gmm.Kernels):
    """``bench.gmm.Kernels`` with this objective (bench.gmm's hand-written gradient)."""

    LABEL = "ADBench C style"

    def __init__(self, inst):
        super().__init__(inst)
        self.functions = objective, gmm.gradient
