"""Forward mode (issue 16's ``forward`` workload): on the kernel set and the GMM objective,
the forward derivative (one direction) and vector mode (8 directions in one pass) next to
the primal, and the Hessian-vector product (forward over adcore's reverse IR) next to the
gradient.  Each derivative is checked: the tangent against the gradient's dot product with
the direction, the 8 lanes likewise, the hvp against central differences of the gradient
(tolerance 1e-4: the differences' own error).  For a kernel that overwrites x, x is restored
and its tangents refilled before each call (forward mode writes the tangents of the arrays a
kernel overwrites into them); the other kernels leave both untouched, so neither is copied.

    python -m bench forward
"""
import numba
import numpy as np

import adcore
from adcore import BatchDuplicated, Const, Duplicated, Forward, Reverse

from . import gmm, peers
from .kernels import dense, logsumexp, sinxx, stencil
from .registry import workload
from .rows import failed, row, skipped
from .timing import first_call

W = "forward"
LANES = 8


@numba.njit
def dense_blas(W, X):
    """A tanh layer on a batch through BLAS (``@``): hvp through the product rules' reverses."""
    return np.sum(np.tanh(W @ X))


@numba.njit
def gmm_icf(icf, alphas, means, x, gamma, m, qdiag, sum_qs, xc, qxc, main):
    """The GMM objective as a function of its inverse-covariance factors first."""
    return gmm.objective(alphas, means, icf, x, gamma, m, qdiag, sum_qs, xc, qxc, main)


class Case:
    """One kernel ``f(x, *rest)`` differentiated in its first argument (``inplace``: the
    kernel overwrites x, which each call first restores to ``x0``)."""

    def __init__(self, name, size, f, x, rest, inplace=False, xp_f=None):
        self.name, self.size, self.f, self.x, self.rest, self.inplace = name, size, f, x, rest, inplace
        self.xp_f = xp_f                  # f(xp, x) in a numpy-like module, for JAX's jvp(grad)
        self.x0 = x.copy()
        rng = np.random.default_rng(1)
        self.v = rng.standard_normal(x.shape)
        self.vs = tuple(rng.standard_normal(x.shape) for _ in range(LANES))
        self.dx = np.zeros_like(x)
        self.t = self.v.copy()                            # tangents (written in place if inplace)
        self.ts = tuple(v.copy() for v in self.vs)

    def reset(self, tangents=()):
        """Restore x and refill ``(tangent, direction)`` pairs when the kernel overwrites x."""
        if self.inplace:
            self.x[...] = self.x0
            for t, v in tangents:
                t[...] = v

    def primal(self):
        self.reset()
        return self.f(self.x, *self.rest)

    def forward(self):
        self.reset([(self.t, self.v)])
        return adcore.autodiff(Forward, self.f, Duplicated(self.x, self.t), *map(Const, self.rest))

    def vector(self):
        self.reset(zip(self.ts, self.vs))
        return adcore.autodiff(Forward, self.f, BatchDuplicated(self.x, self.ts), *map(Const, self.rest))

    def gradient(self):
        self.reset()
        self.dx[...] = 0.0
        adcore.autodiff(Reverse, self.f, Duplicated(self.x, self.dx), *map(Const, self.rest))
        return self.dx

    def hvp(self):
        self.reset()
        return adcore.hvp(self.f, self.x, self.v, *self.rest)


def cases(quick, size):
    rng = np.random.default_rng(0)
    n = int((100_000 if quick else 1_000_000) * size)
    x = rng.standard_normal(n)
    m = int((128 if quick else 512) * size ** 0.5)
    W_, b, xv, y = rng.standard_normal((m, m)) / m, rng.standard_normal(m), rng.standard_normal(m), np.zeros(m)
    Xb = rng.standard_normal((m, 32))
    nu = int((10_000 if quick else 100_000) * size)
    inst = gmm.instance(5, max(2, int(10_000 * size)))      # 10x bench gmm's n: per-call overhead small
    K, d = inst.K, inst.d
    scratch = (np.zeros((K, d)), np.zeros(K), np.zeros(d), np.zeros(d), np.zeros(K))
    tri = gmm.tri_matrix(d)
    return [
        Case("sum(sin(x)*x*x)", f"n={n}", sinxx, x, (), xp_f=lambda xp, x: xp.sum(xp.sin(x) * x * x)),
        Case("dense tanh layer", f"{m}x{m}, d/dW", dense, W_, (b, xv, y),
             xp_f=lambda xp, W: xp.sum(xp.tanh(W @ xv + b))),
        Case("dense tanh layer, BLAS", f"{m}x{m} @ {m}x32, d/dW", dense_blas, W_, (Xb,),
             xp_f=lambda xp, W: xp.sum(xp.tanh(W @ Xb))),
        Case("in-place stencil", f"n={nu}, 10 steps", stencil, rng.standard_normal(nu), (10,), inplace=True),
        Case("logsumexp", f"n={n}", logsumexp, x, (),
             xp_f=lambda xp, x: xp.max(x) + xp.log(xp.sum(xp.exp(x - xp.max(x))))),
        Case("GMM objective", f"{inst.label()}, d/dicf", gmm_icf, inst.icf.copy(),
             (inst.alphas, inst.means, inst.x, inst.gamma, inst.m) + scratch,
             xp_f=lambda xp, icf: gmm.objective_xp(xp, inst.alphas, inst.means, icf, inst.x, tri,
                                                   inst.gamma, inst.m)),
    ]


def jax_hvp(c):
    """JAX's Hessian-vector product ``jvp(grad(f))`` of case ``c``, jitted: a function of no
    arguments returning a numpy array; or a note why there is none."""
    jax = peers.get("jax")
    if jax is None:
        return peers.why("jax")
    if c.xp_f is None:
        return "no jax.numpy form (a sequential in-place sweep)"
    import jax.numpy as jnp
    f = lambda x: c.xp_f(jnp, x)                                  # noqa: E731
    hvp = jax.jit(lambda x, v: jax.jvp(jax.grad(f), (x,), (v,))[1])
    x, v = jnp.asarray(c.x0), jnp.asarray(c.v)
    return lambda: np.asarray(hvp(x, v).block_until_ready())


def _rel(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def case_rows(c, sampler):
    """First calls (compiles) and checks, then all timed side by side (interleaved samples,
    so that a change of machine load hits them alike); JAX's hvp where it is installed."""
    case = c.name + ", " + c.size
    first_p, _ = first_call(c.primal)
    first_g, g = first_call(c.gradient)
    g = g.copy()
    derivatives = [("adcore forward, 1 direction", c.forward, lambda t: _rel(t, np.vdot(g, c.v)), 0),
                   ("adcore vector forward, 8 directions", c.vector,
                    lambda t: _rel(t, [np.vdot(g, v) for v in c.vs]), 0),
                   ("adcore hvp (forward over reverse)", c.hvp, lambda hv: _rel(hv, _fd_hvp(c)), 1)]
    checked, rows = [], []
    for impl, fn, err_of, ref in derivatives:
        try:
            first, out = first_call(fn)
            checked.append((impl, fn, err_of(out), ref, first))
        except Exception as exc:                  # reported as a failed check, never a crash
            rows.append(failed(W, case, impl, exc))
    peer, impl = jax_hvp(c), "JAX hvp: jvp(grad) (jit)"
    if isinstance(peer, str):
        rows.append(skipped(W, case, impl, peer))
    else:
        try:
            first, out = first_call(peer)
            checked.append((impl, peer, _rel(out, _fd_hvp(c)), 1, first))
        except Exception as exc:                  # a peer's failure is a row, never a crash
            rows.append(failed(W, case, impl, exc))
    tp, tg, *times = sampler.interleaved([c.primal, c.gradient] + [fn for _, fn, _, _, _ in checked])
    rows = [row(W, case, "Numba primal", tp, first_call_s=first_p, note="reference"),
            row(W, case, "adcore gradient (reverse)", tg, vs_ref=tg.median / tp.median,
                first_call_s=first_g, note="x primal")] + rows
    for (impl, _, err, ref, first), t in zip(checked, times):
        base = (tp, tg)[ref]
        rows.append(row(W, case, impl, t, vs_ref=t.median / base.median, first_call_s=first, err=err,
                        tol=1e-4 if ref else 1e-10, note=("x primal", "x gradient")[ref]))
    return rows


def _fd_hvp(c, eps=1e-4):
    """Central differences of adcore's gradient along v (the hvp's check)."""
    x0 = c.x0.copy()
    grads = []
    for sign in (1, -1):
        c.x0[...] = c.x[...] = x0 + sign * eps * c.v
        grads.append(c.gradient().copy())
    c.x0[...] = c.x[...] = x0
    return (grads[0] - grads[1]) / (2 * eps)


@workload("forward", "forward mode, vector mode and hvp next to the primal and gradient")
def run(config):
    """Rows per case: primal, gradient, forward (x primal), 8-direction vector forward
    (x primal), hvp (x gradient), each derivative checked."""
    rows = []
    for c in cases(config.quick, config.size):
        rows += case_rows(c, config.sampler)
    return rows
