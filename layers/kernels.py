"""Numba kernels of the compiled path (``Duplicated`` models).

The program generated from a recording (``layers.staging``) calls these on flat
buffers, so adcore differentiates them at the LLVM level: none has a backward.
``S`` holds the scalar helpers of elementwise ops (``adcore.tape.scalars``, compiled);
the array kernels work on strided views of flat buffers (offset and strides in
elements, static at the call site, so LLVM specialises each call after inlining).
"""
import math
import types

import numba
import numpy as np
from numba.core import types as nbtypes
from numba.core.imputils import impl_ret_borrowed
from numba.extending import intrinsic
from numba.np.arrayobj import make_array, populate_array

from adcore.tape import scalars


def _njit(f):
    """Inlined by Numba where the program calls it: a callee compiled on its own costs a
    compile with wrappers and machine code (0.05-0.1 s each, the first time in a
    process), and the array kernels one per distinct set of the constant sizes a call
    passes, which Numba types as literals."""
    return numba.njit(cache=False, error_model="numpy", inline="always")(f)


# -- elementwise: the helpers the op tables' scalar templates call (``S.<name>``) -----
def _compiled(module):
    """A module holding ``module``'s functions (its ``__all__``) compiled by Numba."""
    out = types.ModuleType(f"{__name__}.{module.__name__.rsplit('.', 1)[-1]}")
    for name in module.__all__:
        setattr(out, name, _njit(getattr(module, name)))
    return out


S = _compiled(scalars)


def _sigmoid_in(dtype):
    one = dtype(1.0)

    def sigmoid(x):
        """``1 / (1 + exp(-x))`` in ``x``'s precision, without overflow and without a
        branch (the sign picks the numerator by a select): its reverse is one pass with
        no control flow, cheaper than ``S.sigmoid``'s two branches computed in float64."""
        e = math.exp(-abs(x))
        return (one if x >= 0 else e) / (one + e)
    return _njit(sigmoid)


sigmoid_float32, sigmoid_float64 = _sigmoid_in(np.float32), _sigmoid_in(np.float64)


# -- matrix product --------------------------------------------------------------------
@_njit
def gemm(out, oo, os0, os1, a, ao, as0, as1, b, bo, bs0, bs1, n, k, m):
    """``out[i, j] = sum_l a[i, l] b[l, j]`` for ``(n, k) @ (k, m)`` strided views."""
    for i in range(n):
        for j in range(m):
            acc = 0.0
            for l in range(k):
                acc += a[ao + i * as0 + l * as1] * b[bo + l * bs0 + j * bs1]
            out[oo + i * os0 + j * os1] = acc


@numba.njit(cache=True, error_model="numpy")
def dot_into(a, b, out):
    """``np.dot(a, b, out)`` of 2-D arrays (the large products).  Not inlined: Numba's
    compile of ``np.dot`` for the arrays' layouts is most of its cost, and Numba's cache
    keeps it from process to process."""
    np.dot(a, b, out)


def _matrix_view(layout):
    """An intrinsic ``f(flat, start, rows, cols)``: the ``(rows, cols)`` matrix (sizes literal
    ints) in ``layout`` ("C" or "F") viewing ``flat[start:start + rows * cols]`` of a
    contiguous 1-D array.  What ``flat[...].reshape(...)`` (``.T``) gives, without the
    subroutine Numba compiles for ``reshape`` (0.1 s of a first gradient) or its size check."""
    def typer(typingctx, flat, start, rows, cols):
        if not (isinstance(rows, nbtypes.IntegerLiteral) and isinstance(cols, nbtypes.IntegerLiteral)):
            return None
        r, c = rows.literal_value, cols.literal_value

        def codegen(context, builder, sig, args):
            src = make_array(sig.args[0])(context, builder, args[0])
            view = make_array(sig.return_type)(context, builder)
            itemsize = context.get_abi_sizeof(context.get_data_type(sig.return_type.dtype))
            steps = (c * itemsize, itemsize) if layout == "C" else (itemsize, r * itemsize)
            intp = context.get_value_type(nbtypes.intp)
            populate_array(view, data=builder.gep(src.data, [args[1]]),
                           shape=[intp(r), intp(c)], strides=[intp(s) for s in steps],
                           itemsize=intp(itemsize), meminfo=src.meminfo, parent=src.parent)
            return impl_ret_borrowed(context, builder, sig.return_type, view._getvalue())
        return nbtypes.Array(flat.dtype, 2, layout)(flat, start, rows, cols), codegen
    typer.__name__ = f"matrix_{layout.lower()}"
    return intrinsic(typer)


matrix_c, matrix_f = _matrix_view("C"), _matrix_view("F")


# -- along one axis ----------------------------------------------------------------------
@_njit
def _line_max(x, xo, xs, n):
    """The shift for a stable ``exp``: the maximum of the line, 0 when it is not finite."""
    m = x[xo]
    for i in range(1, n):
        v = x[xo + i * xs]
        if v > m:
            m = v
    return m if math.isfinite(m) else 0.0


@_njit
def logsumexp_line(x, xo, xs, n):
    """``log(sum(exp(x)))`` of the ``n`` entries at ``x[xo + i * xs]``, shifted by the max."""
    m = _line_max(x, xo, xs, n)
    s = 0.0
    for i in range(n):
        s += math.exp(x[xo + i * xs] - m)
    return math.log(s) + m


@_njit
def softmax_line(out, oo, os, x, xo, xs, n):
    """``out = exp(x - max) / sum(exp(x - max))`` along one line."""
    m = _line_max(x, xo, xs, n)
    s = 0.0
    for i in range(n):
        s += math.exp(x[xo + i * xs] - m)
    for i in range(n):
        out[oo + i * os] = math.exp(x[xo + i * xs] - m) / s


@_njit
def logsoftmax_line(out, oo, os, x, xo, xs, n):
    """``out = x - logsumexp(x)`` along one line."""
    lse = logsumexp_line(x, xo, xs, n)
    for i in range(n):
        out[oo + i * os] = x[xo + i * xs] - lse
