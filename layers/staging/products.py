"""Matrix products in the generated program: BLAS for large ones, loops for small ones.

A product of at least ``BLAS_MIN_WORK`` multiply-adds per matrix becomes ``np.dot`` of 2-D
arrays viewing the flat buffers (``kernels.matrix_c``, ``matrix_f`` when the view is
column-major) into a fresh slice of the workspace, through ``kernels.dot_into``, which
Numba keeps in its cache (its compile of ``np.dot`` for new layouts is 0.1 s of a first
gradient); adcore differentiates the BLAS call
with its own rules (``adcore.rules.blas``), so forward and reverse run at BLAS speed.
Smaller products (the seed model's 1x23 layers) stay loops (``kernels.gemm``, written into the program, summing
in the result's dtype as BLAS does), which
LLVM specialises on their static sizes and which cost no call overhead.  An operand
that is not a plain C- or F-ordered matrix (broadcast, strided slice, other dtype) is
first copied into the workspace.
"""
import numpy as np

from .. import kernels
from .views import View

# Multiply-adds of one (n, k) @ (k, m) product from which np.dot is used: the seed's
# 1x1x23 products stay loops, the MLPs' (>= 40000) go to BLAS.  The crossover in between
# has not been measured yet.
BLAS_MIN_WORK = 4096


def uses_blas(n, k, m):
    return n * k * m >= BLAS_MIN_WORK


def lower_matmul(low, a, b, value):
    """Emit ``a @ b`` (views, at least 1-D) into a fresh workspace slice; returns its view."""
    if len(a.shape) == 1:
        a = View(a.base, a.off, (1,) + a.shape, (0,) + a.strides, a.dtype)
    if len(b.shape) == 1:
        b = View(b.base, b.off, b.shape + (1,), b.strides + (0,), b.dtype)
    n, k, m = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    full = low.buffer(batch + (n, m), value.dtype)
    if uses_blas(n, k, m):
        a, b = (_matrix_ready(low, x, value.dtype) for x in (a, b))
        a, b = a.broadcast(batch + (n, k)), b.broadcast(batch + (k, m))
        idx = low.open_loops(batch)
        z = ["0", "0"]
        out = View(full.base, full.off, (n, m), full.strides[-2:], full.dtype)
        low.emit(f"K.dot_into({_matrix(a, a.offset(idx + z))}, {_matrix(b, b.offset(idx + z))}, "
                 f"{_matrix(out, full.offset(idx + z))})")
        low.close_loops(idx)
    else:
        a, b = a.broadcast(batch + (n, k)), b.broadcast(batch + (k, m))
        idx = low.open_loops(batch)
        z = ["0", "0"]
        low.emit_kernel(kernels.gemm, full.base, full.offset(idx + z), full.strides[-2], full.strides[-1],
                        a.base, a.offset(idx + z), a.strides[-2], a.strides[-1],
                        b.base, b.offset(idx + z), b.strides[-2], b.strides[-1], n, k, m,
                        value.dtype)
        low.close_loops(idx)
    return full.reshape(value.shape)


def _order(v):
    """``"C"`` or ``"F"`` when the last two axes of ``v`` are a dense matrix in that order."""
    r, c = v.shape[-2:]
    s0, s1 = v.strides[-2:]
    if (c == 1 or s1 == 1) and (r == 1 or s0 == c):
        return "C"
    if (r == 1 or s0 == 1) and (c == 1 or s1 == r):
        return "F"
    return None


def _matrix_ready(low, v, dtype):
    """``v`` itself when each of its matrices is dense and of ``dtype``, else a copy."""
    if v.base is not None and v.dtype == dtype and _order(v) is not None:
        return v
    return low.copy(v, dtype)


def _matrix(v, start):
    """The expression of the 2-D array viewing the matrix of ``v`` at the flat offset
    expression ``start``."""
    r, c = v.shape[-2:]
    return f"K.matrix_{_order(v).lower()}({v.base}, {start}, {r}, {c})"
