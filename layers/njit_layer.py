"""Layers whose forward computation is the user's own ``@numba.njit`` kernel.

A kernel takes the output array first and writes it (returning nothing); a layer calls
it through ``kernel_call``, giving the output's shape::

    @numba.njit
    def scale_kernel(out, x, s):              # out[..., j] = x[..., j] * s[j]
        for i in range(x.shape[0]):
            for j in range(x.shape[1]):
                out[i, j] = x[i, j] * s[j]

    class Scale(layers.Layer):
        __tree_fields__ = ("s",)
        def __init__(self, n): self.s = np.ones(n, np.float32)
        def __call__(self, x):
            return layers.kernel_call(scale_kernel, x.shape, x, self.s)

No backward is written.  With ``Duplicated(model)`` the kernel is inlined into the
compiled program that adcore differentiates; on the tape engine the call is one op
whose vector-Jacobian product is adcore's reverse mode of the kernel.  On plain arrays
it just runs the kernel.  Operands are float arrays or floats (differentiated) and
anything Numba accepts as constants (ints, integer arrays).

A kernel may also update a constant array operand in place (running statistics, a
random state): the update happens once per call, as in a plain call.  The tape's
vector-Jacobian product replays the kernel on copies of the constants as they were
before the call, and staging's trace runs it on copies, so neither repeats the update.
"""
import numpy as np

import adcore
from adcore.annotations import Active, Const, Duplicated, Reverse
from adcore.tape.rules import RULES, rule
from adcore.tape.tracked import Tracked, apply

from .staging.trace import active as tracing

__all__ = ["kernel_call"]


def _forward(*operands, kernel, shape, dtype, before):
    if tracing():
        operands = [b if b is not None else v for v, b in zip(operands, before)]
    out = np.zeros(shape, dtype)
    kernel(out, *operands)
    return out


def _kernel_vjp(g, rec):
    """adcore's reverse mode of the kernel, seeded with ``g`` in the output's shadow."""
    a = rec.attrs
    anns = [Duplicated(np.zeros(a["shape"], a["dtype"]), np.array(g, a["dtype"], order="C"))]
    for i, v, b in zip(rec.inputs, rec.args, a["before"]):
        if i is None:
            anns.append(Const(v if b is None else b.copy()))
        elif isinstance(v, np.ndarray) and v.ndim:
            v = np.ascontiguousarray(v)
            anns.append(Duplicated(v, np.zeros_like(v)))
        else:
            anns.append(Active(v))
    derivs = adcore.autodiff(Reverse, a["kernel"], *anns)
    out = []
    for ann, d in zip(anns[1:], derivs[1:]):
        out.append(ann.dval if isinstance(ann, Duplicated) else
                   None if isinstance(ann, Const) else np.asarray(d, ann.val.dtype))
    return tuple(out)


def kernel_call(kernel, shape, *operands, dtype=None):
    """``kernel(out, *operands)`` on a new zero array ``out`` of ``shape``; returns ``out``.

    ``dtype`` defaults to the result type of the float operands.  Differentiable by both
    engines without a backward (see the module documentation).
    """
    if dtype is None:
        floats = [np.result_type(o.value if type(o) is Tracked else o) for o in operands
                  if np.result_type(o.value if type(o) is Tracked else o).kind == "f"]
        dtype = np.result_type(*floats) if floats else np.float64
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(n) for n in shape)
    if "njit_kernel" not in RULES:
        rule("njit_kernel", _forward)(_kernel_vjp)   # the tape op, registered on first use
    before = tuple(o.copy() if isinstance(o, np.ndarray) and o.ndim else None for o in operands)
    return apply("njit_kernel", operands, {"kernel": kernel, "shape": shape,
                                           "dtype": np.dtype(dtype), "before": before})
