"""From gradient IR to native code: O3 with vectorisation (not of very large loops) and
MCJIT.

MCJIT hands over the object code it emits (kept for the on-disk cache).  Python calls a
gradient through ctypes and an entry compiled with it (:mod:`adcore.calling.ctypes_entry`), no
Numba compile needed; njit code calls it through a stub (:mod:`adcore.calling.njit_stub`),
made when njit code needs it.
"""
import re
import threading

import llvmlite.binding as llvm

from .. import numba_abi
from . import vector_math
from ..calling.ctypes_entry import entry_ir, entry_name
from ..errors import LinkError
from ..ir.writer import fill
from .loop_hints import without_vectorising_large_loops
from ..numba_abi import target_machine

_lock = threading.Lock()
_options_lock = threading.Lock()
_engine = None
_objects = {}      # module name (its gradient's symbol) -> the object code MCJIT emitted
_defined = {}      # symbol -> address, of every gradient in the engine

# Compiler-runtime builtins LLVM's code generator may call (``llvm.powi`` becomes
# ``__powi?f2``) that a Python process need not contain: x^n by repeated squaring
# (the template ``powi.ll`` of adcore.ir.writer).
_BUILTINS = {"__powidf2": "double", "__powisf2": "float"}


def optimise(module):
    """Full O3 with loop and SLP vectorisation (loops marked by :mod:`adcore.backend.loop_hints`
    excepted from loop vectorisation).  Float sums the primal makes in order stay in order,
    but may still be vectorised: the loop vectoriser's in-order reductions (a vector of
    terms, then its lanes added one after another) are turned on for adcore's code only,
    so that a loop such as ``s += exp(x[i] - m)`` calls a vector ``exp`` and gives the
    primal's sum to the last bit."""
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(target_machine(), pto)
    with _options_lock:           # LLVM's options are the process's
        llvm.set_option("", "-force-ordered-reductions=true")
        try:
            pb.getModulePassManager().run(module, pb)
        finally:
            llvm.set_option("", "-force-ordered-reductions=false")


def _start_engine(runtime=True):
    """The process-wide MCJIT engine, created on first use together with what generated
    code links against: Numba's runtime (``NRT_*``, registered when Numba first compiles;
    only its C functions when not ``runtime``, for object code from the disk cache).  The
    compiler builtins missing from the process come when code needs them."""
    global _engine
    if runtime:
        numba_abi.start_runtime()
    else:
        numba_abi.register_runtime_symbols()
    if _engine is None:
        _engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target_machine())
        _engine.set_object_cache(lambda module, data: _objects.__setitem__(module.name, data))
    return _engine


def _provide_builtins(engine, names):
    """Compile the builtins among ``names`` that the process lacks (once)."""
    missing = {n: t for n, t in _BUILTINS.items() if n in names and not llvm.address_of_symbol(n)}
    if missing:
        module = llvm.parse_assembly("".join(fill("powi", name=n, type=t) for n, t in missing.items()))
        module.name = "builtins"
        engine.add_module(module)
        engine.finalize_object()
        for name in missing:
            llvm.add_symbol(name, engine.get_function_address(name))


_REFERENCE = re.compile(r'@("[^"]*"|[-\w.$]+)')
_NOT_A_USE = re.compile(r"^declare .*$|personality ptr @\S+", re.M)   # unwinding only


def unresolved_symbols(module, text):
    """External functions ``module`` (whose IR is ``text``) uses (calls, or takes the
    address of) that neither LLVM nor this process defines."""
    _start_engine(numba_abi.needs_runtime_library(f.name for f in module.functions
                                                  if f.is_declaration))
    used = set(_REFERENCE.findall(_NOT_A_USE.sub("", text)))
    return sorted(f.name for f in module.functions
                  if f.is_declaration and not f.name.startswith("llvm.") and
                  (f.name in used or f'"{f.name}"' in used) and not llvm.address_of_symbol(f.name))


def keep_only(module, symbol):
    """Make every definition but ``symbol`` (and its entry from Python) internal and drop
    what it does not use (the primal kernel the gradient module carries along, the Python
    wrappers of linked rule reverses, say), before optimising."""
    for value in [*module.functions, *module.global_variables]:
        if not value.is_declaration and value.name not in (symbol, entry_name(symbol)):
            value.linkage = "internal"
    pm = llvm.create_new_module_pass_manager()
    pm.add_global_dead_code_eliminate_pass()
    pm.run(module, llvm.create_pass_builder(target_machine(), llvm.create_pipeline_tuning_options()))


class Compiled:
    """What :func:`compile_ir` made: the optimised IR text, the object code, and the
    external symbols that code links against.  ``holds_process_addresses`` is set when the
    IR was given addresses of this process (Numba environments bound for ``print``)."""

    holds_process_addresses = False

    def __init__(self, ir, obj, externals):
        self.ir, self.object, self.externals = ir, obj, externals


def compile_ir(text, symbol, owner=None, link=None, entry=None, optimised=False, python_entry=None):
    """Parse, optimise (unless ``text`` is ``optimised`` already) and JIT-compile ``text``;
    register ``symbol`` for Numba to link against.

    ``link(name)`` may give the module defining a function ``text`` declares, to be
    compiled in (so that the object code is whole); ``entry`` names the function of
    ``text`` to rename ``symbol``; ``python_entry``, ``(flat, kinds, same_layout)`` of
    :func:`adcore.calling.ctypes_entry.entry_ir`, adds the entry through which Python calls
    ``symbol`` (its address: :func:`entry_address`).  Only these stay visible.  Every
    external function the module calls must exist in the process (else :class:`LinkError`
    naming it, ``owner`` being the function it was compiled for): MCJIT would otherwise
    resolve it to address 0.  Returns a :class:`Compiled`."""
    module = llvm.parse_assembly(text if optimised else
                                 vector_math.before_optimising(without_vectorising_large_loops(text)))
    module.verify()
    module.name = symbol
    if entry is not None:
        module.get_function(entry).name = symbol
    for name in [fn.name for fn in module.functions if fn.is_declaration]:
        part = link(name) if link else None
        if part is not None:
            module.link_in(part)
            # a private copy: no later module may resolve ``name`` to it (it loses
            # the calling convention its declaration states once internal)
            module.get_function(name).name = f"{name}.in.{symbol}"
    keep_only(module, symbol)
    if not optimised:
        optimise(module)
        vector_math.after_optimising(module)
    if python_entry is not None:          # after O3: the function is not inlined into it
        module.link_in(llvm.parse_assembly(entry_ir(symbol, *python_entry)))
    with _lock:
        externals = sorted(f.name for f in module.functions
                           if f.is_declaration and not f.name.startswith("llvm."))
        # code calling only the runtime's C functions needs no compile of Numba's runtime
        # library (20 ms of a first gradient made without Numba)
        engine = _start_engine(numba_abi.needs_runtime_library(externals))
        if any(f.name.startswith("llvm.powi.") for f in module.functions):
            externals = sorted(externals + list(_BUILTINS))   # what code generation makes of it
        _provide_builtins(engine, externals)
        ir = str(module)
        missing = unresolved_symbols(module, ir)
        if missing:
            raise LinkError(missing, owner)
        engine.add_module(module)
        engine.finalize_object()
        _define(engine, symbol)
    return Compiled(ir, _objects.pop(symbol, None), externals)


def _define(engine, symbol):
    """Register ``symbol`` (and its entry from Python, when the engine has one)."""
    _defined[symbol] = engine.get_function_address(symbol)
    llvm.add_symbol(symbol, _defined[symbol])
    address = engine.get_function_address(entry_name(symbol))
    if address:
        _defined[entry_name(symbol)] = address


def is_defined(symbol):
    """Whether the engine has code for ``symbol`` (compiled or loaded in this process)."""
    return symbol in _defined


def entry_address(symbol):
    """The address of the entry through which Python calls ``symbol``, or None."""
    return _defined.get(entry_name(symbol))


def load_object(data, symbol, externals):
    """Add object code defining ``symbol`` (a gradient's, from the disk cache) to the
    engine and return its address; None, loading nothing, when one of the ``externals``
    it links against is missing from this process."""
    with _lock:
        if symbol in _defined:
            return _defined[symbol]
        engine = _start_engine(runtime=False)
        _provide_builtins(engine, externals)
        if not all(llvm.address_of_symbol(name) for name in externals):
            return None
        engine.add_object_file(llvm.ObjectFileRef.from_data(data))
        if not engine.get_function_address(symbol):
            return None
        _define(engine, symbol)
        return _defined[symbol]
