"""The seed workload on the peers: ``Chain(Dense(1, 23, tanh), Dense(23, 1, bias=False), only)``
fit to ``y = 2x - x^3`` on 41 points, one Adam step per sample (Optimisers.jl's formula,
float32 parameters and state, as ``optim.Adam``), from the same initial weights.  The powers
of beta become 0 once they underflow, as in ``optim.Adam`` (a running product would stick at
the least subnormal, whose every product is slow).

``trainers(W1, b1, W2, xs, ys)`` gives ``{name: train(epochs) -> final mean loss}`` (or a skip
note); every call starts again from the initial weights.
"""
import numpy as np

from optim.rules import power_step

from . import peers

ETA, B1, B2, EPS = 1e-3, 0.9, 0.999, 1e-8


def data():
    """The 41 samples x in -2:0.1:2, as float32 (xs, ys)."""
    xs = np.arange(-2, 2.0001, 0.1).astype(np.float32)
    return xs, (2 * xs - xs ** 3).astype(np.float32)


def mean_loss(W1, b1, W2, xs, ys):
    """Mean of (m(x) - y)^2 over the samples, in float64."""
    h = np.tanh(np.outer(xs, W1[:, 0]) + b1)
    return float(np.mean((h @ W2[0] - ys) ** 2, dtype=np.float64))


def _torch(torch, init, xs, ys):
    def train(epochs):
        p = [torch.tensor(a, requires_grad=True) for a in init]
        m = [torch.zeros_like(a) for a in p]
        v = [torch.zeros_like(a) for a in p]
        bt = [B1, B2]
        tx, ty = torch.from_numpy(xs), torch.from_numpy(ys)
        for _ in range(epochs):
            for i in range(len(xs)):
                W1, b1, W2 = p
                loss = ((W2 @ torch.tanh(W1[:, 0] * tx[i] + b1))[0] - ty[i]) ** 2
                grads = torch.autograd.grad(loss, p)
                with torch.no_grad():
                    c1, c2 = 1 - bt[0], 1 - bt[1]
                    for a, g, ma, va in zip(p, grads, m, v):
                        ma.mul_(B1).add_((1 - B1) * g)
                        va.mul_(B2).add_((1 - B2) * g * g)
                        a.sub_(ETA * (ma / c1 / (torch.sqrt(va / c2) + EPS)))
                bt = [power_step(bt[0], B1), power_step(bt[1], B2)]
        return mean_loss(*(a.detach().numpy() for a in p), xs, ys)
    return train


def _jax(jax, init, xs, ys):
    jnp, lax = jax.numpy, jax.lax

    def loss(p, x, y):
        W1, b1, W2 = p
        return ((W2 @ jnp.tanh(W1[:, 0] * x + b1))[0] - y) ** 2

    grad = jax.grad(loss)

    def step(carry, xy):
        p, m, v, bt = carry
        g = grad(p, *xy)
        m = tuple(B1 * a + (1 - B1) * b for a, b in zip(m, g))
        v = tuple(B2 * a + (1 - B2) * b * b for a, b in zip(v, g))
        c1, c2 = 1 - bt[0], 1 - bt[1]
        p = tuple((a - ETA * (ma / c1 / (jnp.sqrt(va / c2) + EPS))).astype(a.dtype)
                  for a, ma, va in zip(p, m, v))
        bt = bt * jnp.array([B1, B2])
        return (p, m, v, jnp.where(bt >= jnp.finfo(bt.dtype).tiny, bt, 0)), None

    @jax.jit
    def run(p, epochs):
        zeros = tuple(jnp.zeros_like(a) for a in p)
        carry = (p, zeros, zeros, jnp.array([B1, B2]))
        carry = lax.fori_loop(0, epochs, lambda _, c: lax.scan(step, c, (xs, ys))[0], carry)
        return carry[0]

    def train(epochs):
        p = jax.block_until_ready(run(tuple(jnp.asarray(a) for a in init), epochs))
        return mean_loss(*(np.asarray(a) for a in p), xs, ys)
    # Compile ``run`` now (``epochs`` is traced): on a busy machine a compile of over a
    # second made the first timed call, compile included, the only sample.
    train(1)
    return train


def _autograd(autograd, init, xs, ys):
    anp = autograd.numpy

    def loss(p, x, y):
        W1, b1, W2 = p
        return ((W2 @ anp.tanh(W1[:, 0] * x + b1))[0] - y) ** 2

    grad = autograd.grad(loss)

    def train(epochs):
        p = [a.copy() for a in init]
        m = [np.zeros_like(a) for a in p]
        v = [np.zeros_like(a) for a in p]
        bt = [B1, B2]
        for _ in range(epochs):
            for x, y in zip(xs, ys):
                g = grad(p, x, y)
                c1, c2 = 1 - bt[0], 1 - bt[1]
                for a, gi, ma, va in zip(p, g, m, v):
                    ma[...] = B1 * ma + (1 - B1) * gi
                    va[...] = B2 * va + (1 - B2) * gi * gi
                    a -= (ETA * (ma / c1 / (np.sqrt(va / c2) + EPS))).astype(a.dtype)
                bt = [power_step(bt[0], B1), power_step(bt[1], B2)]
        return mean_loss(*p, xs, ys)
    return train


def trainers(W1, b1, W2, xs, ys):
    """``{name: train(epochs) -> final mean loss}`` for each installed peer, else a note."""
    init = tuple(np.array(a, np.float32) for a in (W1, b1, W2))
    out = {}
    for label, name, make in (("PyTorch", "torch", _torch), ("JAX (jit, scan)", "jax", _jax),
                              ("autograd", "autograd", _autograd)):
        mod = peers.get(name)
        out[label] = peers.why(name) if mod is None else make(mod, init, xs, ys)
    return out

