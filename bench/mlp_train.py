"""A bigger MLP training step: ``Chain(Dense(784, 256, relu), Dense(256, 256, relu),
Dense(256, 10), softmax)``, loss ``sum((m(x) - y)^2)``, one Adam step on a batch of 128
float32 inputs.

Implementations: hand-written numpy+BLAS forward, backward and Adam (the reference);
``layers`` with ``Duplicated(model)``: a user's step ``gradient`` + ``update(state, dup)``
and ``train`` over one item; the tape engine's ``gradient`` + ``update``; PyTorch
(``torch.optim.Adam``) and JAX (one jitted step) when installed.  All start from the same
weights; each one's loss after its first ``CHECK_STEPS`` steps is checked against the
reference's (Adam's steps are about ``eta * sign(g)``, so the parameters themselves would
check only the gradient's signs, and amplify rounding where a gradient is nearly zero).
"""
import numpy as np

import numba
from adcore import Duplicated
from adcore.tree import leaves
from layers import Chain, Dense, gradient, relu, softmax, threads, train
from optim import Adam, setup, update

from . import peers
from .row_threads import at_threads, thread_rows
from .rows import failed, row, skipped
from .timing import first_call

W = "mlp-train"
TOL = 1e-5
CHECK_STEPS = 3
ETA, B1, B2, EPS = 1e-3, 0.9, 0.999, 1e-8
SIZES = (784, 256, 256, 10)


def problem(batch=128, seed=0):
    """The model, its parameters (W1, b1, W2, b2, W3, b3) and data (x, y), float32."""
    n = SIZES
    model = Chain(Dense(n[0], n[1], relu, rng=seed), Dense(n[1], n[2], relu, rng=seed + 1),
                  Dense(n[2], n[3], rng=seed + 2), softmax)
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(batch, n[0])).astype(np.float32)
    y = np.eye(n[3], dtype=np.float32)[rng.integers(0, n[3], batch)]
    return model, _params(model), x, y


def _params(model):
    return [a for layer in model.layers[:3] for a in (layer.weight, layer.bias)]


def loss(m, x, y):
    return np.sum((m(x) - y) ** 2)


def loss_xp(xp, W1, b1, W2, b2, W3, b3, x, y):
    """The same loss with the numpy-like module ``xp`` (for the peers)."""
    h1 = x @ W1.T + b1
    h1 = h1 * (h1 > 0)
    h2 = h1 @ W2.T + b2
    h2 = h2 * (h2 > 0)
    z = h2 @ W3.T + b3
    e = xp.exp(z - xp.amax(z, axis=1, keepdims=True))
    return xp.sum((e / xp.sum(e, axis=1, keepdims=True) - y) ** 2)


def numpy_gradient(W1, b1, W2, b2, W3, b3, x, y):
    """Hand-written with numpy and BLAS: ``(loss, [dW1, db1, dW2, db2, dW3, db3])``."""
    h1 = x @ W1.T
    h1 += b1
    np.maximum(h1, 0, out=h1)
    h2 = h1 @ W2.T
    h2 += b2
    np.maximum(h2, 0, out=h2)
    z = h2 @ W3.T
    z += b3
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z, out=z)
    p /= p.sum(axis=1, keepdims=True)
    d = p - y
    value = float(np.vdot(d, d))
    d *= 2
    dz = p * (d - np.einsum("ij,ij->i", d, p)[:, None])
    dh2 = dz @ W3
    dh2 *= h2 > 0
    dh1 = dh2 @ W2
    dh1 *= h1 > 0
    return value, [dh1.T @ x, dh1.sum(axis=0), dh2.T @ h1,
                   dh2.sum(axis=0), dz.T @ h2, dz.sum(axis=0)]


class NumpyAdam:
    """optim.Adam's formula in numpy, in place, on float32 parameters."""

    def __init__(self, params):
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]
        self.bt = [B1, B2]

    def step(self, params, grads):
        c1, c2 = 1 - self.bt[0], 1 - self.bt[1]
        for p, g, m, v in zip(params, grads, self.m, self.v):
            m *= B1
            m += (1 - B1) * g
            v *= B2
            g *= g
            g *= 1 - B2
            v += g
            np.divide(v, c2, out=g)
            np.sqrt(g, out=g)
            g += EPS
            np.divide(m, g, out=g)
            g *= ETA / c1
            p -= g
        self.bt = [self.bt[0] * B1, self.bt[1] * B2]


def _steps(batch):
    """``{name: make() -> (step, params of that implementation)}``, or a skip note."""
    out = {}

    def numpy_step():
        model, params, x, y = problem(batch)
        opt = NumpyAdam(params)

        def step():
            value, grads = numpy_gradient(*params, x, y)
            opt.step(params, grads)
            return value
        return step, params
    out["hand-written numpy+BLAS"] = numpy_step

    def dup_steps():
        model, params, x, y = problem(batch)
        dup, state = Duplicated(model), setup(Adam(), model)

        def step():
            gradient(loss, dup, x, y)
            update(state, dup)
        return step, params
    out["layers, Duplicated: gradient + update"] = dup_steps

    def dup_train():
        model, params, x, y = problem(batch)
        dup, state, data = Duplicated(model), setup(Adam(), model), [(x, y)]
        return (lambda: train(loss, dup, data, state)), params
    out["layers, Duplicated: train (1 item)"] = dup_train

    def tape_steps():
        model, params, x, y = problem(batch)
        state = setup(Adam(), model)

        def step():
            update(state, model, gradient(loss, model, x, y)[0])
        return step, params
    out["layers, tape engine: gradient + update"] = tape_steps

    out["PyTorch (torch.optim.Adam)"] = _torch(batch)
    out["JAX (jit step)"] = _jax(batch)
    return out


def _torch(batch):
    torch = peers.get("torch")
    if torch is None:
        return peers.why("torch")

    def make():
        _, params, x, y = problem(batch)
        tp = [torch.tensor(p, requires_grad=True) for p in params]
        opt = torch.optim.Adam(tp, lr=ETA, betas=(B1, B2), eps=EPS)
        tx, ty = torch.from_numpy(x), torch.from_numpy(y)

        def step():
            opt.zero_grad()
            value = loss_xp(torch, *tp, tx, ty)
            value.backward()
            opt.step()
        return step, [p.detach().numpy() for p in tp]
    return make


def _jax(batch):
    jax = peers.get("jax")
    if jax is None:
        return peers.why("jax")
    jnp = jax.numpy

    @jax.jit
    def jstep(p, m, v, bt, x, y):
        g = jax.grad(lambda q: loss_xp(jnp, *q, x, y))(p)
        m = [B1 * a + (1 - B1) * b for a, b in zip(m, g)]
        v = [B2 * a + (1 - B2) * b * b for a, b in zip(v, g)]
        c1, c2 = 1 - bt[0], 1 - bt[1]
        p = [(a - ETA * (ma / c1 / (jnp.sqrt(va / c2) + EPS))).astype(a.dtype)
             for a, ma, va in zip(p, m, v)]
        return p, m, v, bt * jnp.array([B1, B2])

    def make():
        _, params, x, y = problem(batch)
        zeros = [jnp.zeros_like(p) for p in params]
        carry = [[jnp.asarray(p) for p in params], zeros, zeros, jnp.array([B1, B2]),
                 jnp.asarray(x), jnp.asarray(y)]
        out = [np.array(p) for p in params]

        def step():
            carry[:4] = jax.block_until_ready(jstep(*carry))
            out[:] = [np.asarray(a) for a in carry[0]]
        return step, out
    return make


def run(config):
    """One training step of the bigger MLP on a batch of 128*size, by each implementation."""
    batch = max(2, int(128 * config.size))
    case = f"784-256-256-10, batch {batch}, float32, Adam step"
    rows, ref = [], None
    for name, make in _steps(batch).items():
        if isinstance(make, str):
            rows.append(skipped(W, case, name, make))
            continue
        try:
            step, params = make()
            first, _ = first_call(step)
            for _ in range(CHECK_STEPS - 1):
                step()
            value = float(loss_xp(np, *(np.asarray(p) for p in params), *problem(batch)[2:]))
            t = config.sampler.time(step)
        except Exception as exc:
            rows.append(failed(W, case, name, exc))
            continue
        if ref is None:
            ref, t_ref = value, t
            rows.append(row(W, case, name, t, vs_ref=1.0, first_call_s=first,
                            check=f"loss {value:.6g} after {CHECK_STEPS} steps", note="reference"))
            continue
        rows.append(row(W, case, name, t, vs_ref=t.median / t_ref.median, first_call_s=first,
                        err=abs(value - ref) / abs(ref), tol=TOL))
    try:
        rows += _thread_rows(config, batch, case)
    except Exception as exc:
        rows.append(failed(W, case, "layers, Duplicated: threads", exc))
    return rows


def _thread_rows(config, batch, case):
    """``Duplicated``'s step (``gradient`` + ``update``, and ``train`` over one item) at 1
    thread and at every core, the threaded gradient checked against the serial one."""
    model, _, x, y = problem(batch)
    dup, state = Duplicated(model), setup(Adam(), model)

    def flat_gradient(n):
        g = at_threads(n, lambda: gradient(loss, dup, x, y))()[0]
        return np.concatenate([np.ravel(a) for _, a in leaves(g)]).astype(np.float64)
    at_threads(numba.config.NUMBA_NUM_THREADS, lambda: threads(loss, dup, x, y))()   # stages the split
    serial, threaded = flat_gradient(1), flat_gradient(numba.config.NUMBA_NUM_THREADS)
    check = (float(np.abs(threaded - serial).max() / np.abs(serial).max()), TOL)

    def step():
        gradient(loss, dup, x, y)
        update(state, dup)
    describe = lambda: threads(loss, dup, x, y)     # noqa: E731
    return thread_rows(W, case, "layers, Duplicated: gradient + update", step, describe,
                       config.sampler, check=check) + \
        thread_rows(W, case, "layers, Duplicated: train (1 item)",
                    lambda: train(loss, dup, [(x, y)], state), describe, config.sampler)
