"""ADBench's LSTM objective (a 2-layer diagonal LSTM predicting a bit sequence).

One formula written twice: an allocation-free Numba kernel (the state updated in place in a
scratch buffer, as ADBench's C++ does) that adcore differentiates, and a numpy-style version
run by adcore.tape and the peers. ``instance(c)`` reads ADBench's ``lstm_l2_c1024.txt`` (its
first ``c`` characters); the loss of the whole file is ADBench's 0.66666518.
"""
import math
from pathlib import Path

import numba
import numpy as np

from .gmm import adbench_dir

ADBENCH_LOSS = 0.66666518     # ADBench's value for lstm_l2_c1024.txt
BUNDLED = Path(__file__).resolve().parent / "adbench"     # a copy of ADBench's file


class Instance:
    """main (2l, 4b), extra (3, b), state0 (2l, b), seq (c, b)."""

    def __init__(self, main, extra, state0, seq, source):
        self.main, self.extra, self.state0, self.seq, self.source = main, extra, state0, seq, source
        self.layers = main.shape[0] // 2
        self.c, self.b = seq.shape

    @property
    def params(self):
        return self.main, self.extra

    def label(self):
        return f"l={self.layers} b={self.b} c={self.c} ({self.source})"


def instance(c=1024, seed=0):
    """ADBench's lstm_l2_c1024 instance (from ADBench's folder, else the copy beside this
    module) cut to its first ``c`` characters; a generated one of the same shape, from
    ``seed``, for longer sequences."""
    folder = adbench_dir()
    path = folder / "lstm_l2_c1024.txt" if folder else BUNDLED / "lstm_l2_c1024.txt"
    if path.exists() and c <= 1024:
        tok = path.read_text().split()
        l, full, b = (int(t) for t in tok[:3])
        vals = np.array(tok[3:], dtype=np.float64)
        sizes = [2 * l * 4 * b, 3 * b, 2 * l * b, full * b]
        parts = np.split(vals[:sum(sizes)], np.cumsum(sizes)[:-1])
        main, extra, state0, seq = (p.copy() for p in parts)
        return Instance(main.reshape(2 * l, 4 * b), extra.reshape(3, b), state0.reshape(2 * l, b),
                        seq.reshape(full, b)[:c].copy(), "ADBench file")
    rng = np.random.default_rng(seed)
    l, b = 2, 14
    return Instance(rng.uniform(size=(2 * l, 4 * b)), rng.uniform(size=(3, b)),
                    rng.uniform(size=(2 * l, b)), rng.uniform(size=(c, b)), f"generated, seed {seed}")


@numba.njit
def _sigmoid(v):
    return 1.0 / (1.0 + math.exp(-v))


@numba.njit
def objective(main, extra, state0, seq, state, inp, ypred):
    """ADBench's loss; ``state`` (2l, b), ``inp`` (b,), ``ypred`` (b,) are scratch."""
    layers = main.shape[0] // 2
    c, b = seq.shape
    for r in range(state.shape[0]):
        for j in range(b):
            state[r, j] = state0[r, j]
    total = 0.0
    for t in range(c - 1):
        for j in range(b):
            inp[j] = seq[t, j] * extra[0, j]
        for layer in range(layers):
            w, bias, h, cell = 2 * layer, 2 * layer + 1, 2 * layer, 2 * layer + 1
            for j in range(b):
                forget = _sigmoid(inp[j] * main[w, j] + main[bias, j])
                ingate = _sigmoid(state[h, j] * main[w, b + j] + main[bias, b + j])
                outgate = _sigmoid(inp[j] * main[w, 2 * b + j] + main[bias, 2 * b + j])
                change = math.tanh(state[h, j] * main[w, 3 * b + j] + main[bias, 3 * b + j])
                state[cell, j] = state[cell, j] * forget + ingate * change
                state[h, j] = outgate * math.tanh(state[cell, j])
                inp[j] = state[h, j]
        s = 0.0
        for j in range(b):
            ypred[j] = inp[j] * extra[1, j] + extra[2, j]
            s += math.exp(ypred[j])
        lse = math.log(s + 2.0)
        for j in range(b):
            total += seq[t + 1, j] * (ypred[j] - lse)
    return -total / ((c - 1) * b)


def objective_xp(xp, main, extra, state0, seq):
    """The same loss with array operations of the numpy-like module ``xp`` (no mutation; under
    JAX the loop over characters is a ``lax.scan``, as a JAX user writes it)."""
    layers = main.shape[0] // 2
    c, b = seq.shape
    sig = lambda v: 1.0 / (1.0 + xp.exp(-v))

    def step(state, chars):
        x, target = chars
        hidden, cell = list(state[0]), list(state[1])
        inp = x * extra[0]
        for i in range(layers):
            w, bias = main[2 * i], main[2 * i + 1]
            forget = sig(inp * w[:b] + bias[:b])
            ingate = sig(hidden[i] * w[b:2 * b] + bias[b:2 * b])
            outgate = sig(inp * w[2 * b:3 * b] + bias[2 * b:3 * b])
            change = xp.tanh(hidden[i] * w[3 * b:] + bias[3 * b:])
            cell[i] = cell[i] * forget + ingate * change
            hidden[i] = outgate * xp.tanh(cell[i])
            inp = hidden[i]
        ypred = inp * extra[1] + extra[2]
        return (tuple(hidden), tuple(cell)), xp.sum(target * (ypred - xp.log(xp.sum(xp.exp(ypred)) + 2.0)))

    state = (tuple(state0[2 * i] for i in range(layers)), tuple(state0[2 * i + 1] for i in range(layers)))
    if xp.__name__ == "jax.numpy":
        import jax
        return -xp.sum(jax.lax.scan(step, state, (seq[:-1], seq[1:]))[1]) / ((c - 1) * b)
    total = 0.0
    for t in range(c - 1):
        state, term = step(state, (seq[t], seq[t + 1]))
        total = total + term
    return -total / ((c - 1) * b)


def scratch(inst):
    """The kernel's scratch buffers for ``inst``: state, input, prediction."""
    return np.zeros_like(inst.state0), np.zeros(inst.b), np.zeros(inst.b)
