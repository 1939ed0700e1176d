"""ADBench's GMM objective written to vectorise across points (``bench.gmm``'s formula).

``bench.gmm``'s kernel runs per point and component: its triangular loop runs d - c - 1 rows
per column, too few for vector code at ADBench's sizes. This layout takes one component at a
time and one row of Q_k (x_i - mu_k) for all n points at once: points are the innermost,
contiguous loop (``xt`` is x transposed, (d, n), read-only data), so every inner loop is n
long. The scratch ``z`` (n,) holds one row of Q_k (x_i - mu_k) for every point and is
overwritten for every (component, row); ``main`` (K, n) the per-point log-likelihood terms.
Checked against ``bench.gmm``'s kernels in ``tests/test_bench_gmm_points.py``.
"""
import math

import numba
import numpy as np

from . import gmm
from .gmm import constant, diagonals, prior
from .kernels import logsumexp


@numba.njit
def _lower(d, r, c):
    """Position in a row of icf of entry (r, c), r > c, of L (stored column by column)."""
    return d + c * (2 * d - c - 1) // 2 + r - c - 1


@numba.njit
def _lse_point(main, i):
    """logsumexp over k of main[k, i]."""
    K = main.shape[0]
    mx = main[0, i]
    for k in range(1, K):
        mx = max(mx, main[k, i])
    s = 0.0
    for k in range(K):
        s += math.exp(main[k, i] - mx)
    return mx + math.log(s)


@numba.njit
def _row(xt, means, icf, qdiag, k, r, z):
    """z[i] = row r of Q_k (x_i - mu_k), for every point i: row r of Q_k x_i, then row r of
    Q_k mu_k subtracted once (the inner loops' reverses then take one sum each, not two)."""
    d, n = xt.shape
    q = qdiag[k, r]
    shift = q * means[k, r]
    for i in range(n):
        z[i] = q * xt[r, i]
    for c in range(r):
        a = icf[k, _lower(d, r, c)]
        shift += a * means[k, c]
        for i in range(n):
            z[i] += a * xt[c, i]
    for i in range(n):
        z[i] -= shift


@numba.njit
def _mains(alphas, means, icf, xt, qdiag, sum_qs, z, main):
    """qdiag, sum_qs from icf (``gmm.diagonals``), then main[k, i] = alphas[k] + sum(q_k) -
    |Q_k (x_i - mu_k)|^2 / 2: the forward pass both kernels start with."""
    d, n = xt.shape
    diagonals(icf, d, qdiag, sum_qs)
    for k in range(alphas.shape[0]):
        base = alphas[k] + sum_qs[k]
        for i in range(n):
            main[k, i] = base
        for r in range(d):
            _row(xt, means, icf, qdiag, k, r, z)
            for i in range(n):
                main[k, i] -= 0.5 * z[i] * z[i]


@numba.njit
def objective(alphas, means, icf, xt, gamma, m, qdiag, sum_qs, z, main):
    """The GMM objective on points ``xt`` (d, n); qdiag (K, d), sum_qs (K,), z (n,),
    main (K, n) are scratch."""
    d, n = xt.shape
    K = alphas.shape[0]
    _mains(alphas, means, icf, xt, qdiag, sum_qs, z, main)
    slse = 0.0
    for i in range(n):
        slse += _lse_point(main, i)
    return (constant(n, d, K, gamma, m) + slse - n * logsumexp(alphas)
            + prior(icf, d, gamma, m, qdiag, sum_qs))


@numba.njit(fastmath={"reassoc", "nsz", "contract"})
def gradient(alphas, means, icf, xt, gamma, m, qdiag, sum_qs, z, main, w, lse, dalphas, dmeans,
             dicf):
    """Hand-written gradient in the same layout: adds d objective / d (alphas, means, icf)
    into the d-arrays and returns the objective; w, lse (n,) are scratch besides the
    objective's. A second pass per component recomputes each row of Q_k (x_i - mu_k) (keeping
    them all would take K d n values) and takes the row's adjoint g = -w z into dot products
    with the points. Compiled with fastmath's reassoc (and nsz, contract) so that these sums
    vectorise, as adcore's adjoint sums (reassoc) do; in order they would not (2-3x slower)."""
    d, n = xt.shape
    K = alphas.shape[0]
    _mains(alphas, means, icf, xt, qdiag, sum_qs, z, main)
    slse = 0.0
    for i in range(n):
        lse[i] = _lse_point(main, i)
        slse += lse[i]
    for k in range(K):
        sw = 0.0
        for i in range(n):
            w[i] = math.exp(main[k, i] - lse[i])     # d lse_i / d main[k, i]
            sw += w[i]
        dalphas[k] += sw
        for r in range(d):
            _row(xt, means, icf, qdiag, k, r, z)
            q = qdiag[k, r]
            mr = means[k, r]
            sg = 0.0                                 # g = d objective / d z = -w z
            dq = 0.0
            for i in range(n):
                g = -w[i] * z[i]
                z[i] = g
                sg += g
                dq += g * xt[r, i]
            dicf[k, r] += sw + (dq - mr * sg) * q
            dmeans[k, r] -= q * sg
            for c in range(r):
                li = _lower(d, r, c)
                dl = 0.0
                for i in range(n):
                    dl += z[i] * xt[c, i]
                dicf[k, li] += dl - means[k, c] * sg
                dmeans[k, c] -= icf[k, li] * sg
    lse_a = logsumexp(alphas)
    for k in range(K):
        dalphas[k] -= n * math.exp(alphas[k] - lse_a)
        for j in range(d):
            dicf[k, j] += gamma * gamma * qdiag[k, j] * qdiag[k, j] - m
        for j in range(d, icf.shape[1]):
            dicf[k, j] += gamma * gamma * icf[k, j]
    return constant(n, d, K, gamma, m) + slse - n * lse_a + prior(icf, d, gamma, m, qdiag, sum_qs)


class Kernels(gmm.Kernels):
    """``bench.gmm.Kernels`` for this layout (x transposed once, outside the timed calls)."""

    LABEL = "points layout"

    def __init__(self, inst):
        super().__init__(inst)
        K, d, n = inst.K, inst.d, inst.n
        self.points = np.ascontiguousarray(inst.x.T)
        self.functions = objective, gradient
        self.scratch = (np.zeros((K, d)), np.zeros(K), np.zeros(n), np.zeros((K, n)))
        self.hand_scratch = self.scratch + (np.zeros(n), np.zeros(n))
        self.shadows = tuple(np.zeros_like(s) for s in self.scratch)


def run(config):
    """The ``gmm`` workload: :func:`bench.gmm.run` with this layout's rows beside the
    per-point kernel's."""
    return gmm.run(config, layouts=(Kernels,))
