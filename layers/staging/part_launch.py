"""Running the parts of a split batch on Numba's threads: ``launch(function, n, table)``
calls the native ``void function(i64 t, i64 table)`` for ``t`` in ``range(n)`` in a
``prange`` (on Numba's threading layer and thread count), passing every call the same
``table`` (an address).  Compiled once and kept in Numba's disk cache, so a split program
compiles only its own part functions (plain ``cfunc``s), not a parallel loop."""
import numba
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic


@intrinsic
def _call(typingctx, function, t, table):
    """Call the native ``void(i64, i64)`` at address ``function`` with ``t`` and ``table``."""
    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        callee = builder.inttoptr(args[0], ir.FunctionType(ir.VoidType(), [i64, i64]).as_pointer())
        builder.call(callee, [args[1], args[2]])
        return context.get_dummy_value()
    return types.void(types.int64, types.int64, types.int64), codegen


@numba.njit(parallel=True, cache=True)
def launch(function, n, table):
    """``function(t, table)`` for every ``t`` in ``range(n)``, on Numba's threads."""
    for t in numba.prange(n):
        _call(function, t, table)
