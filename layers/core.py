"""The layers: ``Dense``, ``Embedding`` and ``Chain``.

Each layer declares its trainable arrays in ``__tree_fields__`` (see ``adcore.tree``),
and its whole computation is its ``__call__``, written with numpy operations so the
same code runs on plain arrays and under the tape engine's recording.
"""
import numpy as np

from adcore.tape.tracked import Tracked

from . import activations, show
from .init import glorot_uniform


class Layer:
    """Optional base class of layers: Flux-style printing.  A user layer needs only
    ``__tree_fields__`` and ``__call__``; subclassing also gives it ``repr``."""

    __tree_fields__ = ()

    def __repr__(self):
        return show.show(self)

    def __adcore_show__(self, shadow):
        """How ``Duplicated(self)`` prints (see ``adcore.Duplicated.__repr__``)."""
        return show.show_duplicated(self, shadow)


def as_input(x, dtype):
    """The input as an array of the layer's dtype, as Flux converts inputs: numbers and
    lists become arrays, arrays of another dtype (plain or tracked) are converted."""
    if type(x) is np.ndarray or type(x) is Tracked:  # the common inputs, checked first
        return x if x.dtype == dtype else x.astype(dtype)
    if isinstance(x, (list, tuple)):
        x = np.stack([as_input(v, dtype) for v in x]) if x else np.zeros(0, dtype)
    elif isinstance(x, (int, float, np.number, np.bool_)):
        x = np.asarray(x, dtype=dtype)
    return x if x.dtype == dtype else x.astype(dtype)


class Dense(Layer):
    """``activation(x @ weight.T + bias)``: weight ``(out, in)``, bias ``(out,)``,
    input ``(in,)`` or ``(batch, in)``.

    ``Dense(in, out, activation)`` initialises the weight with ``init(out, in, rng=rng,
    dtype=dtype)``; ``Dense(weight_array, activation=..., bias=...)`` uses given arrays.
    ``bias`` is ``True`` (zeros), ``False`` (none) or an array.
    """

    __tree_fields__ = ("weight", "bias")

    def __init__(self, in_, out=None, activation=activations.identity, *, bias=True,
                 init=glorot_uniform, rng=None, dtype=np.float32):
        if isinstance(in_, np.ndarray):
            if out is not None:
                raise TypeError("Dense(weight_array, ...) takes no output size")
            weight = in_
            if weight.ndim != 2:
                raise ValueError(f"Dense weight must be 2-d (out, in), got shape {weight.shape}")
        else:
            if out is None:
                raise TypeError("Dense needs both sizes: Dense(in, out, activation)")
            weight = np.asarray(init(out, in_, rng=rng, dtype=dtype))
        self.weight = weight
        if bias is True:
            self.bias = np.zeros(weight.shape[0], dtype=weight.dtype)
        elif bias is False or bias is None:
            self.bias = None
        else:
            self.bias = np.asarray(bias, dtype=weight.dtype)
            if self.bias.shape != (weight.shape[0],):
                raise ValueError(f"Dense bias must have shape ({weight.shape[0]},), "
                                 f"got {self.bias.shape}")
        self.activation = activation

    def __call__(self, x):
        x = as_input(x, self.weight.dtype)
        y = x @ self.weight.T
        if self.bias is not None:
            y = y + self.bias
        return self.activation(y)

    def show_string(self):
        out, in_ = self.weight.shape
        s = f"Dense({in_} => {out}"
        if self.activation is not activations.identity:
            s += ", " + show.function_name(self.activation)
        if self.bias is None:
            s += "; bias=False"
        return s + ")"


class Embedding(Layer):
    """A lookup table with weight ``(dim, vocab)``: an int index gives the column
    ``weight[:, i]`` (shape ``(dim,)``), an int array of shape ``(batch,)`` gives
    ``(batch, dim)``.  ``Embedding(weight_array)`` uses a given table."""

    __tree_fields__ = ("weight",)

    def __init__(self, vocab, dim=None, *, init=glorot_uniform, rng=None, dtype=np.float32):
        if isinstance(vocab, np.ndarray):
            if dim is not None:
                raise TypeError("Embedding(weight_array) takes no dimension")
            self.weight = vocab
        else:
            if dim is None:
                raise TypeError("Embedding needs both sizes: Embedding(vocab, dim)")
            self.weight = np.asarray(init(dim, vocab, rng=rng, dtype=dtype))

    def __call__(self, idx):
        idx = np.asarray(idx)
        if idx.dtype.kind not in "iu":
            raise TypeError(f"Embedding expects integer indices, got dtype {idx.dtype}")
        if idx.ndim > 1:
            raise ValueError(f"Embedding expects an int or a 1-d int array, got shape {idx.shape}")
        if idx.ndim == 0:
            return self.weight[:, int(idx)]
        return self.weight[:, idx].T

    def show_string(self):
        dim, vocab = self.weight.shape
        return f"Embedding({vocab} => {dim})"


class Chain(Layer):
    """Layers applied in sequence: ``Chain(l1, l2, ...)`` or named ``Chain(enc=..., dec=...)``.

    ``chain.layers`` is a tuple (or a dict for the named form); a chain supports
    ``len``, iteration over its layers, ``chain[i]``, ``chain["name"]``, ``chain.name``
    and slicing.  Elements may be any callables (``only``, ``softmax``, lambdas).
    """

    __tree_fields__ = ("layers",)

    def __init__(self, *layers, **named):
        if layers and named:
            raise TypeError("Chain takes either positional or named layers, not both")
        self.layers = dict(named) if named else tuple(layers)
        for l in self._list():
            if not callable(l):
                raise TypeError(f"Chain elements must be callable, got {l!r}")

    def _list(self):
        return list(self.layers.values()) if isinstance(self.layers, dict) else list(self.layers)

    def __call__(self, x):
        layers = self.layers
        for l in layers.values() if type(layers) is dict else layers:
            x = l(x)
        return x

    def __len__(self):
        return len(self.layers)

    def __iter__(self):
        return iter(self._list())

    def __getitem__(self, i):
        if isinstance(i, str):
            return self.layers[i]
        if isinstance(i, slice):
            if isinstance(self.layers, dict):
                return Chain(**dict(list(self.layers.items())[i]))
            return Chain(*self.layers[i])
        return self._list()[i]

    def __getattr__(self, name):
        layers = self.__dict__.get("layers")
        if isinstance(layers, dict) and name in layers:
            return layers[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
