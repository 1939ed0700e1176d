"""The seed workload of the Flux pull request that added Enzyme training, four ways.

``Chain(Dense(1, 23, tanh), Dense(23, 1, bias=False), only)``, 41 samples ``x in -2:0.1:2``,
target ``2x - x^3``, loss ``(m(x) - y)^2``, Adam, one step per sample:

- ``tape``: ``train(loss, model, data, state)`` on the tape engine;
- ``duplicated train``: ``train(loss, Duplicated(model), data, state)`` (one native loop per call);
- ``duplicated train, epochs=100``: the same with ``epochs=HAND_EPOCHS`` (one native loop for
  them all, as the hand-written loop runs them);
- ``duplicated steps``: a Python loop of ``gradient(loss, dup, x, y)`` and ``update(state, dup)``;
- ``hand-written numba``: the fastest loop we could write: forward, the hand-derived
  backward and Adam for all epochs in one ``@njit`` function (``hand_train``), the three
  parameters laid end to end in one array so that Adam runs once over all 69 (a third
  faster than an Adam call per array), with libm's scalar ``tanhf`` and
  (``hand-written numba, libmvec tanh``) with glibc's 8-lane one; the faster of the two
  is the reference; ``fused numba loop, every step's loss returned``: the libmvec loop
  returning every step's loss in a new float64 array, as ``train(..., epochs=100)`` does.

Floating-point flags: the hand-written loop and optim's kernels (float32 arithmetic for the
float32 model) are compiled with ``error_model="numpy"`` (no zero-divisor branches, so
their Adam loops vectorise), no
fastmath anywhere; ``tanh`` is libm's scalar ``tanhf`` in the first hand-written loop,
glibc's libmvec ``_ZGVdN8v_tanhf`` (8 lanes, 4 ulp) in the second and in adcore's gradient
(``adcore.backend.vector_math``).

Each runs one epoch per call (the hand-written loop ``HAND_EPOCHS`` per call), timed side by
side in samples of several calls after a warm-up call; times are scaled to 1000 epochs (the epochs run differ between variants, so the
``mean_loss_after_warmup`` of the rows are not comparable; the ``duplicated train`` row
carries the loss agreement with the tape engine from fresh models).  Also reported: the latency of one ``gradient`` call with a
``Duplicated`` model, and the first-call compile times measured in a fresh process.

    python -m bench.seed            # from the repository root; full run
    python -m bench.seed --quick
"""
import itertools
import math
import os
import subprocess
import sys

import numba
import numpy as np

from adcore import Duplicated
from layers import Chain, Dense, gradient, only, tanh, train, withgradient
from layers.vector_kernels import libmvec_map_kernel
from optim import Adam, setup, update
from optim.rules import power_step

from .timing import default_sampler

EPOCHS = 1000
HAND_EPOCHS = 100     # epochs per call of the fused hand-written loop


def seed_data():
    return [(np.array([x], np.float32), np.float32(2 * x - x ** 3))
            for x in np.arange(-2, 2.0001, 0.1)]


def seed_model():
    return Chain(Dense(1, 23, tanh, rng=0), Dense(23, 1, bias=False, rng=1), only)


def loss(m, x, y):
    return (m(x) - y) ** 2


@numba.njit(cache=False, error_model="numpy")
def _adam(p, g, mt, vt, c1, c2, eta, b1, b2, eps):
    """optim.Adam's formula in float32 (the scalars from float64 hyperparameters and
    powers of beta, one division per element); ``p`` takes the step."""
    f = np.float32
    step, root, e = f(eta / c1), f(1.0 / math.sqrt(c2)), f(eps)
    k1, k2, l1, l2 = f(b1), f(b2), f(1.0 - b1), f(1.0 - b2)
    for i in range(p.size):
        mt[i] = k1 * mt[i] + l1 * g[i]
        vt[i] = k2 * vt[i] + l2 * g[i] * g[i]
        p[i] -= step * mt[i] / (math.sqrt(vt[i]) * root + e)


@numba.njit(cache=False, error_model="numpy")
def scalar_tanh(out, oo, x, xo, n):
    """``out[oo:oo+n] = tanh(x[xo:xo+n])`` by libm's ``tanhf``."""
    for j in range(n):
        out[oo + j] = math.tanh(x[xo + j])


@numba.njit(cache=False, error_model="numpy")
def hand_train(params, state, bt, xs, ys, epochs, losses, tanh_into):
    """All ``epochs`` of the seed model written by hand in one function: per sample the
    forward pass, the hand-derived backward pass and Adam, with no allocation in the loop.
    ``params`` holds ``w1, b1, w2`` end to end (float32, 3 x 23), ``state`` ``mt, vt``
    (2 rows of 69), ``bt`` the powers of beta (float64); ``losses`` gets the last epoch's
    losses, or every step's when it has room for them; ``tanh_into`` is ``scalar_tanh`` or
    libmvec's (``layers.vector_kernels.libmvec_map_kernel``)."""
    n = params.size // 3
    z, h = np.empty(n, np.float32), np.empty(n, np.float32)
    grads = np.empty(3 * n, np.float32)
    v1, v2, v3 = params[:n], params[n:2 * n], params[2 * n:]
    gw1, gb1, gw2 = grads[:n], grads[n:2 * n], grads[2 * n:]
    for epoch in range(epochs):
        start = epoch * xs.shape[0] if losses.size > xs.shape[0] else 0
        for k in range(xs.shape[0]):
            x = xs[k]
            for j in range(n):
                z[j] = v1[j] * x + v2[j]
            tanh_into(h, 0, z, 0, n)
            yhat = np.float32(0.0)
            for j in range(n):
                yhat += v3[j] * h[j]
            r = yhat - ys[k]
            losses[start + k] = r * r
            d = 2 * r
            for j in range(n):
                gw2[j] = d * h[j]
                dz = d * v3[j] * (1 - h[j] * h[j])
                gw1[j] = dz * x
                gb1[j] = dz
            _adam(params, grads, state[0], state[1], 1.0 - bt[0], 1.0 - bt[1],
                  0.001, 0.9, 0.999, 1e-8)
            bt[0] = power_step(bt[0], 0.9)       # 0.0 once underflowed, as optim's Adam
            bt[1] = power_step(bt[1], 0.999)


def _hand_runner(epochs, tanh_into, every=False):
    """Runs ``epochs`` epochs per call of the fused hand-written loop, returning the last
    epoch's losses (or, ``every``, every step's in a new array, as ``train`` does)."""
    m = seed_model()
    params = np.concatenate([m[0].weight.reshape(-1), m[0].bias, m[1].weight.reshape(-1)])
    state, bt = np.zeros((2, params.size), np.float32), np.array([0.9, 0.999])
    xs, ys = (np.array(c, np.float32).reshape(-1) for c in zip(*seed_data()))
    losses = np.empty(len(xs) * (epochs if every else 1), np.float32)

    def run():
        hand_train(params, state, bt, xs, ys, epochs, losses, tanh_into)
        return losses.astype(np.float64) if every else losses
    return run


def hand_runners():
    """The hand-written loop with libm's scalar ``tanhf`` and, where glibc has it, with
    libmvec's 8-lane ``tanhf`` (the faster is the reference)."""
    out = {"hand-written numba": (_hand_runner(HAND_EPOCHS, scalar_tanh), HAND_EPOCHS)}
    vector = libmvec_map_kernel("tanh", np.float32)
    if vector is not None:
        out["hand-written numba, libmvec tanh"] = (_hand_runner(HAND_EPOCHS, vector), HAND_EPOCHS)
    out[EVERY_LOSS] = (_hand_runner(HAND_EPOCHS, vector or scalar_tanh, every=True), HAND_EPOCHS)
    return out


# The fused loop returning every step's loss in a new array, as train(..., epochs=100) does;
# not named "hand", so it is never the reference.
EVERY_LOSS = "fused numba loop, every step's loss returned"


def _runners():
    data = seed_data()
    m_tape, m_dup, m_steps, m_epochs = seed_model(), seed_model(), seed_model(), seed_model()
    s_tape, s_dup, s_steps = setup(Adam(), m_tape), setup(Adam(), m_dup), setup(Adam(), m_steps)
    dup, dup_steps, dup_epochs = Duplicated(m_dup), Duplicated(m_steps), Duplicated(m_epochs)
    s_epochs = setup(Adam(), dup_epochs)

    def steps():
        out = []
        for x, y in data:
            val, _ = withgradient(loss, dup_steps, x, y)
            update(s_steps, dup_steps)
            out.append(float(val))
        return out
    return {"tape": (lambda: train(loss, m_tape, data, s_tape), 1),
            "duplicated train": (lambda: train(loss, dup, data, s_dup), 1),
            f"duplicated train, epochs={HAND_EPOCHS}": (
                lambda: train(loss, dup_epochs, data, s_epochs, epochs=HAND_EPOCHS)[-len(data):],
                HAND_EPOCHS),
            "duplicated steps": (steps, 1), **hand_runners()}


_FIRST_CALL = """
import time, numpy as np
t0 = time.perf_counter()
import layers, optim
from adcore import Duplicated
t1 = time.perf_counter()
m = layers.Chain(layers.Dense(1, 23, layers.tanh, rng=0), layers.Dense(23, 1, bias=False, rng=1),
                 layers.only)
data = [(np.array([x], np.float32), np.float32(2 * x - x ** 3)) for x in np.arange(-2, 2.0001, 0.1)]
loss = lambda m, x, y: (m(x) - y) ** 2
dup = Duplicated(m)
t2 = time.perf_counter()
layers.gradient(loss, dup, *data[0])
t3 = time.perf_counter()
layers.train(loss, dup, data, optim.setup(optim.Adam(), dup))
t4 = time.perf_counter()
print(t1 - t0, t3 - t2, t4 - t3)
"""


def first_call_seconds():
    """``(import, first gradient, first train)`` seconds in a fresh Python process."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", _FIRST_CALL], capture_output=True, text=True,
                         check=True, cwd=root)
    return tuple(float(v) for v in out.stdout.split())


def same_losses(epochs):
    """The largest difference between the tape engine's and ``Duplicated``'s losses when
    both train fresh seed models."""
    data = seed_data()
    m1, m2 = seed_model(), seed_model()
    s1, s2, dup = setup(Adam(), m1), setup(Adam(), m2), Duplicated(m2)
    return max(float(np.max(np.abs(np.subtract(train(loss, m1, data, s1),
                                                train(loss, dup, data, s2)))))
               for _ in range(epochs))


def latencies(sampler):
    """Timings of one ``gradient(loss, Duplicated(model), x, y)`` call, and of one step
    ``gradient`` + ``update(state, dup)`` of a user's own loop over the samples in turn
    (one sample over and over converges, and Adam's second moments then decay into float32
    subnormals, whose arithmetic is many times slower)."""
    dup, dup_steps = Duplicated(seed_model()), Duplicated(seed_model())
    state = setup(Adam(), dup_steps)
    data = seed_data()
    x, y = data[5]
    items = itertools.cycle(data)

    def step():
        gradient(loss, dup_steps, *next(items))
        update(state, dup_steps)
    return sampler.interleaved([lambda: gradient(loss, dup, x, y), step])


def run(sampler):
    """Measure everything; returns ``(rows, report)``: a list of dicts and printable text.
    Each variant's ``epoch`` is the Timing of one epoch; its ``last_epoch_losses`` come from
    one more epoch after the timing."""
    rows = []
    runners = _runners()
    timings = sampler.interleaved([fn for fn, _ in runners.values()])
    for (name, (fn, epochs)), timing in zip(runners.items(), timings):
        rows.append({"variant": name, "epoch": timing.scaled(1 / epochs),
                     "mean_loss_after_warmup": float(np.mean(fn()))})
    tape = rows[0]["epoch"].median
    hand = min(r["epoch"].median for r in rows if r["variant"].startswith("hand-written"))
    for r in rows:
        r["speedup_vs_tape"] = tape / r["epoch"].median
        r["ratio_to_hand_written"] = r["epoch"].median / hand
    rows[1]["max_loss_difference_to_tape_3_epochs"] = same_losses(3)
    imp, first_grad, first_train = first_call_seconds()
    call, step = latencies(sampler)
    rows.append({"variant": "gradient call latency", "call": call})
    rows.append({"variant": "gradient + update step latency", "call": step})
    rows.append({"variant": "first gradient compile (fresh process)", "seconds": first_grad,
                 "import_seconds": imp})
    rows.append({"variant": "first train call (loop compile, fresh process)",
                 "seconds": first_train})
    return rows, report(rows)


def report(rows):
    lines = ["seed workload: Chain(Dense(1 => 23, tanh), Dense(23 => 1; bias=False), only), "
             "41 samples, Adam, 1 step per sample",
             f"{'variant':<30}{'s / 1000 epochs':>16}{'x tape':>9}{'/ hand':>9}"]
    for r in rows:
        if "epoch" in r:
            lines.append(f"{r['variant']:<30}{r['epoch'].median * EPOCHS:>16.3f}"
                         f"{r['speedup_vs_tape']:>9.1f}{r['ratio_to_hand_written']:>9.2f}")
    lines.append("duplicated train, max |loss difference| to the tape engine over 3 epochs: "
                 f"{rows[1]['max_loss_difference_to_tape_3_epochs']:.2e}")
    for r in rows:
        if "call" in r:
            lines.append(f"{r['variant']}: {r['call'].median * 1e6:.2f} µs")
        if "seconds" in r:
            lines.append(f"{r['variant']}: {r['seconds']:.3f} s")
    return "\n".join(lines)


if __name__ == "__main__":
    print(run(default_sampler("--quick" in sys.argv))[1])
