"""Layers that combine others: ``SkipConnection`` and ``Parallel`` (Flux's)."""
import functools

import numpy as np

from .core import Layer

__all__ = ["SkipConnection", "Parallel"]


class SkipConnection(Layer):
    """``connection(layers(x), x)``: ``SkipConnection(Dense(4, 4), operator.add)`` is a
    residual block."""

    __tree_fields__ = ("layers",)

    def __init__(self, layers, connection):
        self.layers, self.connection = layers, connection

    def __call__(self, x):
        return self.connection(self.layers(x), x)

    def show_children(self):
        return [(None, self.layers), (None, self.connection)]


class Parallel(Layer):
    """``connection(l1(x), l2(x), ...)`` for one input, ``connection(l1(x1), l2(x2), ...)``
    for one input per layer (a tuple is splatted).  A binary numpy ufunc such as
    ``np.add`` combines the outputs pairwise, as Flux's ``+``."""

    __tree_fields__ = ("layers",)

    def __init__(self, connection, *layers):
        if not layers:
            raise TypeError("Parallel needs at least one layer: Parallel(connection, layers...)")
        self.connection, self.layers = connection, tuple(layers)

    def __call__(self, *xs):
        if len(xs) == 1 and isinstance(xs[0], tuple):
            xs = xs[0]
        if len(xs) == 1:
            ys = [l(xs[0]) for l in self.layers]
        elif len(xs) == len(self.layers):
            ys = [l(x) for l, x in zip(self.layers, xs)]
        else:
            raise ValueError(f"Parallel with {len(self.layers)} layers takes one input or "
                             f"{len(self.layers)}, got {len(xs)}")
        if isinstance(self.connection, np.ufunc) and self.connection.nin == 2:
            return functools.reduce(self.connection, ys)
        return self.connection(*ys)

    def show_children(self):
        return [(None, self.connection)] + [(None, l) for l in self.layers]
