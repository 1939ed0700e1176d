"""Kernels written with ``prange`` (``numba.njit(parallel=True)``): the primal and adcore's
gradient at one thread and at every core, next to the fastest serial hand-written gradient.

    python -m bench parallel [--quick]

Three kernels: a GMM log-likelihood summed over points (diagonal covariances), a
Lennard-Jones energy over all pairs, and a 2-D diffusion stencil over 10 steps, written with
rows ``v[i, j]`` (each iteration writes its row and reads the rows beside it: checked at each
call, the reverse runs on threads with one shared shadow) and on the grid stored flat (every
write at the loop index; ``u``'s shadow is private per thread).  Each gradient is
checked against the gradient of the same source compiled with ``parallel=False``.  Each
chunk of a parallel loop keeps its values on a tape of its own for its reverse
(``ADCORE_CHUNK_TAPES=0`` runs its iterations again instead), so the rows at one thread
show what the parallel machinery costs and those at every core what the threads give back.  The digits CNN's training epoch with ``Duplicated`` at both thread counts closes the
table.
"""
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile

import numba
import numpy as np
from numba import prange

import adcore
from adcore import Const, Duplicated, Reverse

from . import peers
from .measure import rel_err
from .registry import workload
from .row_threads import at_threads
from .rows import failed, row, skipped
from .timing import Timing

W = "parallel"


@numba.njit
def component_term(alphas, means, logq, q, x, i, k):
    """alpha_k + sum_j logq_kj - |q_k * (x_i - mu_k)|^2 / 2."""
    s = alphas[k]
    for j in range(x.shape[1]):
        z = q[k, j] * (x[i, j] - means[k, j])
        s += logq[k, j] - 0.5 * z * z
    return s


def gmm_loglik(alphas, means, logq, x):
    """sum_i logsumexp_k(component_term(i, k)), q = exp(logq)."""
    K = alphas.shape[0]
    q = np.exp(logq)                       # a parallel array expression
    total = 0.0
    for i in prange(x.shape[0]):
        best = -1e300
        for k in range(K):
            best = max(best, component_term(alphas, means, logq, q, x, i, k))
        acc = 0.0
        for k in range(K):
            acc += math.exp(component_term(alphas, means, logq, q, x, i, k) - best)
        total += best + math.log(acc)
    return total


def lennard_jones(pos):
    """sum over pairs i < j of 4 (r^-12 - r^-6)."""
    n = pos.shape[0]
    energy = 0.0
    for i in prange(n):
        for j in range(i + 1, n):
            d2 = 0.0
            for k in range(3):
                d = pos[i, k] - pos[j, k]
                d2 += d * d
            inv6 = 1.0 / (d2 * d2 * d2)
            energy += 4.0 * (inv6 * inv6 - inv6)
    return energy


def stencil(u, v, steps):
    """``steps`` explicit diffusion steps with a sine source on the interior of ``u``."""
    m, p = u.shape
    for _ in range(steps):
        for i in prange(1, m - 1):
            for j in range(1, p - 1):
                lap = u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4.0 * u[i, j]
                v[i, j] = u[i, j] + 0.1 * lap + 0.01 * math.sin(u[i, j])
        for i in prange(1, m - 1):
            for j in range(1, p - 1):
                u[i, j] = v[i, j]
    return np.sum(u * u)


def flat_stencil(u, v, p, steps):
    """The same steps on the grid stored flat (``u[i * p + j]``), one ``prange`` over all
    cells: every write is at the loop index, so its reverse runs on threads."""
    n = u.shape[0]
    for _ in range(steps):
        for k in prange(n):
            i, j = k // p, k % p
            if 0 < i < n // p - 1 and 0 < j < p - 1:
                lap = u[k - p] + u[k + p] + u[k - 1] + u[k + 1] - 4.0 * u[k]
                v[k] = u[k] + 0.1 * lap + 0.01 * math.sin(u[k])
            else:
                v[k] = u[k]
        for k in prange(n):
            u[k] = v[k]
    return np.sum(u * u)


@numba.njit
def lennard_jones_gradient(pos, grad):
    """Hand-written: the forces, accumulated on both atoms of each pair."""
    n = pos.shape[0]
    grad[:] = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            d0 = pos[i, 0] - pos[j, 0]
            d1 = pos[i, 1] - pos[j, 1]
            d2_ = pos[i, 2] - pos[j, 2]
            d2 = d0 * d0 + d1 * d1 + d2_ * d2_
            inv2 = 1.0 / d2
            inv6 = inv2 * inv2 * inv2
            f = 4.0 * (-12.0 * inv6 * inv6 + 6.0 * inv6) * inv2      # dE/d(d2) * 2
            grad[i, 0] += f * d0
            grad[i, 1] += f * d1
            grad[i, 2] += f * d2_
            grad[j, 0] -= f * d0
            grad[j, 1] -= f * d1
            grad[j, 2] -= f * d2_
    return grad


@numba.njit
def gmm_gradient(alphas, means, logq, x, galphas, gmeans, glogq, s):
    """Hand-written: one pass over the points, the component weights from one logsumexp."""
    n, d = x.shape
    K = alphas.shape[0]
    galphas[:] = 0.0
    gmeans[:] = 0.0
    glogq[:] = 0.0
    q = np.exp(logq)
    for i in range(n):
        best = -1e300
        for k in range(K):
            s[k] = component_term(alphas, means, logq, q, x, i, k)
            best = max(best, s[k])
        acc = 0.0
        for k in range(K):
            s[k] = math.exp(s[k] - best)
            acc += s[k]
        for k in range(K):
            w = s[k] / acc
            galphas[k] += w
            for j in range(d):
                c = x[i, j] - means[k, j]
                z = q[k, j] * c
                gmeans[k, j] += w * z * q[k, j]
                glogq[k, j] += w * (1.0 - z * z)
    return galphas


def torch_gmm(torch):
    """PyTorch: the GMM log-likelihood over all points at once (n x K x d terms)."""
    def grad(alphas, means, logq, x):
        a, m, lq = (torch.tensor(v, requires_grad=True) for v in (alphas, means, logq))
        z = torch.exp(lq)[None] * (torch.from_numpy(x)[:, None, :] - m[None])
        terms = a[None] + lq.sum(1)[None] - 0.5 * (z * z).sum(2)
        torch.logsumexp(terms, 1).sum().backward()
        return a.grad.numpy(), m.grad.numpy(), lq.grad.numpy()
    return grad


def torch_lennard_jones(torch):
    """PyTorch: the energy over the pairs i < j, gathered by index."""
    def grad(pos):
        p = torch.tensor(pos, requires_grad=True)
        i, j = torch.triu_indices(p.shape[0], p.shape[0], 1)
        d2 = ((p[i] - p[j]) ** 2).sum(1)
        inv6 = 1.0 / (d2 * d2 * d2)
        (4.0 * (inv6 * inv6 - inv6)).sum().backward()
        return (p.grad.numpy(),)
    return grad


def torch_stencil(torch, flat=False):
    """PyTorch: the stencil's steps on the interior as slices of the grid."""
    def grad(u0, v0, *rest):
        steps, m = rest[-1], (rest[0] if flat else u0.shape[0])
        u = torch.tensor(u0, requires_grad=True)
        cur = u.reshape(m, -1)
        for _ in range(steps):
            c = cur[1:-1, 1:-1]
            lap = cur[:-2, 1:-1] + cur[2:, 1:-1] + cur[1:-1, :-2] + cur[1:-1, 2:] - 4.0 * c
            cur = cur.clone()
            cur[1:-1, 1:-1] = c + 0.1 * lap + 0.01 * torch.sin(c)
        (cur * cur).sum().backward()
        return (u.grad.numpy(),)
    return grad


class Case:
    """One kernel: ``args()`` fresh arguments, ``wrt`` how many leading ones are differentiated,
    ``hand`` an optional serial hand-written gradient returning the same tuple, ``torch`` a
    function of the torch module giving PyTorch's gradient (the same tuple), ``jax`` a
    function of the arguments giving ``(objective in bench.parallel_jax, its arrays, its
    integers)``."""

    def __init__(self, name, size, source, args, wrt, hand=None, torch=None, jax=None):
        self.name, self.size, self.wrt, self.hand, self.torch = name, size, wrt, hand, torch
        self.jax = jax
        self.parallel, self.serial = numba.njit(parallel=True)(source), numba.njit(source)
        self.args = args

    def annotated(self, values):
        return [v if k < self.wrt else Const(v) for k, v in enumerate(values)]

    def gradient(self, kernel, values):
        return adcore.gradient(Reverse, kernel, *self.annotated(values))[:self.wrt]


def cases(quick, size):
    rng = np.random.default_rng(0)
    n, d, K = int((10_000 if quick else 100_000) * size), 10, 5
    x = rng.standard_normal((n, d))
    gmm_params = (rng.standard_normal(K), rng.standard_normal((K, d)), 0.1 * rng.standard_normal((K, d)))
    atoms = int((300 if quick else 1000) * size ** 0.5)
    side = int(round(atoms ** (1 / 3))) + 1
    grid = np.array([(a, b, c) for a in range(side) for b in range(side) for c in range(side)][:atoms], float)
    pos = grid * 1.2 + 0.05 * rng.standard_normal((atoms, 3))
    m = int((128 if quick else 256) * size ** 0.5)
    u0 = rng.random((m, m))

    def gmm_hand(alphas, means, logq, x_):
        g = (np.zeros_like(alphas), np.zeros_like(means), np.zeros_like(logq))
        gmm_gradient(alphas, means, logq, x_, *g, np.zeros(K))
        return g

    return [
        Case("GMM log-likelihood", f"n={n}, d={d}, K={K}", gmm_loglik,
             lambda: (*gmm_params, x), 3, gmm_hand, torch_gmm, lambda *v: ("gmm", v, ())),
        Case("Lennard-Jones energy", f"{atoms} atoms", lennard_jones, lambda: (pos.copy(),), 1,
             lambda p: (lennard_jones_gradient(p, np.zeros_like(p)),), torch_lennard_jones,
             lambda p: ("lennard_jones", (p,), ())),
        Case("2-D stencil", f"{m}x{m}, 10 steps", stencil,
             lambda: (u0.copy(), np.zeros_like(u0), 10), 1, torch=torch_stencil,
             jax=lambda u, v, steps: ("stencil", (u,), (u.shape[0], steps))),
        Case("2-D stencil, flat index", f"{m}x{m}, 10 steps", flat_stencil,
             lambda: (u0.ravel().copy(), np.zeros(m * m), m, 10), 1,
             torch=lambda torch: torch_stencil(torch, flat=True),
             jax=lambda u, v, p, steps: ("stencil", (u,), (p, steps))),
    ]


def case_rows(c, sampler, all_threads):
    """The serial hand-written gradient (when there is one), adcore's gradient of the
    ``parallel=False`` build, then the primal and adcore's gradient at 1 thread and at
    ``all_threads`` (medians net of making the arguments)."""
    case = f"{c.name} ({c.size})"
    expected = c.gradient(c.serial, c.args())
    rows, hand = [], None
    if c.hand is not None:
        values = c.args()
        err = max(rel_err(h, e) for h, e in zip(c.hand(*values), expected))
        timing = sampler.time(lambda: c.hand(*values))
        hand = timing.stats()["median"]
        rows.append(row(W, case, "hand-written gradient (serial njit)", timing, vs_ref=1.0,
                        err=err, tol=1e-9, note="reference"))
    primal_at_one = grad_at_one = None
    for threads in sorted({1, all_threads}):
        label = f"{threads} thread" + ("s" if threads > 1 else "")
        got = at_threads(threads, lambda: c.gradient(c.parallel, c.args()))()
        err = max(rel_err(g, e) for g, e in zip(got, expected))
        timed = [c.args, lambda: c.parallel(*c.args()), lambda: c.gradient(c.parallel, c.args())]
        if threads == 1:           # the serial build's gradient beside the parallel one's
            timed.append(lambda: c.gradient(c.serial, c.args()))
        t_args, t_primal, t_grad, *t_serial = at_threads(threads, lambda: sampler.interleaved(timed))()
        setup = t_args.stats()["median"]
        p = max(t_primal.stats()["median"] - setup, 1e-12)
        g = max(t_grad.stats()["median"] - setup, 1e-12)
        if t_serial:
            s = max(t_serial[0].stats()["median"] - setup, 1e-12)
            rows.append(row(W, case, "adcore gradient, parallel=False build", t_serial[0],
                            vs_ref=None if hand is None else s / hand,
                            note=f"the parallel build's gradient at 1 thread takes {g / s:.2f}x this"))
        primal_at_one, grad_at_one = primal_at_one or p, grad_at_one or g
        rows.append(row(W, case, f"primal, {label}", t_primal,
                        note=f"{primal_at_one / p:.2f}x the speed at 1 thread"))
        rows.append(row(W, case, f"adcore gradient, {label}", t_grad, grad_obj=g / p,
                        vs_ref=None if hand is None else g / hand, err=err, tol=1e-9,
                        note=f"{grad_at_one / g:.2f}x the speed at 1 thread; "
                             f"checked against parallel=False"))
    return rows + torch_rows(c, case, sampler, all_threads, expected, hand) + \
        jax_rows(c, case, sampler, all_threads, expected, hand)


def torch_rows(c, case, sampler, all_threads, expected, hand):
    """PyTorch's gradient at 1 thread and at ``all_threads`` (its own intra-op pool)."""
    torch = peers.get("torch")
    if c.torch is None:
        return []
    if torch is None:
        return [skipped(W, case, "PyTorch gradient", peers.why("torch"))]
    grad, values, rows, at_one = c.torch(torch), c.args(), [], None
    try:
        for threads in sorted({1, all_threads}):
            torch.set_num_threads(threads)
            err = max(rel_err(g, e) for g, e in zip(grad(*values), expected))
            timing = sampler.time(lambda: grad(*values))
            t = timing.stats()["median"]
            at_one = at_one or t
            rows.append(row(W, case, f"PyTorch gradient, {threads} thread" + ("s" if threads > 1 else ""),
                            timing, vs_ref=None if hand is None else t / hand, err=err, tol=1e-9,
                            note=f"{at_one / t:.2f}x the speed at 1 thread"))
    finally:
        torch.set_num_threads(1)
    return rows


def digits_rows(sampler, all_threads):
    """One epoch of the digits CNN with ``Duplicated`` (``bench.digits``) at 1 thread and at
    ``all_threads`` (where each batch's rows are split across the threads: ``layers.threads``)."""
    from layers import threads as layers_threads, train
    from optim import Adam, setup
    from . import digits
    try:
        split = digits.data()
    except ImportError:
        return [skipped(W, "digits CNN epoch", "layers, Duplicated: train", digits.MISSING)]
    model = digits.models()["CNN"]
    dup, state = Duplicated(model), setup(Adam(3e-3), model)
    items = digits.epoch_batches(split[0], split[1], 32, np.random.default_rng(0))
    rows, at_one = [], None
    for threads in sorted({1, all_threads}):
        timing = at_threads(threads, lambda: sampler.time(lambda: train(digits.loss, dup, items, state),
                                                            number=1))()
        t = timing.stats()["median"]
        at_one = at_one or t
        rows.append(row(W, f"digits CNN epoch ({len(items)} batches of 32)",
                        f"layers, Duplicated: train, {threads} thread" + ("s" if threads > 1 else ""),
                        timing, note=f"{at_one / t:.2f}x the speed at 1 thread; " +
                        at_threads(threads, lambda: layers_threads(digits.loss, dup, *items[0]))()))
    return rows


@workload(W, "prange kernels: primal and gradient at 1 thread and every core")
def run(config):
    all_threads = numba.config.NUMBA_NUM_THREADS
    rows = []
    for c in cases(config.quick, config.size):
        try:
            rows += case_rows(c, config.sampler, all_threads)
        except Exception as exc:  # a failing case is a failed row, not a crash of the suite
            rows.append(failed(W, c.name, "adcore gradient", exc))
    try:
        rows += digits_rows(config.sampler, all_threads)
    except Exception as exc:
        rows.append(failed(W, "digits CNN epoch", "layers, Duplicated: train", exc))
    return rows


def jax_rows(c, case, sampler, all_threads, expected, hand):
    """JAX's jitted gradient at 1 thread and at ``all_threads``, each in a process of its
    own (``bench.parallel_jax``: XLA reads its thread count at start-up)."""
    if c.jax is None:
        return []
    if importlib.util.find_spec("jax") is None:
        return [skipped(W, case, "JAX gradient (jit)", peers.why("jax"))]
    name, arrays, static = c.jax(*c.args())
    rows, at_one = [], None
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "arguments.npz")
        np.savez(path, static=np.array(static, np.int64), **{f"a{k}": a for k, a in enumerate(arrays)})
        for threads in sorted({1, all_threads}):
            label = f"JAX gradient (jit), {threads} thread" + ("s" if threads > 1 else "")
            done = subprocess.run([sys.executable, "-m", "bench.parallel_jax", path, name, str(threads),
                                   str(max(5, sampler.repeat))], capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                rows.append(failed(W, case, label, RuntimeError(done.stderr.strip().splitlines()[-1])))
                continue
            out = json.loads(done.stdout.strip().splitlines()[-1])
            err = max(rel_err(np.array(g), e) for g, e in zip(out["grads"], expected))
            timing = Timing(tuple(out["seconds"]), 1, 2)
            t = timing.stats()["median"]
            at_one = at_one or t
            rows.append(row(W, case, label, timing, vs_ref=None if hand is None else t / hand, err=err,
                            tol=1e-9, note=f"{at_one / t:.2f}x the speed at 1 thread"))
    return rows
