"""From gradient IR to a callable: O3 with vectorisation, MCJIT, and a Numba stub.

The gradient function follows Numba's calling convention, so a Numba ``@intrinsic``
can call it like any compiled function: the stub's own exception handling re-raises a
kernel's Python exception, and the call costs a native call plus argument unboxing.
"""
import re
import threading

import llvmlite.binding as llvm
import numba
from numba.core import cgutils
from numba.extending import intrinsic

from . import numba_abi
from .numba_abi import target_machine
from .errors import ActivityError, LinkError

_lock = threading.Lock()
_engine = None

# Compiler-runtime builtins LLVM's code generator may call (``llvm.powi`` becomes
# ``__powi?f2``) that a Python process need not contain: x^n by repeated squaring.
_BUILTINS = {"__powidf2": "double", "__powisf2": "float"}
_POWI = """
define {t} @{name}({t} %x, i32 %n) {{
entry:
  %neg = icmp slt i32 %n, 0
  %minus = sub i32 0, %n
  %e0 = select i1 %neg, i32 %minus, i32 %n
  br label %head
head:
  %r = phi {t} [ 1.0, %entry ], [ %r2, %body ]
  %b = phi {t} [ %x, %entry ], [ %b2, %body ]
  %e = phi i32 [ %e0, %entry ], [ %e2, %body ]
  %done = icmp eq i32 %e, 0
  br i1 %done, label %exit, label %body
body:
  %bit = and i32 %e, 1
  %odd = icmp ne i32 %bit, 0
  %rb = fmul {t} %r, %b
  %r2 = select i1 %odd, {t} %rb, {t} %r
  %b2 = fmul {t} %b, %b
  %e2 = lshr i32 %e, 1
  br label %head
exit:
  %inv = fdiv {t} 1.0, %r
  %y = select i1 %neg, {t} %inv, {t} %r
  ret {t} %y
}}
"""


def optimise(module):
    """Full O3 with loop and SLP vectorisation."""
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(target_machine(), pto)
    pb.getModulePassManager().run(module, pb)


def _start_engine():
    """The process-wide MCJIT engine, created on first use together with what generated
    code links against: Numba's runtime (``NRT_*``, registered when Numba first compiles)
    and the compiler builtins missing from the process."""
    global _engine
    if _engine is None:
        numba_abi.start_runtime()
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target_machine())
        missing = {n: t for n, t in _BUILTINS.items() if not llvm.address_of_symbol(n)}
        if missing:
            builtins = llvm.parse_assembly("".join(_POWI.format(name=n, t=t) for n, t in missing.items()))
            engine.add_module(builtins)
            engine.finalize_object()
            for name in missing:
                llvm.add_symbol(name, engine.get_function_address(name))
        _engine = engine
    return _engine


_REFERENCE = re.compile(r'@("[^"]*"|[-\w.$]+)')
_NOT_A_USE = re.compile(r"^declare .*$|personality ptr @\S+", re.M)   # unwinding only


def unresolved_symbols(module):
    """External functions ``module`` uses (calls, or takes the address of) that neither
    LLVM nor this process defines."""
    _start_engine()
    used = set(_REFERENCE.findall(_NOT_A_USE.sub("", str(module))))
    return sorted(f.name for f in module.functions
                  if f.is_declaration and not f.name.startswith("llvm.") and
                  (f.name in used or f'"{f.name}"' in used) and not llvm.address_of_symbol(f.name))


def keep_only(module, symbol):
    """Make every definition but ``symbol`` internal and drop what it does not use (the
    primal kernel the gradient module carries along, say), before optimising."""
    for fn in module.functions:
        if not fn.is_declaration and fn.name != symbol:
            fn.linkage = "internal"
    pm = llvm.create_new_module_pass_manager()
    pm.add_global_dead_code_eliminate_pass()
    pm.run(module, llvm.create_pass_builder(target_machine(), llvm.create_pipeline_tuning_options()))


def compile_ir(text, symbol, owner=None):
    """Parse, optimise and JIT-compile ``text``; register ``symbol`` for Numba to link against.

    Only ``symbol`` stays visible.  Every external function the module calls must exist
    in the process (else :class:`LinkError` naming it, ``owner`` being the function it was
    compiled for): MCJIT would otherwise resolve it to address 0.  Returns the optimised
    IR text."""
    module = llvm.parse_assembly(text)
    module.verify()
    keep_only(module, symbol)
    optimise(module)
    with _lock:
        engine = _start_engine()
        missing = unresolved_symbols(module)
        if missing:
            raise LinkError(missing, owner)
        engine.add_module(module)
        engine.finalize_object()
        llvm.add_symbol(symbol, engine.get_function_address(symbol))
    return str(module)


def make_stub(symbol, argtypes, restype, same_layout=()):
    """An njit function ``stub(*args)`` calling the native ``symbol`` with Numba's
    calling convention and returning ``restype``.  It is compiled for exactly
    ``argtypes`` (other types are a ``TypeError``), and for each ``(i, j, what)`` in
    ``same_layout`` raises :class:`ActivityError` unless arrays ``i`` and ``j`` have
    the same shape and strides: wrong arguments never reach the native code."""
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
    scope = {"call": intrinsic(scope["typer"]), "ActivityError": ActivityError}
    checks = []
    for n, (i, j, what) in enumerate(same_layout):
        scope[f"MESSAGE{n}"] = f"{what} must have the shape and strides of its array"
        checks.append(f"    if a{i}.shape != a{j}.shape or a{i}.strides != a{j}.strides:\n"
                      f"        raise ActivityError(MESSAGE{n})\n")
    exec(f"def stub({names}):\n{''.join(checks)}    return call({names})\n", scope)
    return numba.njit(sig)(scope["stub"])
