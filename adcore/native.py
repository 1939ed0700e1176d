"""From gradient IR to a callable: O3 with vectorisation, MCJIT, and a Numba stub.

The gradient function follows Numba's calling convention, so a Numba ``@intrinsic``
can call it like any compiled function: the stub's own exception handling re-raises a
kernel's Python exception, and the call costs a native call plus argument unboxing.
"""
import threading

import llvmlite.binding as llvm
import numba
from numba.core import cgutils
from numba.extending import intrinsic

from .cleanup import target_machine

_lock = threading.Lock()
_engine = None


def optimise(module):
    """Full O3 with loop and SLP vectorisation."""
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(target_machine(), pto)
    pb.getModulePassManager().run(module, pb)


def compile_ir(text, symbol):
    """Parse, optimise and JIT-compile ``text``; register ``symbol`` for Numba to link against.

    Returns the optimised IR text."""
    global _engine
    module = llvm.parse_assembly(text)
    module.verify()
    optimise(module)
    with _lock:
        if _engine is None:
            _engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target_machine())
        _engine.add_module(module)
        _engine.finalize_object()
        llvm.add_symbol(symbol, _engine.get_function_address(symbol))
    return str(module)


def make_stub(symbol, argtypes, restype):
    """An njit function ``stub(*args)`` calling the native ``symbol`` with Numba's
    calling convention and returning ``restype``."""
    sig = restype(*argtypes)

    def codegen(context, builder, signature, args):
        fnty = context.call_conv.get_function_type(signature.return_type, signature.args)
        fn = cgutils.get_or_insert_function(builder.module, fnty, symbol)
        status, out = context.call_conv.call_function(
            builder, fn, signature.return_type, signature.args, args)
        with builder.if_then(status.is_error, likely=False):
            context.call_conv.return_status_propagate(builder, status)
        return out

    names = ", ".join(f"a{i}" for i in range(len(argtypes)))
    scope = {"sig": sig, "codegen": codegen}
    exec(f"def typer(typingctx, {names}):\n    return sig, codegen\n", scope)
    call = intrinsic(scope["typer"])
    scope = {"call": call}
    exec(f"def stub({names}):\n    return call({names})\n", scope)
    return numba.njit(scope["stub"])
