"""Kernel benchmarks: primal, adcore gradient and hand-written gradients, side by side.

The hand-written gradient is a fused Numba loop (libm's scalar math functions) and, where
numpy's vectorised ufuncs may beat it, a numpy one too; the faster of the two is the
reference.  Medians of several runs after warm-up; ratios gradient/primal and
adcore/hand-written;
bytes the reverse pass caches per call; first-call compile time of each gradient; and the
resident memory over 100,000 gradient calls of an allocating kernel.
"""
import math

import numba
import numpy as np

import adcore
from adcore import Duplicated, Reverse

from .timing import default_sampler, first_call


# -- sum(sin(x) * x * x) -----------------------------------------------------------------
@numba.njit
def sinxx(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += math.sin(x[i]) * x[i] * x[i]
    return s


@numba.njit
def sinxx_grad(x, dx):
    for i in range(x.shape[0]):
        s, c = math.sin(x[i]), math.cos(x[i])
        dx[i] += c * x[i] * x[i] + 2.0 * s * x[i]


def sinxx_grad_numpy(x, dx):
    dx += x * (x * np.cos(x) + 2.0 * np.sin(x))


# -- dense tanh layer --------------------------------------------------------------------
@numba.njit
def dense(W, b, x, y):
    for i in range(W.shape[0]):
        s = b[i]
        for j in range(W.shape[1]):
            s += W[i, j] * x[j]
        y[i] = math.tanh(s)
    t = 0.0
    for i in range(y.shape[0]):
        t += y[i]
    return t


def dense_grad_numpy(W, b, x, y, dW, db, dx):
    g = 1.0 - np.tanh(W @ x + b) ** 2
    db += g
    dW += np.outer(g, x)
    dx += g @ W


@numba.njit
def dense_grad(W, b, x, y, dW, db, dx):
    for i in range(W.shape[0]):
        s = b[i]
        for j in range(W.shape[1]):
            s += W[i, j] * x[j]
        g = 1.0 - math.tanh(s) ** 2
        db[i] += g
        for j in range(W.shape[1]):
            dW[i, j] += g * x[j]
            dx[j] += g * W[i, j]


# -- in-place stencil --------------------------------------------------------------------
@numba.njit
def stencil(u, steps):
    n = u.shape[0]
    for t in range(steps):
        for i in range(1, n - 1):
            u[i] = 0.25 * u[i - 1] + 0.5 * u[i] + 0.25 * u[i + 1]
    s = 0.0
    for i in range(n):
        s += u[i] * u[i]
    return s


@numba.njit
def stencil_grad(u, steps, du):
    # forward, keeping nothing: the sweep is linear and invertible only with the old
    # values, so the hand-written gradient stores each step's input (n per step)
    n = u.shape[0]
    hist = np.empty((steps + 1, n))
    hist[0] = u
    for t in range(steps):
        for i in range(1, n - 1):
            u[i] = 0.25 * u[i - 1] + 0.5 * u[i] + 0.25 * u[i + 1]
        hist[t + 1] = u
    g = 2.0 * u
    for t in range(steps - 1, -1, -1):
        for i in range(n - 2, 0, -1):
            gi = g[i]
            g[i] = 0.5 * gi
            g[i - 1] += 0.25 * gi
            g[i + 1] += 0.25 * gi
    for i in range(n):
        du[i] += g[i]


# -- logsumexp ---------------------------------------------------------------------------
@numba.njit
def _max_and_sum(x):
    """m = max(x) and s = sum(exp(x - m))."""
    m = x[0]
    for i in range(1, x.shape[0]):
        if x[i] > m:
            m = x[i]
    s = 0.0
    for i in range(x.shape[0]):
        s += math.exp(x[i] - m)
    return m, s


@numba.njit
def logsumexp(x):
    m, s = _max_and_sum(x)
    return m + math.log(s)


@numba.njit
def logsumexp_grad(x, dx):
    m, s = _max_and_sum(x)
    for i in range(x.shape[0]):
        dx[i] += math.exp(x[i] - m) / s


def logsumexp_grad_numpy(x, dx):
    e = np.exp(x - x.max())
    dx += e / e.sum()


# -- matrix product (BLAS inside the kernel) ---------------------------------------------------
@numba.njit
def matmul(A, B):
    C = A @ B
    return np.sum(C * C)


def matmul_grad_numpy(A, B, dA, dB):
    C = A @ B
    dA += 2.0 * (C @ B.T)
    dB += 2.0 * (A.T @ C)


# -- double recursion: calls differentiated as calls ------------------------------------------
@numba.njit
def fib(x, n):
    if n < 2:
        return x[0] * x[n]
    return fib(x, n - 1) + fib(x, n - 2)


@numba.njit
def fib_grad(x, n, dx):
    if n < 2:
        dx[0] += x[n]
        dx[n] += x[0]
        return
    fib_grad(x, n - 1, dx)
    fib_grad(x, n - 2, dx)


# -- a kernel that allocates temporaries ----------------------------------------------------
@numba.njit
def allocating(a, b):
    t = np.tanh(a * b + 0.5)
    return np.sum(t * t)


def allocating_grad_numpy(a, b, da, db):
    t = np.tanh(a * b + 0.5)
    g = 2.0 * t * (1.0 - t * t)
    da += g * b
    db += g * a


@numba.njit
def allocating_grad(a, b, da, db):
    for i in range(a.shape[0]):
        t = math.tanh(a[i] * b[i] + 0.5)
        g = 2.0 * t * (1.0 - t * t)
        da[i] += g * b[i]
        db[i] += g * a[i]


def fib_leaves(n):
    a, b = 1, 1
    for _ in range(n - 1):
        a, b = b, a + b
    return b


def resident_memory(calls=100_000, n=64):
    """Resident memory (KiB) before and after ``calls`` gradient calls of an allocating kernel."""
    import resource
    rng = np.random.default_rng(0)
    a, b, da, db = rng.standard_normal(n), rng.standard_normal(n), np.zeros(n), np.zeros(n)

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize() // 1024

    for _ in range(1000):                     # warm-up: compile, allocator pools
        adcore.autodiff(Reverse, allocating, Duplicated(a, da), Duplicated(b, db))
    before = rss()
    for _ in range(calls):
        adcore.autodiff(Reverse, allocating, Duplicated(a, da), Duplicated(b, db))
    return dict(calls=calls, before_kib=before, after_kib=rss())


def workloads(quick=False):
    rng = np.random.default_rng(0)
    n = 100_000 if quick else 1_000_000
    x = rng.standard_normal(n)
    dx = np.zeros(n)
    m = 128 if quick else 512
    W, b, xv, y = rng.standard_normal((m, m)) / m, rng.standard_normal(m), rng.standard_normal(m), np.zeros(m)
    dW, db, dxv, dy = np.zeros_like(W), np.zeros(m), np.zeros(m), np.zeros(m)
    nu = 10_000 if quick else 100_000
    u0 = rng.standard_normal(nu)
    u, du = u0.copy(), np.zeros(nu)

    def reset_u():
        u[...] = u0

    k = 64 if quick else 256
    A, B = rng.standard_normal((k, k)), rng.standard_normal((k, k))
    dA, dB = np.zeros_like(A), np.zeros_like(B)
    na = n // 10
    depth = 15 if quick else 21                # 987 or 17,711 leaves
    xf, dxf = np.array([0.9, 1.1]), np.zeros(2)
    # (not a, b: the dense layer's lambdas read its own b when they run)
    p, q, dp, dq = rng.standard_normal(na), rng.standard_normal(na), np.zeros(na), np.zeros(na)

    return [
        ("sum(sin(x)*x*x)", f"n={n}",
         lambda: sinxx(x),
         lambda: adcore.autodiff(Reverse, sinxx, Duplicated(x, dx)),
         lambda: sinxx_grad(x, dx), lambda: sinxx_grad_numpy(x, dx)),
        ("dense tanh layer", f"{m}x{m}",
         lambda: dense(W, b, xv, y),
         lambda: adcore.autodiff(Reverse, dense, Duplicated(W, dW), Duplicated(b, db),
                                 Duplicated(xv, dxv), Duplicated(y, dy)),
         lambda: dense_grad(W, b, xv, y, dW, db, dxv),
         lambda: dense_grad_numpy(W, b, xv, y, dW, db, dxv)),
        ("in-place stencil", f"n={nu}, 10 steps",
         lambda: (reset_u(), stencil(u, 10)),
         lambda: (reset_u(), adcore.autodiff(Reverse, stencil, Duplicated(u, du), 10)),
         lambda: (reset_u(), stencil_grad(u, 10, du)), None),
        ("logsumexp", f"n={n}",
         lambda: logsumexp(x),
         lambda: adcore.autodiff(Reverse, logsumexp, Duplicated(x, dx)),
         lambda: logsumexp_grad(x, dx), lambda: logsumexp_grad_numpy(x, dx)),
        ("matrix product", f"{k}x{k}, vs numpy",
         lambda: matmul(A, B),
         lambda: adcore.autodiff(Reverse, matmul, Duplicated(A, dA), Duplicated(B, dB)),
         lambda: matmul_grad_numpy(A, B, dA, dB), None),
        ("recursive fib", f"{fib_leaves(depth)} leaves",
         lambda: fib(xf, depth),
         lambda: adcore.autodiff(Reverse, fib, Duplicated(xf, dxf), depth),
         lambda: fib_grad(xf, depth, dxf), None),
        ("allocating kernel", f"n={na}",
         lambda: allocating(p, q),
         lambda: adcore.autodiff(Reverse, allocating, Duplicated(p, dp), Duplicated(q, dq)),
         lambda: allocating_grad(p, q, dp, dq), lambda: allocating_grad_numpy(p, q, dp, dq)),
    ]


def run(sampler, quick=False):
    """Measure every kernel workload with ``sampler``; returns a list of dicts with the
    Timings ``primal``, ``adcore``, ``hand`` (Numba) and ``hand_numpy`` (or None), and the
    ratios, ``adcore_over_hand`` against the faster hand-written gradient."""
    rows = []
    for name, size, primal, grad, hand, hand_numpy in workloads(quick):
        primal()
        first, _ = first_call(grad)
        tp = sampler.time(primal)
        tg = sampler.time(grad)
        cached = adcore.last_cached_bytes()
        th = sampler.time(hand)
        tn = sampler.time(hand_numpy) if hand_numpy is not None else None
        best = min(th.median, tn.median) if tn is not None else th.median
        rows.append(dict(workload=name, size=size, primal=tp, adcore=tg, hand=th, hand_numpy=tn,
                         reference=best, grad_over_primal=tg.median / tp.median,
                         adcore_over_hand=tg.median / best, cached_bytes=cached,
                         first_call_s=first))
    return rows


def report(rows):
    head = (f"{'kernel':<18} {'size':<18} {'primal ms':>10} {'adcore ms':>10} {'hand ms':>9} "
            f"{'grad/primal':>11} {'adcore/hand':>11} {'cached B':>10} {'compile s':>9}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['workload']:<18} {r['size']:<18} {r['primal'].median * 1e3:>10.3f} "
                     f"{r['adcore'].median * 1e3:>10.3f} {r['hand'].median * 1e3:>9.3f} "
                     f"{r['grad_over_primal']:>11.2f} {r['adcore_over_hand']:>11.2f} "
                     f"{r['cached_bytes']:>10} {r['first_call_s']:>9.2f}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(run(default_sampler(quick=False))))
    mem = resident_memory()
    print(f"resident memory over {mem['calls']} gradient calls of an allocating kernel: "
          f"{mem['before_kib']} KiB -> {mem['after_kib']} KiB")
