"""The Flux docs MLP: ``Chain(Dense(784, 32, sigmoid), Dense(32, 10), softmax)``, loss
``sum((m(x) - y)^2)``, one gradient on a batch of float32 inputs.

Implementations: a hand-written numpy+BLAS forward/backward (the reference: the fastest way
to write it by hand), ``layers.withgradient`` with the tape engine and with ``Duplicated(model)``
(the LLVM engine), adcore's reverse mode of an allocation-free Numba forward kernel, a
hand-written Numba loop forward/backward and the peers. All start from the same layers model's
weights and data; each gradient's error against the reference is checked.
"""
import math

import numba
import numpy as np

import adcore
from adcore import Const, Duplicated
from layers import Chain, Dense, sigmoid, softmax, withgradient

from . import peers
from .measure import rel_err, traced_bytes
from .rows import failed, row, skipped
from .timing import first_call

W = "mlp"
TOL = 1e-4  # float32


@numba.njit
def _forward(W1, b1, W2, b2, x, b, h, z):
    """Sample b: h = sigmoid(W1 x + b1); z = exp(W2 h + b2 - max); returns sum(z)."""
    for j in range(W1.shape[0]):
        s = b1[j]
        for k in range(W1.shape[1]):
            s += W1[j, k] * x[b, k]
        h[j] = 1.0 / (1.0 + math.exp(-s))
    mx = -np.inf
    for o in range(W2.shape[0]):
        s = b2[o]
        for j in range(W2.shape[1]):
            s += W2[o, j] * h[j]
        z[o] = s
        mx = max(mx, s)
    t = 0.0
    for o in range(W2.shape[0]):
        z[o] = math.exp(z[o] - mx)
        t += z[o]
    return t


@numba.njit
def loss_kernel(W1, b1, W2, b2, x, y, h, z):
    """sum((softmax(sigmoid(x W1' + b1) W2' + b2) - y)^2), one sample at a time; h (hidden,)
    and z (out,) are scratch."""
    loss = 0.0
    for b in range(x.shape[0]):
        t = _forward(W1, b1, W2, b2, x, b, h, z)
        for o in range(W2.shape[0]):
            d = z[o] / t - y[b, o]
            loss += d * d
    return loss


@numba.njit(fastmath=True)
def loss_gradient(W1, b1, W2, b2, x, y, h, p, dh, dW1, db1, dW2, db2):
    """Hand-written: adds the gradient into dW1, db1, dW2, db2 and returns the loss."""
    loss = 0.0
    for b in range(x.shape[0]):
        t = _forward(W1, b1, W2, b2, x, b, h, p)
        sdp = 0.0                                   # dp = 2 (p - y); dz = p (dp - <dp, p>)
        for o in range(W2.shape[0]):
            p[o] /= t
            d = p[o] - y[b, o]
            loss += d * d
            sdp += 2.0 * d * p[o]
        dh[:] = 0.0
        for o in range(W2.shape[0]):
            dz = p[o] * (2.0 * (p[o] - y[b, o]) - sdp)
            db2[o] += dz
            for j in range(W2.shape[1]):
                dW2[o, j] += dz * h[j]
                dh[j] += dz * W2[o, j]
        for j in range(W1.shape[0]):
            da = dh[j] * h[j] * (1.0 - h[j])
            db1[j] += da
            for k in range(W1.shape[1]):
                dW1[j, k] += da * x[b, k]
    return loss


def numpy_gradient(W1, b1, W2, b2, x, y):
    """Hand-written with numpy and BLAS: ``(loss, (dW1, db1, dW2, db2))``."""
    h = x @ W1.T
    h += b1
    np.negative(h, out=h)
    np.exp(h, out=h)
    h += 1
    np.reciprocal(h, out=h)                       # sigmoid
    z = h @ W2.T
    z += b2
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z, out=z)
    p /= p.sum(axis=1, keepdims=True)             # softmax
    d = p - y
    loss = float(np.vdot(d, d))
    d *= 2                                        # dL/dp
    dz = p * (d - np.einsum("ij,ij->i", d, p)[:, None])
    dh = dz @ W2
    dh *= h * (1 - h)
    return loss, (dh.T @ x, dh.sum(axis=0), dz.T @ h, dz.sum(axis=0))


def loss_xp(xp, W1, b1, W2, b2, x, y):
    """The same loss with the numpy-like module ``xp`` (for the peers)."""
    h = 1.0 / (1.0 + xp.exp(-(x @ W1.T + b1)))
    z = h @ W2.T + b2
    e = xp.exp(z - xp.amax(z, axis=1, keepdims=True))
    return xp.sum((e / xp.sum(e, axis=1, keepdims=True) - y) ** 2)


def problem(batch=128, seed=0):
    """The model (layers), its parameters (W1, b1, W2, b2) and the data (x, y), float32."""
    model = Chain(Dense(784, 32, sigmoid, rng=seed), Dense(32, 10, rng=seed + 1), softmax)
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(batch, 784)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, batch)]
    params = tuple(a for layer in model.layers[:2] for a in (layer.weight, layer.bias))
    return model, params, x, y


def loss(m, x, y):
    return np.sum((m(x) - y) ** 2)


def _flat(g):
    """(dW1, db1, dW2, db2) from a layers gradient tree."""
    return tuple(g["layers"][i][f] for i in (0, 1) for f in ("weight", "bias"))


def implementations(model, params, x, y):
    """{name: withgradient() -> (loss, (dW1, db1, dW2, db2))} or {name: skip note}."""
    H, O = params[0].shape[0], params[2].shape[0]
    hs = (np.zeros(H, np.float32), np.zeros(O, np.float32), np.zeros(H, np.float32))
    grads = tuple(np.zeros_like(p) for p in params)
    shadows = tuple(np.zeros_like(s) for s in hs[:2])

    def hand_numpy():
        return numpy_gradient(*params, x, y)

    def hand():
        for g in grads:
            g[...] = 0.0
        return loss_gradient(*params, x, y, *hs, *grads), grads

    def kernel():
        for g in grads + shadows:
            g[...] = 0.0
        _, val = adcore.autodiff(adcore.ReverseWithPrimal, loss_kernel,
                                 *(Duplicated(p, g) for p, g in zip(params, grads)),
                                 Const(x), Const(y), *(Duplicated(s, d) for s, d in zip(hs, shadows)))
        return val, grads

    def tape():
        val, g = withgradient(loss, model, Const(x), Const(y))
        return float(val), _flat(g[0])

    dup = Duplicated(model)

    def llvm():
        val, g = withgradient(loss, dup, Const(x), Const(y))
        return float(val), _flat(g[0])

    out = {"hand-written numpy+BLAS": hand_numpy, "hand-written Numba loops": hand,
           "adcore (Numba kernel)": kernel,
           "layers, tape engine": tape, "layers, Duplicated (LLVM)": llvm}
    out.update({k: v if isinstance(v, str) else v[1]
                for k, v in peers.engines(loss_xp, params, (x, y)).items()})
    return out


def run(config):
    """One gradient of the MLP loss on a batch of 128*size, by each implementation."""
    batch = max(2, int(128 * config.size))
    case = f"784-32-10, batch {batch}, float32"
    model, params, x, y = problem(batch)
    sampler = config.sampler
    h, z = np.zeros(params[0].shape[0], np.float32), np.zeros(params[2].shape[0], np.float32)
    first_p, _ = first_call(lambda: loss_kernel(*params, x, y, h, z))
    t_p = sampler.time(lambda: loss_kernel(*params, x, y, h, z))
    rows = [row(W, case, "Numba forward kernel", t_p, first_call_s=first_p, note="the primal kernel")]
    ref = t_ref = None
    for name, fn in implementations(model, params, x, y).items():
        if isinstance(fn, str):
            rows.append(skipped(W, case, name, fn))
            continue
        try:
            first, (val, g) = first_call(fn)
        except NotImplementedError as exc:
            rows.append(skipped(W, case, name, str(exc).split(";")[0]))
            continue
        except Exception as exc:
            rows.append(failed(W, case, name, exc))
            continue
        g = [np.array(a) for a in g]
        t = sampler.time(fn)
        native = name in ("adcore (Numba kernel)", "layers, Duplicated (LLVM)")
        alloc = None if name in ("PyTorch", "JAX (jit)") else traced_bytes(fn)
        if ref is None:
            ref, t_ref, val_ref = g, t, val
            rows.append(row(W, case, name, t, vs_ref=1.0, grad_obj=t.median / t_p.median,
                            first_call_s=first, alloc_bytes=alloc, check=f"loss {val:.6g}",
                            note="reference"))
            continue
        err = max(rel_err(g, ref), abs(val - val_ref) / abs(val_ref))
        rows.append(row(W, case, name, t, vs_ref=t.median / t_ref.median, first_call_s=first,
                        alloc_bytes=alloc, note="fastmath" if name == "hand-written Numba loops"
                        else "",
                        grad_obj=t.median / t_p.median if name.startswith("adcore") else None,
                        cached_bytes=adcore.last_cached_bytes() if native else None,
                        err=err, tol=TOL))
    return rows
