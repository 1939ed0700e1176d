"""Numba kernels of the compiled path (``Duplicated`` models).

The program generated from a recording (``layers.staging``) calls these on flat
buffers, or has their loops written into it, so adcore differentiates them at the LLVM
level: none has a backward.  ``S`` holds the scalar helpers of elementwise ops
(``adcore.tape.scalars``, compiled); the loop kernels work on strided views of flat
buffers (offset and strides in elements, static at the call site, so LLVM specialises
each one).
"""
import math
import re
import types

import numba
import numpy as np
from numba.core import types as nbtypes
from numba.extending import intrinsic

from adcore import numba_abi
from adcore.tape import scalars


def _njit(f):
    """Inlined by Numba where the program calls it: a callee compiled on its own costs a
    compile with wrappers and machine code (0.05-0.1 s each, the first time in a
    process)."""
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


# -- written into the program as source -------------------------------------------------
# The loop kernels below return the program's lines for one call (``fresh(prefix)`` names
# their variables; the other arguments are expressions): Numba inlining a callee at each
# call site (``inline="always"``) interprets its bytecode and copies its IR again each time
# (0.02-0.05 s a call in a first gradient), and a callee compiled on its own costs a compile
# per distinct set of the constant sizes it is passed.  Each callee variable of the njit
# kernels they replace is a variable of its own, so Numba types them alike.
def _p(e):
    """Expression ``e`` parenthesised unless it is a name or a number."""
    e = str(e)
    return e if re.fullmatch(r"-?[\w.]+", e) else f"({e})"


def gemm(fresh, out, oo, os0, os1, a, ao, as0, as1, b, bo, bs0, bs1, n, k, m, dtype):
    """``out[i, j] = sum_l a[i, l] b[l, j]`` for ``(n, k) @ (k, m)`` strided views of flat
    buffers (offsets and strides in elements), accumulated in the result's ``dtype``, as
    numpy's (BLAS's) product does: a float32 sum in float64 would convert every term, and
    its reverse every adjoint (8-12% of the seed model's training step)."""
    i, j, l, acc = fresh("g"), fresh("g"), fresh("g"), fresh("acc")
    zero = "np.float32(0.0)" if np.dtype(dtype) == np.float32 else "0.0"
    return [f"for {i} in range({n}):",
            f"    for {j} in range({m}):",
            f"        {acc} = {zero}",
            f"        for {l} in range({k}):",
            f"            {acc} += {a}[{_p(ao)} + {i} * {_p(as0)} + {l} * {_p(as1)}] * "
            f"{b}[{_p(bo)} + {l} * {_p(bs0)} + {j} * {_p(bs1)}]",
            f"        {out}[{_p(oo)} + {i} * {_p(os0)} + {j} * {_p(os1)}] = {acc}"]


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
            itemsize = np.dtype(str(sig.return_type.dtype)).itemsize
            steps = (c * itemsize, itemsize) if layout == "C" else (itemsize, r * itemsize)
            return numba_abi.flat_matrix_view(context, builder, sig.args[0], args[0], args[1],
                                        sig.return_type, (r, c), steps)
        return nbtypes.Array(flat.dtype, 2, layout)(flat, start, rows, cols), codegen
    typer.__name__ = f"matrix_{layout.lower()}"
    return intrinsic(typer)


matrix_c, matrix_f = _matrix_view("C"), _matrix_view("F")


# -- along one axis (``x[xo + i * xs]`` for ``i < n``; written into the program) ----------
def _line_max(fresh, shift, x, xo, xs, n):
    """``shift`` = the maximum of the line, 0 when it is not finite (for a stable ``exp``)."""
    m, i, v = fresh("m"), fresh("l"), fresh("v")
    return [f"{m} = {x}[{xo}]",
            f"for {i} in range(1, {n}):",
            f"    {v} = {x}[{_p(xo)} + {i} * {_p(xs)}]",
            f"    if {v} > {m}:",
            f"        {m} = {v}",
            f"{shift} = {m} if math.isfinite({m}) else 0.0"]


def _sum_exp(fresh, s, shift, x, xo, xs, n):
    """``s`` = the sum of ``exp(x - shift)`` along the line (float64)."""
    i = fresh("l")
    return [f"{s} = 0.0",
            f"for {i} in range({n}):",
            f"    {s} += math.exp({x}[{_p(xo)} + {i} * {_p(xs)}] - {shift})"]


def logsumexp_line(fresh, result, x, xo, xs, n):
    """``result = log(sum(exp(x)))`` along the line, shifted by its max."""
    shift, s = fresh("shift"), fresh("s")
    return (_line_max(fresh, shift, x, xo, xs, n) + _sum_exp(fresh, s, shift, x, xo, xs, n) +
            [f"{result} = math.log({s}) + {shift}"])


def softmax_line(fresh, out, oo, os, x, xo, xs, n):
    """``out = exp(x - max) / sum(exp(x - max))`` along one line."""
    shift, s, i = fresh("shift"), fresh("s"), fresh("l")
    return (_line_max(fresh, shift, x, xo, xs, n) + _sum_exp(fresh, s, shift, x, xo, xs, n) +
            [f"for {i} in range({n}):",
             f"    {out}[{_p(oo)} + {i} * {_p(os)}] = math.exp({x}[{_p(xo)} + {i} * {_p(xs)}] - {shift}) / {s}"])


def logsoftmax_line(fresh, out, oo, os, x, xo, xs, n):
    """``out = x - logsumexp(x)`` along one line."""
    lse, i = fresh("lse"), fresh("l")
    return (logsumexp_line(fresh, lse, x, xo, xs, n) +
            [f"for {i} in range({n}):",
             f"    {out}[{_p(oo)} + {i} * {_p(os)}] = {x}[{_p(xo)} + {i} * {_p(xs)}] - {lse}"])
