"""Convolution and pooling on ``(batch, channels, *spatial)`` arrays: ``Conv``, ``MaxPool``,
``MeanPool``, ``GlobalMeanPool`` and ``flatten`` (one or two spatial axes).

The window computations are Numba kernels (``layers.conv_kernels``) called through
``kernel_call``; a 1-d layer runs the 2-d kernel on a height of one.
"""
import math

import numpy as np

from . import activations, conv_kernels, show
from .checks import expect_shape
from .core import Layer, as_input
from .init import glorot_uniform
from .njit_layer import kernel_call

__all__ = ["Conv", "MaxPool", "MeanPool", "GlobalMeanPool", "flatten"]

_SPATIAL = ("height", "width")


def _per_axis(v, nd, what):
    """An int or a tuple of ``nd`` positive ints."""
    t = (v,) * nd if isinstance(v, (int, np.integer)) else tuple(v)
    if len(t) != nd or not all(isinstance(n, (int, np.integer)) and n >= 1 for n in t):
        raise ValueError(f"{what} must be a positive int or a tuple of {nd}, got {v!r}")
    return tuple(int(n) for n in t)


def _padding(pad, nd, window, dilation):
    """``(lo, hi)`` per spatial axis from an int, ``nd`` ints, ``2 nd`` ints or ``"same"``
    (Flux's ``SamePad``: ``dilation (k - 1)`` in all, the larger half first)."""
    if isinstance(pad, str):
        if pad != "same":
            raise ValueError(f'pad must be an int, a tuple or "same", got {pad!r}')
        total = [d * (k - 1) for k, d in zip(window, dilation)]
        return tuple((-(-t // 2), t // 2) for t in total)
    t = (pad,) * nd if isinstance(pad, (int, np.integer)) else tuple(pad)
    if not all(isinstance(n, (int, np.integer)) and n >= 0 for n in t) or len(t) not in (nd, 2 * nd):
        raise ValueError(f"pad must be a non-negative int or a tuple of {nd} or {2 * nd}, got {pad!r}")
    t = tuple(int(n) for n in t)
    return tuple((p, p) for p in t) if len(t) == nd else tuple(zip(t[::2], t[1::2]))


def _tuple_string(t):
    """Flux's ``_maybetuple_string``: one number when all are equal, else the tuple."""
    return str(t[0]) if len(set(t)) == 1 else str(tuple(t))


def _out_size(n, pad, window, stride, dilation):
    return (n + pad[0] + pad[1] - dilation * (window - 1) - 1) // stride + 1


def _lift(nd, t, neutral):
    """A per-axis parameter of a 1-d layer lifted to the 2-d kernels: ``neutral`` (the value
    for a height of one) prepended."""
    return (neutral,) + tuple(t) if nd == 1 else tuple(t)


class _Window:
    """What convolution and pooling share: window, stride, padding, dilation and the
    output shape for an input shape."""

    def _setup(self, window, stride, pad, dilation):
        if isinstance(window, (int, np.integer)) or len(tuple(window)) not in (1, 2):
            raise ValueError(f"the window must be a tuple of 1 or 2 sizes, e.g. (3, 3), got {window!r}")
        self.window = _per_axis(window, len(tuple(window)), "the window")
        nd = len(self.window)
        self.stride = _per_axis(stride, nd, "stride")
        self.dilation = _per_axis(dilation, nd, "dilation")
        self.pad = _padding(pad, nd, self.window, self.dilation)

    def _kernel_args(self):
        """``(stride, pad_lo)`` per axis of the 2-d kernel."""
        nd = len(self.window)
        return _lift(nd, self.stride, 1), _lift(nd, tuple(p[0] for p in self.pad), 0)

    def _out_shape(self, x):
        spatial = x.shape[2:]
        out = tuple(_out_size(n, p, k, s, d) for n, p, k, s, d in
                    zip(spatial, self.pad, self.window, self.stride, self.dilation))
        if min(out) < 1:
            raise ValueError(f"{self.show_string()}: an input of spatial size {tuple(spatial)} "
                             f"is smaller than the window")
        return out

    def _pad_option(self):
        flat = tuple(v for p in self.pad for v in p)
        return ", pad=" + _tuple_string(flat) if any(flat) else ""

    def _pattern(self, channels):
        nd = len(self.window)
        return ("batch", channels) + (_SPATIAL[1:] if nd == 1 else _SPATIAL)


class Conv(_Window, Layer):
    """``act(conv(x, weight) + bias)``: a cross-correlation (the kernel is not flipped, as
    PyTorch's ``Conv2d``) of ``x`` of shape ``(batch, cin, height, width)`` (or
    ``(batch, cin, length)`` for a 1-d window ``(k,)``) with ``weight`` of shape
    ``(cout, cin, *window)``, giving ``(batch, cout, *out_spatial)``.

    ``stride`` and ``dilation`` are an int or one per spatial axis; ``pad`` is an int, one
    per axis, ``(lo, hi)`` pairs flattened per axis, or ``"same"`` (output size = input
    size at stride 1).  ``bias`` is ``True`` (zeros) or ``False``.
    """

    __tree_fields__ = ("weight", "bias")

    def __init__(self, window, cin, cout, act=activations.identity, *, stride=1, pad=0,
                 dilation=1, bias=True, init=glorot_uniform, rng=None, dtype=np.float32):
        self._setup(window, stride, pad, dilation)
        self.weight = np.asarray(init(cout, cin, *self.window, rng=rng, dtype=dtype))
        self.bias = np.zeros(cout, self.weight.dtype) if bias else None
        self.act = act

    def __call__(self, x):
        x = as_input(x, self.weight.dtype)
        cout, cin = self.weight.shape[:2]
        expect_shape(self, x, self._pattern(cin))
        out = self._out_shape(x)
        nd = len(self.window)
        (sh, sw), (ph, pw) = self._kernel_args()
        dh, dw = _lift(nd, self.dilation, 1)
        x4 = x.reshape(x.shape[:2] + (1,) + x.shape[2:]) if nd == 1 else x
        w4 = self.weight.reshape((cout, cin, 1) + self.window) if nd == 1 else self.weight
        shape4 = (x.shape[0], cout) + _lift(nd, out, 1)
        y = kernel_call(conv_kernels.conv2d, shape4, x4, w4, sh, sw, ph, pw, dh, dw)
        if nd == 1:
            y = y.reshape((x.shape[0], cout) + out)
        if self.bias is not None:
            y = y + self.bias.reshape((cout,) + (1,) * nd)
        return self.act(y)

    def show_string(self):
        cout, cin = self.weight.shape[:2]
        s = f"Conv({self.window}, {cin} => {cout}"
        if self.act is not activations.identity:
            s += ", " + show.function_name(self.act)
        s += self._pad_option()
        if any(v != 1 for v in self.stride):
            s += ", stride=" + _tuple_string(self.stride)
        if any(v != 1 for v in self.dilation):
            s += ", dilation=" + _tuple_string(self.dilation)
        if self.bias is None:
            s += ", bias=False"
        return s + ")"


class _Pool(_Window, Layer):
    """A window reduction on ``(batch, channels, *spatial)``; ``stride`` defaults to the
    window; ``pad`` (an int or one per axis, each smaller than the window) is ignored
    by the max and counted as zeros by the mean (``mean`` picks the reduction)."""

    mean = False

    def __init__(self, window, stride=None, *, pad=0):
        self._setup(window, window if stride is None else stride, pad, 1)
        if any(p >= k for (lo, hi), k in zip(self.pad, self.window) for p in (lo, hi)):
            raise ValueError(f"{type(self).__name__}: pad {pad!r} must be smaller than the "
                             f"window {self.window}")

    def __call__(self, x):
        expect_shape(self, x, self._pattern("channels"))
        nd = len(self.window)
        out = self._out_shape(x)
        kh, kw = _lift(nd, self.window, 1)
        (sh, sw), (ph, pw) = self._kernel_args()
        x4 = x.reshape(x.shape[:2] + (1,) + x.shape[2:]) if nd == 1 else x
        y = kernel_call(conv_kernels.pool2d, x.shape[:2] + _lift(nd, out, 1), x4,
                        kh, kw, sh, sw, ph, pw, int(self.mean))
        return y.reshape(x.shape[:2] + out) if nd == 1 else y

    def show_string(self):
        s = f"{type(self).__name__}({self.window}" + self._pad_option()
        if self.stride != self.window:
            s += ", stride=" + _tuple_string(self.stride)
        return s + ")"


class MaxPool(_Pool):
    """The maximum over each window: ``MaxPool((2, 2))`` halves height and width."""
    mean = False


class MeanPool(_Pool):
    """The mean over each window (padding counts as zeros, as NNlib's ``meanpool``)."""
    mean = True


class GlobalMeanPool(Layer):
    """The mean over all spatial axes: ``(batch, channels, *spatial)`` to
    ``(batch, channels, 1, ...)``, as Flux."""

    def __call__(self, x):
        if np.ndim(x) < 3:
            raise ValueError(f"GlobalMeanPool() expects an input of shape (batch, channels, "
                             f"*spatial), got shape {np.shape(x)}")
        return np.mean(x, axis=tuple(range(2, np.ndim(x))), keepdims=True)

    def show_string(self):
        return "GlobalMeanPool()"


def flatten(x):
    """``(batch, ...)`` to ``(batch, n)``: the batch axis kept, the rest in row-major order."""
    if np.ndim(x) < 1:
        raise ValueError("flatten expects an array with a batch axis, got a scalar")
    return x.reshape(x.shape[0], math.prod(x.shape[1:]))
