"""Small utilities: ``only``, one-hot encoding, precision conversion, ``destructure``
and ``batches``."""
import math

import numpy as np

from adcore.tree import fmap, leaves

from .init import _rng

__all__ = ["only", "onehot", "onehotbatch", "onecold", "f32", "f64", "destructure", "batches"]


def only(x):
    """The single element of ``x`` (an error unless ``x`` has exactly one)."""
    shape = getattr(x, "shape", None)  # arrays and tracked arrays: no numpy dispatch (tape overhead)
    if type(shape) is not tuple:
        shape = np.shape(x)
    if math.prod(shape) != 1:
        raise ValueError(f"only expects exactly one element, got shape {shape}")
    if len(shape) == 1 and hasattr(x, "reshape"):
        return x[0]  # one op fewer on the tape
    return x.reshape(-1)[0] if hasattr(x, "reshape") else np.asarray(x).reshape(-1)[0]


def onehot(x, labels):
    """A bool vector with ``True`` at the position of ``x`` in ``labels``."""
    labels = list(labels)
    if x not in labels:
        raise ValueError(f"value {x!r} is not among the labels {labels!r}")
    v = np.zeros(len(labels), dtype=bool)
    v[labels.index(x)] = True
    return v


def onehotbatch(xs, labels):
    """One-hot rows, shape ``(len(xs), len(labels))`` (batch first, classes last)."""
    labels = list(labels)
    return np.stack([onehot(x, labels) for x in xs]) if len(xs) else \
        np.zeros((0, len(labels)), dtype=bool)


def onecold(y, labels=None):
    """The label of the largest entry along the last axis (inverse of ``onehot``);
    for a batch ``(batch, classes)``, one label per row."""
    i = np.argmax(np.asarray(y), axis=-1)
    if labels is None:
        return i
    labels = list(labels)
    return labels[int(i)] if np.ndim(i) == 0 else [labels[k] for k in i]


def f32(model):
    """A copy of ``model`` with every float array converted to float32."""
    return fmap(lambda a: a.astype(np.float32), model)


def f64(model):
    """A copy of ``model`` with every float array converted to float64."""
    return fmap(lambda a: a.astype(np.float64), model)


def destructure(model):
    """``(flat, re)``: all float arrays of ``model`` in one vector, and ``re(v)``
    rebuilding a copy of the model from a vector of that length."""
    ls = [a for _, a in leaves(model)]
    dtype = np.result_type(*ls) if ls else np.float32
    flat = np.concatenate([a.ravel() for a in ls]).astype(dtype) if ls else np.zeros(0, dtype)
    n = flat.size

    def re(v):
        v = np.asarray(v)
        if v.shape != (n,):
            raise ValueError(f"re expects a vector of length {n}, got shape {v.shape}")
        pos = [0]

        def take(a):
            piece = v[pos[0]:pos[0] + a.size].reshape(a.shape).astype(a.dtype)
            pos[0] += a.size
            return piece

        return fmap(take, model)

    return flat, re


class batches:
    """Mini-batches of ``data`` along its first axis, re-iterable (one pass per epoch).

    ``data`` is an array, or a tuple or dict of arrays with the same first dimension,
    and each batch has the same form.  The last batch may be smaller.  With
    ``shuffle=True`` the order is redrawn from ``rng`` (a seed or Generator) each pass.
    """

    def __init__(self, data, batchsize, shuffle=False, rng=None):
        if batchsize < 1:
            raise ValueError(f"batchsize must be positive, got {batchsize}")
        arrays = data.values() if isinstance(data, dict) else \
            data if isinstance(data, tuple) else (data,)
        ns = {np.shape(a)[0] for a in arrays}
        if len(ns) != 1:
            raise ValueError(f"all arrays in data need the same first dimension, got {sorted(ns)}")
        self.data, self.batchsize, self.shuffle = data, batchsize, shuffle
        self.n = ns.pop()
        self.rng = _rng(rng)

    def __len__(self):
        return math.ceil(self.n / self.batchsize)

    def _take(self, idx):
        d = self.data
        if isinstance(d, dict):
            return {k: np.asarray(v)[idx] for k, v in d.items()}
        if isinstance(d, tuple):
            return tuple(np.asarray(v)[idx] for v in d)
        return np.asarray(d)[idx]

    def __iter__(self):
        order = self.rng.permutation(self.n) if self.shuffle else np.arange(self.n)
        for start in range(0, self.n, self.batchsize):
            yield self._take(order[start:start + self.batchsize])
