"""Recurrent layers on ``(batch, time, features)`` sequences: ``RNN``, ``LSTM`` and ``GRU``
(Flux's cells, PyTorch's gate order), each returning the whole output sequence
``(batch, time, nout)``.  The state starts at zero at every call.

A layer holds ``Wi`` ``(gates * nout, nin)``, ``Wh`` ``(gates * nout, nout)`` and ``b``
``(gates * nout,)``.  The input projections of all steps are one numpy product; the
recurrence is a Numba kernel (``layers.recurrent_kernels``) called through
``kernel_call``, so both engines differentiate it with adcore.
"""
import numpy as np

from . import activations, recurrent_kernels as kernels, show
from .checks import expect_shape
from .core import Layer, as_input
from .init import _rng, glorot_uniform
from .njit_layer import kernel_call

__all__ = ["RNN", "LSTM", "GRU"]


class _Recurrent(Layer):
    """What the three layers share: the weights, the input check and the projection."""

    __tree_fields__ = ("Wi", "Wh", "b")
    gates = 1

    def __init__(self, nin, nout, *, init=glorot_uniform, rng=None, dtype=np.float32):
        rng = _rng(rng)                      # one generator for both weights
        g = self.gates * nout
        self.Wi = np.asarray(init(g, nin, rng=rng, dtype=dtype))
        self.Wh = np.asarray(init(g, nout, rng=rng, dtype=dtype))
        self.b = np.zeros(g, self.Wi.dtype)

    @property
    def sizes(self):
        """``(nin, nout)``."""
        return self.Wi.shape[1], self.Wh.shape[1]

    def _scan(self, x, kernel, *constants):
        x = as_input(x, self.Wi.dtype)
        nin, nout = self.sizes
        expect_shape(self, x, ("batch", "time", nin))
        nb, nt, _ = x.shape
        proj = x.reshape(nb * nt, nin) @ self.Wi.T + self.b
        proj = proj.reshape(nb, nt, self.gates * nout)
        return kernel_call(kernel, (nb, nt, nout), proj, self.Wh, *constants)

    def show_string(self):
        nin, nout = self.sizes
        return f"{type(self).__name__}({nin} => {nout})"


_ACTIVATIONS = {activations.identity: kernels.IDENTITY, activations.tanh: kernels.TANH,
                np.tanh: kernels.TANH, activations.relu: kernels.RELU,
                activations.sigmoid: kernels.SIGMOID}


class RNN(_Recurrent):
    """``h_t = act(Wi x_t + Wh h_{t-1} + b)``; ``act`` is ``tanh`` (the default), ``relu``,
    ``sigmoid`` or ``identity``."""

    def __init__(self, nin, nout, act=activations.tanh, **options):
        if act not in _ACTIVATIONS:
            names = ", ".join(sorted({show.function_name(f) for f in _ACTIVATIONS}))
            raise ValueError(f"RNN supports the activations {names}; got {act!r}")
        super().__init__(nin, nout, **options)
        self.act = act

    def __call__(self, x):
        return self._scan(x, kernels.rnn, _ACTIVATIONS[self.act])

    def show_string(self):
        return super().show_string()[:-1] + f", {show.function_name(self.act)})"


class LSTM(_Recurrent):
    """Gates ``i, f, g, o`` stacked in ``Wi``, ``Wh``, ``b``: ``c_t = σ(f) c_{t-1} +
    σ(i) tanh(g)``, ``h_t = σ(o) tanh(c_t)``; returns the ``h_t``."""

    gates = 4

    def __call__(self, x):
        return self._scan(x, kernels.lstm)


class GRU(_Recurrent):
    """Gates ``r, z, h̃`` stacked in ``Wi``, ``Wh``, ``b`` (Flux's ``GRUCell``, one bias):
    ``h̃ = tanh(Wi_h x_t + r (Wh_h h_{t-1}) + b_h)``, ``h_t = (1 - z) h̃ + z h_{t-1}``."""

    gates = 3

    def __call__(self, x):
        return self._scan(x, kernels.gru)
