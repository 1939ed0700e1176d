"""ADBench's GMM objective (Gaussian mixture log-likelihood with a Wishart prior).

Written three ways with one formula: an allocation-free Numba kernel (loops, scratch buffers
passed in) that adcore differentiates, a hand-written Numba gradient (the reference), and a
numpy-style version run by adcore.tape and the peers (``xp`` is numpy, autograd.numpy,
jax.numpy or torch). Reported: gradient time, gradient/objective time ratio, first-call
(compile) time, and every gradient's error against the hand-written one; on ADBench's test
instance the objective is checked against ADBench's value and the gradients against central
finite differences.
"""
import math
import os
from pathlib import Path

import numba
import numpy as np

import adcore
from adcore import Const, Duplicated, ReverseWithPrimal
from adcore import tape

from . import peers
from .kernels import logsumexp
from .measure import central_fd, rel_err, traced_bytes
from .rows import failed, row, skipped
from .timing import first_call

W = "gmm"

# ADBench's gmm_test_d2_K3_n1.txt (MIT licence, microsoft/ADBench), whose objective is:
TEST_F = 8.07380408004975791
TEST_INSTANCE = """2 3 1
-0.649014
1.181166
-0.758453
0.092339 0.186260
0.345561 0.396767
0.538817 0.419195
0.586443 -0.851887 0.800321
-1.509405 0.875874 -0.242790
0.166813 -1.965419 -1.270071
1.175171 2.029160
1.000000 0
"""


# -- data ----------------------------------------------------------------------------------
class Instance:
    """Parameters (alphas (K,), means (K, d), icf (K, d(d+1)/2)), points x (n, d), gamma, m."""

    def __init__(self, alphas, means, icf, x, gamma, m, source):
        self.alphas, self.means, self.icf, self.x = alphas, means, icf, x
        self.gamma, self.m, self.source = float(gamma), float(m), source
        self.K, self.d = means.shape
        self.n = x.shape[0]

    @property
    def params(self):
        return self.alphas, self.means, self.icf

    def label(self):
        return f"d={self.d} K={self.K} n={self.n} ({self.source})"


def parse(text, source):
    """An Instance from ADBench's GMM text format (a replicated single point is expanded)."""
    tok = text.split()
    d, K, n = (int(t) for t in tok[:3])
    vals = np.array(tok[3:], dtype=np.float64)
    ntri = d * (d + 1) // 2
    p = 0
    alphas = vals[p:p + K]; p += K
    means = vals[p:p + K * d].reshape(K, d); p += K * d
    icf = vals[p:p + K * ntri].reshape(K, ntri); p += K * ntri
    rows = (len(vals) - p - 2) // d
    x = vals[p:p + rows * d].reshape(rows, d); p += rows * d
    if rows == 1 and n > 1:
        x = np.repeat(x, n, axis=0)
    return Instance(alphas.copy(), means.copy(), icf.copy(), x.copy(), vals[p], vals[p + 1], source)


def adbench_dir():
    """ADBench's data folder: $ADBENCH_DIR, else shared/adbench beside the repository."""
    env = os.environ.get("ADBENCH_DIR")
    path = Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "adbench"
    return path if path.is_dir() else None


def instance(K, n=1000, d=2, seed=0):
    """ADBench's gmm_1k_d2_K{K} instance (its first n points) when the file is at hand,
    else one generated from ``seed`` the way ADBench's generator does."""
    folder = adbench_dir()
    path = folder / f"gmm_1k_d{d}_K{K}.txt" if folder else None
    if path is not None and path.exists() and n <= 1000:
        inst = parse(path.read_text(), "ADBench file")
        inst.x = inst.x[:n].copy()
        inst.n = n
        return inst
    rng = np.random.default_rng(seed)
    ntri = d * (d + 1) // 2
    return Instance(rng.standard_normal(K), rng.uniform(size=(K, d)), rng.standard_normal((K, ntri)),
                    rng.standard_normal((n, d)), 1.0, 0.0, f"generated, seed {seed}")


# -- the Numba kernels ---------------------------------------------------------------------
@numba.njit
def diagonals(icf, d, qdiag, sum_qs):
    """qdiag[k] = exp(q_k) (the diagonal of Q_k), sum_qs[k] = sum(q_k)."""
    for k in range(icf.shape[0]):
        s = 0.0
        for j in range(d):
            s += icf[k, j]
            qdiag[k, j] = math.exp(icf[k, j])
        sum_qs[k] = s


@numba.njit
def constant(n, d, K, gamma, m):
    """The terms that depend on no parameter: -n d/2 log(2 pi) - K (N d (log gamma - log(2)/2)
    - log Gamma_d(N/2))."""
    N = d + m + 1.0
    lgd = 0.25 * d * (d - 1) * math.log(math.pi)
    for j in range(1, d + 1):
        lgd += math.lgamma(0.5 * N + 0.5 * (1 - j))
    C = N * d * (math.log(gamma) - 0.5 * math.log(2.0)) - lgd
    return -n * d * 0.5 * math.log(2.0 * math.pi) - K * C


@numba.njit
def objective(alphas, means, icf, x, gamma, m, qdiag, sum_qs, xc, qxc, main):
    """The GMM objective; qdiag (K, d), sum_qs (K,), xc (d,), qxc (d,), main (K,) are scratch."""
    n, d = x.shape
    K = alphas.shape[0]
    diagonals(icf, d, qdiag, sum_qs)
    slse = 0.0
    for i in range(n):
        for k in range(K):
            for j in range(d):
                xc[j] = x[i, j] - means[k, j]
                qxc[j] = qdiag[k, j] * xc[j]
            li = d
            for c in range(d):
                for r in range(c + 1, d):
                    qxc[r] += icf[k, li] * xc[c]
                    li += 1
            sq = 0.0
            for j in range(d):
                sq += qxc[j] * qxc[j]
            main[k] = alphas[k] + sum_qs[k] - 0.5 * sq
        slse += logsumexp(main)
    return constant(n, d, K, gamma, m) + slse - n * logsumexp(alphas) + prior(icf, d, gamma, m, qdiag, sum_qs)


@numba.njit
def prior(icf, d, gamma, m, qdiag, sum_qs):
    """The Wishart prior's terms that depend on the parameters."""
    total = 0.0
    for k in range(icf.shape[0]):
        fro = 0.0
        for j in range(d):
            fro += qdiag[k, j] * qdiag[k, j]
        for j in range(d, icf.shape[1]):
            fro += icf[k, j] * icf[k, j]
        total += 0.5 * gamma * gamma * fro - m * sum_qs[k]
    return total


@numba.njit
def gradient(alphas, means, icf, x, gamma, m, qdiag, sum_qs, xcs, zs, main, dalphas, dmeans, dicf):
    """Hand-written gradient: adds d objective / d (alphas, means, icf) into the d-arrays and
    returns the objective; xcs, zs (K, d) are scratch besides the objective's."""
    # The per-point forward below repeats the objective's on purpose: a shared helper taking
    # row views (xcs[k], zs[k]) made this reference 2.7x slower (views in the hot loop).
    n, d = x.shape
    K = alphas.shape[0]
    diagonals(icf, d, qdiag, sum_qs)
    slse = 0.0
    for i in range(n):
        for k in range(K):
            for j in range(d):
                xcs[k, j] = x[i, j] - means[k, j]
                zs[k, j] = qdiag[k, j] * xcs[k, j]
            li = d
            for c in range(d):
                for r in range(c + 1, d):
                    zs[k, r] += icf[k, li] * xcs[k, c]
                    li += 1
            sq = 0.0
            for j in range(d):
                sq += zs[k, j] * zs[k, j]
            main[k] = alphas[k] + sum_qs[k] - 0.5 * sq
        lse = logsumexp(main)
        slse += lse
        for k in range(K):
            w = math.exp(main[k] - lse)          # d lse / d main_k; d main_k / d z = -z
            dalphas[k] += w
            li = d
            for c in range(d):
                dz = -w * zs[k, c]
                dicf[k, c] += w + dz * xcs[k, c] * qdiag[k, c]
                dxc = dz * qdiag[k, c]
                for r in range(c + 1, d):
                    dzr = -w * zs[k, r]
                    dicf[k, li] += dzr * xcs[k, c]
                    dxc += dzr * icf[k, li]
                    li += 1
                dmeans[k, c] -= dxc
    lse_a = logsumexp(alphas)
    wishart = 0.0
    for k in range(K):
        dalphas[k] -= n * math.exp(alphas[k] - lse_a)
        fro = 0.0
        for j in range(d):
            fro += qdiag[k, j] * qdiag[k, j]
            dicf[k, j] += gamma * gamma * qdiag[k, j] * qdiag[k, j] - m
        for j in range(d, icf.shape[1]):
            fro += icf[k, j] * icf[k, j]
            dicf[k, j] += gamma * gamma * icf[k, j]
        wishart += 0.5 * gamma * gamma * fro - m * sum_qs[k]
    return constant(n, d, K, gamma, m) + slse - n * lse_a + wishart


class Kernels:
    """The Numba objective, the hand-written gradient and adcore's gradient on one instance,
    with their scratch buffers and shadows allocated once."""

    LABEL = None        # the per-point layout: rows carry no label

    def __init__(self, inst):
        self.inst = inst
        K, d = inst.K, inst.d
        self.points = inst.x
        self.functions = objective, gradient
        self.scratch = (np.zeros((K, d)), np.zeros(K), np.zeros(d), np.zeros(d), np.zeros(K))
        self.hand_scratch = (np.zeros((K, d)), np.zeros(K), np.zeros((K, d)), np.zeros((K, d)),
                             np.zeros(K))
        self.grads = tuple(np.zeros_like(p) for p in inst.params)
        self.shadows = tuple(np.zeros_like(s) for s in self.scratch)

    def _args(self):
        i = self.inst
        return i.alphas, i.means, i.icf, self.points, i.gamma, i.m

    def objective(self):
        return self.functions[0](*self._args(), *self.scratch)

    def hand(self):
        """(objective, gradient) from the hand-written kernel."""
        for g in self.grads:
            g[...] = 0.0
        val = self.functions[1](*self._args(), *self.hand_scratch, *self.grads)
        return val, self.grads

    def adcore(self):
        """(objective, gradient) from adcore's reverse mode of the objective."""
        for g in self.grads + self.shadows:
            g[...] = 0.0
        i = self.inst
        _, val = adcore.autodiff(
            ReverseWithPrimal, self.functions[0],
            *(Duplicated(p, g) for p, g in zip(i.params, self.grads)), Const(self.points),
            Const(i.gamma), Const(i.m), *(Duplicated(s, ds) for s, ds in zip(self.scratch, self.shadows)))
        return val, self.grads


# -- the numpy-style version (adcore.tape, autograd, JAX, PyTorch) ---------------------------
def tri_matrix(d):
    """(d(d-1)/2, d*d) 0/1 matrix taking the lower entries of icf (column by column) to the
    row-major positions of the strictly lower triangular L."""
    pairs = [(r, c) for c in range(d) for r in range(c + 1, d)]
    T = np.zeros((len(pairs), d * d))
    for li, (r, c) in enumerate(pairs):
        T[li, r * d + c] = 1.0
    return T


def objective_xp(xp, alphas, means, icf, x, tri, gamma, m):
    """The same objective with array operations of the numpy-like module ``xp``."""
    n, d = x.shape
    K = alphas.shape[0]
    q, lower = icf[:, :d], icf[:, d:]
    D = xp.exp(q)
    sum_qs = xp.sum(q, axis=1)
    L = xp.reshape(lower @ tri, (K, d, d))
    xc = x[None, :, :] - means[:, None, :]                           # (K, n, d)
    z = D[:, None, :] * xc + xc @ xp.swapaxes(L, 1, 2)
    main = (alphas + sum_qs)[:, None] - 0.5 * xp.sum(z * z, axis=2)  # (K, n)
    mx = xp.amax(main, axis=0, keepdims=True)
    slse = xp.sum(mx[0] + xp.log(xp.sum(xp.exp(main - mx), axis=0)))
    ma = xp.amax(alphas, axis=0, keepdims=True)
    lse_a = ma[0] + xp.log(xp.sum(xp.exp(alphas - ma)))
    prior = 0.5 * gamma ** 2 * (xp.sum(D * D) + xp.sum(lower * lower)) - m * xp.sum(sum_qs)
    return constant(n, d, K, gamma, m) + slse - n * lse_a + prior


def engines(inst):
    """{name: (objective(), withgradient()) or a skip note}: the tape engine and the peers,
    all running ``objective_xp`` on ``inst``."""
    tri = tri_matrix(inst.d)

    def f(xp, alphas, means, icf, x, tri):
        return objective_xp(xp, alphas, means, icf, x, tri, inst.gamma, inst.m)

    def tape_grad():
        val, g = tape.withgradient(lambda *p: f(np, *p, inst.x, tri), *inst.params)
        return float(val), g
    out = {"adcore.tape (numpy)": (lambda: f(np, *inst.params, inst.x, tri), tape_grad)}
    out.update(peers.engines(f, inst.params, (inst.x, tri)))
    return out


# -- checks on ADBench's test instance -------------------------------------------------------


def check_rows(layouts=()):
    """Rows checking the objective value and each gradient on ADBench's test instance;
    ``layouts`` are further ``Kernels`` classes (with a ``LABEL``) checked the same way."""
    inst = parse(TEST_INSTANCE, "ADBench test")
    case = f"test instance {inst.label()}"
    rows = []
    for layout in (Kernels, *layouts):
        rows += _layout_checks(layout(inst), case)
    val, hand = Kernels(inst).hand()
    for name, eng in engines(inst).items():
        if isinstance(eng, str):
            continue
        try:
            v, g = eng[1]()
            rows.append(row(W, case, name, err=max(rel_err(g, hand), abs(v - val) / abs(val)),
                            tol=1e-10, note="vs hand-written"))
        except Exception as exc:
            rows.append(failed(W, case, name, exc))
    return rows


def _labelled(name, kern):
    return f"{name} ({kern.LABEL})" if kern.LABEL else name


def _layout_checks(kern, case):
    """One layout's objective against ADBench's value, its hand-written gradient against
    central finite differences, adcore's against both."""
    rows = []
    val = kern.objective()
    err = abs(val - TEST_F) / abs(TEST_F)
    rows.append(row(W, case, _labelled("Numba objective", kern), err=err, tol=1e-12,
                    check=f"f={val:.12f} vs ADBench {TEST_F:.12f}" + (" ok" if err < 1e-12 else " FAIL")))
    fd = central_fd(kern.objective, list(kern.inst.params))
    _, hand = kern.hand()
    hand = [g.copy() for g in hand]
    rows.append(row(W, case, _labelled("hand-written Numba gradient", kern), err=rel_err(hand, fd),
                    tol=1e-7, note="vs central finite differences"))
    try:
        aval, ad = kern.adcore()
        err = max(rel_err(ad, hand), abs(aval - val) / abs(val))
        rows.append(row(W, case, _labelled("adcore gradient", kern), err=err, tol=1e-10,
                        note=f"vs hand-written; vs central FD {rel_err(ad, fd):.1e}"))
    except Exception as exc:
        rows.append(failed(W, case, _labelled("adcore gradient", kern), exc))
    return rows


# -- timing ------------------------------------------------------------------------------------
def _layout_rows(kern, case, sampler):
    """One layout's timed rows (objective, hand-written, adcore) and its (objective value,
    hand-written gradient, hand-written gradient's timing)."""
    rows = []
    t_first_obj, val = first_call(kern.objective)
    t_obj = sampler.time(kern.objective)
    first_hand, _ = first_call(kern.hand)
    t_hand = sampler.time(kern.hand)
    _, hand = kern.hand()
    hand = [g.copy() for g in hand]
    rows.append(row(W, case, _labelled("Numba objective", kern), t_obj, first_call_s=t_first_obj,
                    note="the primal kernel"))
    rows.append(row(W, case, _labelled("hand-written Numba gradient", kern), t_hand, vs_ref=1.0,
                    grad_obj=t_hand.median / t_obj.median, first_call_s=first_hand,
                    alloc_bytes=traced_bytes(kern.hand), note="reference"))
    try:
        first_ad, (aval, ad) = first_call(kern.adcore)
        err = max(rel_err(ad, hand), abs(aval - val) / abs(val))
        t_ad = sampler.time(kern.adcore)
        rows.append(row(W, case, _labelled("adcore gradient", kern), t_ad,
                        vs_ref=t_ad.median / t_hand.median, grad_obj=t_ad.median / t_obj.median,
                        first_call_s=first_ad, cached_bytes=adcore.last_cached_bytes(),
                        alloc_bytes=traced_bytes(kern.adcore), err=err, tol=1e-10))
    except Exception as exc:
        rows.append(failed(W, case, _labelled("adcore gradient", kern), exc))
    return rows, (val, hand, t_hand)


def time_rows(inst, sampler, layouts=()):
    """Timed rows for one instance: objective, hand-written and adcore in this module's
    layout and in each of ``layouts`` (each against its own objective and hand-written
    gradient), then the tape engine and the peers."""
    case = inst.label()
    rows, (val, hand, t_hand) = _layout_rows(Kernels(inst), case, sampler)
    for layout in layouts:
        rows += _layout_rows(layout(inst), case, sampler)[0]
    for name, eng in engines(inst).items():
        if isinstance(eng, str):
            rows.append(skipped(W, case, name, eng))
            continue
        obj, grad = eng
        try:
            first_g, (v, g) = first_call(grad)
            err = max(rel_err(g, hand), abs(v - val) / abs(val))
            t_o = sampler.time(obj)
            t_g = sampler.time(grad)
            alloc = traced_bytes(grad) if name in ("adcore.tape (numpy)", "autograd") else None
            rows.append(row(W, case, name, t_g, vs_ref=t_g.median / t_hand.median,
                            grad_obj=t_g.median / t_o.median, first_call_s=first_g,
                            alloc_bytes=alloc, err=err, tol=1e-9))
        except Exception as exc:
            rows.append(failed(W, case, name, exc))
    return rows


def run(config, layouts=()):
    """Timings for K=5 (and K=10 unless quick) with n = 1000*size points (the first calls
    compile), then the checks on ADBench's test instance; ``layouts`` as for
    :func:`time_rows`."""
    n = max(2, int(1000 * config.size))
    rows = []
    for K in ((5,) if config.quick else (5, 10)):
        rows += time_rows(instance(K, n), config.sampler, layouts)
    return rows + check_rows(layouts)
