"""ADBench's GMM objective written to vectorise across points (``bench.gmm``'s formula).

``bench.gmm``'s kernel runs per point and component: its triangular loop runs d - c - 1 rows
per column, too few for vector code at ADBench's sizes. This layout takes one component at a
time and one row of Q_k (x_i - mu_k) for all n points at once: points are the innermost,
contiguous loop (``xt`` is x transposed, (d, n), read-only data), so every inner loop is n
long. The scratch ``z`` (n,) holds one row of Q_k (x_i - mu_k) for every point and is
overwritten for every (component, row); ``main`` (K, n) the per-point log-likelihood terms.
Checked against ``bench.gmm``'s kernels in ``tests/bench/test_bench_gmm_points.py``.
"""
import math

import numba
import numpy as np

from . import gmm
from .gmm import constant, diagonals, prior
from .kernels import logsumexp

OCTET = 8            # columns of Q_k per pass over the points


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
    Q_k mu_k subtracted once (the inner loops' reverses then take one sum each, not two).
    Eight columns of Q_k are taken in one pass over the points (``OCTET``; the last r % 8
    one by one): a pass reads z once for eight rows of the points, not once for each."""
    d, n = xt.shape
    q = qdiag[k, r]
    shift = q * means[k, r]
    for i in range(n):
        z[i] = q * xt[r, i]
    for c in range(0, r - OCTET + 1, OCTET):
        a0 = icf[k, _lower(d, r, c)]
        a1 = icf[k, _lower(d, r, c + 1)]
        a2 = icf[k, _lower(d, r, c + 2)]
        a3 = icf[k, _lower(d, r, c + 3)]
        a4 = icf[k, _lower(d, r, c + 4)]
        a5 = icf[k, _lower(d, r, c + 5)]
        a6 = icf[k, _lower(d, r, c + 6)]
        a7 = icf[k, _lower(d, r, c + 7)]
        shift += (a0 * means[k, c] + a1 * means[k, c + 1] + a2 * means[k, c + 2]
                  + a3 * means[k, c + 3] + a4 * means[k, c + 4] + a5 * means[k, c + 5]
                  + a6 * means[k, c + 6] + a7 * means[k, c + 7])
        for i in range(n):
            z[i] += (a0 * xt[c, i] + a1 * xt[c + 1, i] + a2 * xt[c + 2, i] + a3 * xt[c + 3, i]
                     + a4 * xt[c + 4, i] + a5 * xt[c + 5, i] + a6 * xt[c + 6, i]
                     + a7 * xt[c + 7, i])
    for c in range(r - r % OCTET, r):
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


@numba.njit
def _lower_adjoints(means, icf, dmeans, dicf, k, r, c, sg, dls):
    """Adds the adjoints of entries (r, c + j) of L_k and of mu_k[c + j], given dls[j], the
    sum over points of g_i x_i[c + j], and sg the sum of g."""
    d = means.shape[1]
    for j in range(len(dls)):
        li = _lower(d, r, c + j)
        dicf[k, li] += dls[j] - means[k, c + j] * sg
        dmeans[k, c + j] -= icf[k, li] * sg


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
            for c in range(0, r - OCTET + 1, OCTET):
                dl0 = dl1 = dl2 = dl3 = dl4 = dl5 = dl6 = dl7 = 0.0
                for i in range(n):
                    g = z[i]
                    dl0 += g * xt[c, i]
                    dl1 += g * xt[c + 1, i]
                    dl2 += g * xt[c + 2, i]
                    dl3 += g * xt[c + 3, i]
                    dl4 += g * xt[c + 4, i]
                    dl5 += g * xt[c + 5, i]
                    dl6 += g * xt[c + 6, i]
                    dl7 += g * xt[c + 7, i]
                _lower_adjoints(means, icf, dmeans, dicf, k, r, c, sg,
                                (dl0, dl1, dl2, dl3, dl4, dl5, dl6, dl7))
            for c in range(r - r % OCTET, r):
                dl = 0.0
                for i in range(n):
                    dl += z[i] * xt[c, i]
                _lower_adjoints(means, icf, dmeans, dicf, k, r, c, sg, (dl,))
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
