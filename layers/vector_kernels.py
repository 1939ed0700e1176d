"""Elementwise math on contiguous slices in explicit vectors, for the compiled path.

LLVM fully unrolls a short loop of ``math.tanh`` (the seed model's 23 units) before its
vectorisers run, and then keeps the calls scalar.  ``map_lines`` writes into a staged
program the loop ``out[oo + i] = op(x[xo + i])`` for ``i < n`` (``n`` at least one
vector's lanes; ``out`` and ``x`` distinct), in blocks of one 256-bit vector through
LLVM's vector intrinsic (``llvm.tanh.v8f32``; ``vector_op(op, dtype)``), and the
elements left over in one more vector call whose lanes are read and written one by one
(``vector_op(op, dtype, count)``, the other lanes zero), unless both are workspace
buffers reserving whole vectors (``staging.operands.LINE_BYTES``): then ``n`` is rounded up
and the last vector runs into their reserved tails.  adcore differentiates the
intrinsics with its rule table, and maps them to libmvec in the gradient
(:mod:`adcore.backend.vector_math`); elsewhere they are LLVM's.  (Ending with a whole vector that
overlaps the one before, as :func:`libmvec_map_kernel` does, makes the reverse pass read
the outputs' shadows in vectors that straddle the narrower stores before them, which the
processor cannot forward: stalls that showed in the seed model's `train` under load.)
"""
import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from adcore.backend import vector_math

OPS = vector_math.FUNCTIONS          # the ops libmvec implements, staged in vectors
VECTOR_BYTES = 32
_ELEMENTS = {np.dtype(np.float32): (ir.FloatType(), "f32"),
             np.dtype(np.float64): (ir.DoubleType(), "f64")}


def lanes(dtype):
    """Elements of ``dtype`` in one vector."""
    return VECTOR_BYTES // np.dtype(dtype).itemsize


def _intrinsic_name(op, dtype):
    return f"llvm.{op}.v{lanes(dtype)}{_ELEMENTS[np.dtype(dtype)][1]}"


def _vector_op(op, dtype, callee=None, count=None):
    """An intrinsic ``f(out, oo, x, xo)``: ``out[oo:oo + L] = op(x[xo:xo + L])`` as one
    call of LLVM's vector intrinsic (``L = lanes(dtype)``), or of ``callee`` (a function of
    the same vector type); with ``count`` (less than ``L``), the first ``count`` elements
    only, read and written one by one (the other lanes zero)."""
    element, _ = _ELEMENTS[np.dtype(dtype)]
    vector = ir.VectorType(element, lanes(dtype))
    name = callee or _intrinsic_name(op, dtype)

    def typer(typingctx, out, oo, x, xo):
        def codegen(context, builder, sig, args):
            out_v, oo_v, x_v, xo_v = args
            out_a = context.make_array(sig.args[0])(context, builder, out_v)
            x_a = context.make_array(sig.args[2])(context, builder, x_v)
            src, dst = builder.gep(x_a.data, [xo_v]), builder.gep(out_a.data, [oo_v])
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector, [vector]), name)
            if count is None:
                y = builder.call(fn, [builder.load(builder.bitcast(src, vector.as_pointer()),
                                                   align=element_bytes)])
                builder.store(y, builder.bitcast(dst, vector.as_pointer()), align=element_bytes)
                return context.get_dummy_value()
            v = ir.Constant(vector, [ir.Constant(element, 0.0)] * lanes(dtype))
            for k in range(count):
                v = builder.insert_element(v, builder.load(builder.gep(src, [ir.Constant(ir.IntType(64), k)])),
                                           ir.Constant(ir.IntType(32), k))
            y = builder.call(fn, [v])
            for k in range(count):
                builder.store(builder.extract_element(y, ir.Constant(ir.IntType(32), k)),
                              builder.gep(dst, [ir.Constant(ir.IntType(64), k)]))
            return context.get_dummy_value()
        return types.void(out, oo, x, xo), codegen

    element_bytes = np.dtype(dtype).itemsize
    typer.__name__ = vector_name(op, dtype, count)
    return intrinsic(typer)


def _map(op, dtype, callee=None):
    vector, width = _vector_op(op, dtype, callee), lanes(dtype)

    def kernel(out, oo, x, xo, n):
        i = 0
        while i + width <= n:
            vector(out, oo + i, x, xo + i)
            i += width
        if i < n:                     # the last vector again, ending at n
            vector(out, oo + n - width, x, xo + n - width)
    kernel.__name__ = f"map_{op}_{np.dtype(dtype).name}"
    return numba.njit(cache=False, error_model="numpy")(kernel)


def vector_name(op, dtype, count=None):
    """The intrinsic's name in generated programs."""
    return f"vector_{op}_{np.dtype(dtype).name}" + (f"_first{count}" if count else "")


_VECTOR_OPS = {(op, np.dtype(t), count): _vector_op(op, t, count=count)
               for op in OPS for t in (np.float32, np.float64) for count in (None, *range(1, lanes(t)))}


def vector_op(op, dtype, count=None):
    """The intrinsic ``f(out, oo, x, xo)`` computing one vector of ``op`` on ``dtype`` (its
    first ``count`` elements), or None."""
    return _VECTOR_OPS.get((op, np.dtype(dtype), count))


def map_lines(fresh, vector, dtype, out, oo, x, xo, n):
    """The lines of a staged program computing ``out[oo + i] = op(x[xo + i])`` for
    ``i < n`` (``n`` a constant of at least one vector) through ``vector`` (the name of
    :func:`vector_op`'s intrinsic; ``{vector}_first{k}`` computes the ``k`` elements left
    over, see :func:`vector_name`): written into the program, it costs Numba no inlining
    or compile of a callee."""
    i, width = fresh("e"), lanes(dtype)
    lines = [f"{i} = 0",
             f"while {i} + {width} <= {n}:",
             f"    {vector}({out}, {oo} + {i}, {x}, {xo} + {i})",
             f"    {i} += {width}"]
    if n % width:                     # the last elements, one by one in one vector
        lines.append(f"{vector}_first{n % width}({out}, {oo} + {n - n % width}, {x}, {xo} + {n - n % width})")
    return lines


def libmvec_map_kernel(op, dtype):
    """An njit ``kernel(out, oo, x, xo, n)`` running :func:`map_lines`' loop with glibc's
    libmvec function itself, for Numba code that adcore
    does not compile (Numba's code generator would split LLVM's vector intrinsic into
    scalar libm calls): the fastest hand-written code one can write in Numba.  None
    without libmvec."""
    callee = vector_math.libmvec_name(_intrinsic_name(op, dtype))
    return None if callee is None else _map(op, dtype, callee)

