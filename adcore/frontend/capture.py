"""Capture the LLVM IR of a Numba kernel before Numba's module-level optimisation.

Numba optimises a library's whole module (inlining, unrolling, vectorisation) when the
library is finalised.  Once adcore's differentiator is loaded, every library finalised
keeps a clone of its own module as it was *before* that step (already through Numba's
per-function passes: SSA, no allocas) and the list of libraries it links
(:func:`adcore.numba_abi.keep_unoptimised_modules`).  A kernel Numba has not compiled yet
is only lowered (:func:`adcore.numba_abi.lowered`): its library is never finalised, and
no machine code is made for it.  Linking those modules gives the kernel and all its
callees as scalar code, the input the differentiator wants.
"""
import re
import threading
import types

import numba
from numba.core.errors import NumbaError

from .. import numba_abi
from .cleanup import references_made_constants
from ..errors import ActivityError, CompileError

_lock = threading.Lock()
_COLOURS = re.compile(r"\x1b\[[0-9;]*m")
numba_abi.keep_unoptimised_modules()


class Kernel:
    """A function compiled for one signature, with its unoptimised LLVM module.

    ``symbol`` names the entry in ``module``; it follows Numba's calling convention
    (``i32 (ptr retptr, ptr excinfo, <flattened arguments>)``) for arguments of
    ``argtypes`` and a result of ``restype`` (Numba types); ``context`` is the Numba
    target context that flattens them; ``pyname`` names the function in messages;
    ``variables`` are ``(Numba type, (file, line))`` of the Python function's variables
    (empty for foreign IR), for errors in the user's words; ``environment`` is the Numba
    environment the module's code reads (kept alive until the gradient binds it)."""

    def __init__(self, argtypes, restype, symbol, module, pyname, context, variables=(),
                 environment=None):
        self.argtypes, self.restype, self.symbol = argtypes, restype, symbol
        self.module, self.pyname, self.context = module, pyname, context
        self.variables, self.environment = variables, environment


def as_dispatcher(f):
    """``f`` itself when it is an njit dispatcher or provides its own kernels
    (``_adcore_capture``), else ``numba.njit(f)``."""
    if numba_abi.is_dispatcher(f) or hasattr(f, "_adcore_capture"):
        return f
    if isinstance(f, types.FunctionType):
        return numba.njit(f)
    raise CompileError(f"expected a numba.njit function or a Python function (def or lambda), "
                       f"got {type(f).__name__} {f!r}: wrap it in a Python function, e.g. "
                       f"lambda x: np.sum(x)")


def _plain(message):
    """Numba's message without its terminal colours."""
    return _COLOURS.sub("", str(message)).strip()


def argument_types(dispatcher, values):
    """The Numba types ``dispatcher`` compiles for arguments ``values``: for one with
    declared signatures (``@njit("f8(f8[:])")``), those of the signature a call runs
    (else ActivityError listing them); CompileError for a value Numba has no type for."""
    found = []
    for k, v in enumerate(values):
        try:
            found.append(numba.typeof(v))
        except ValueError as err:
            raise CompileError(f"argument {k}: Numba cannot pass a value of type {type(v).__name__} to "
                               f"compiled code ({_plain(err)}); pass numbers, numpy arrays or "
                               f"tuples of them") from None
    if not numba_abi.declares_signatures(dispatcher):
        return tuple(found)
    declared = numba_abi.declared_argtypes(dispatcher, found)
    name = dispatcher.py_func.__qualname__
    if declared is None:
        listed = "; ".join(numba_abi.declared_signatures(dispatcher))
        raise ActivityError(f"{name} declares the signatures {listed}; "
                            f"none accepts arguments of types ({', '.join(map(str, found))})")
    for k, (given, wanted) in enumerate(zip(found, declared)):
        if isinstance(given, numba.types.Float) and not isinstance(wanted, numba.types.Float):
            raise ActivityError(f"argument {k} is a float but {name} declares it {wanted}: "
                                f"Numba would convert it and its derivative would be lost; "
                                f"pass a value of the declared type")
    return declared


def _compiled(dispatcher, argtypes, parfors="loops"):
    """Numba's compile result of ``dispatcher`` for ``argtypes`` with its unoptimised
    module: the overload the dispatcher has when the hook kept its module, else the
    kernel lowered to LLVM without machine code (the gradient needs no more; compiled
    before adcore was loaded or loaded from Numba's disk cache, an overload has no
    unoptimised module).  CompileError with Numba's message when Numba cannot compile it."""
    try:
        cres = None if numba_abi.is_parallel(dispatcher) else numba_abi.compiled_overload(dispatcher, argtypes)
        if cres is not None and numba_abi.has_unoptimised_module(cres.library):
            return cres
        return numba_abi.lowered(dispatcher, argtypes, parfors)
    except NumbaError as err:
        nones = [k for k, t in enumerate(argtypes) if t == numba.types.none]
        hint = f" (argument {', '.join(map(str, nones))} is None)" if nones else ""
        name = getattr(dispatcher.py_func, "__qualname__", dispatcher.py_func)
        raise CompileError(f"Numba cannot compile {name} for arguments "
                           f"({', '.join(map(str, argtypes))}){hint}; change the construct or "
                           f"argument Numba names:\n{_plain(err)}") from None


def unoptimised_module(library, cres=None):
    """Link the pre-optimisation clones of ``library``, everything it links, the libraries
    defining what it reaches through Numba's unresolved references (recursion; given the
    kernel's compile result ``cres``), and Numba's
    runtime library (whose IR-defined helpers, such as ``NRT_MemInfo_data_fast``, have
    no native symbol of their own).  ``cres``: the kernel's compile result."""
    seen, stack, module = set(), [numba_abi.runtime_library(), library], None   # the kernel first
    while stack:
        lib = stack.pop()
        if id(lib) not in seen:
            seen.add(id(lib))
            stack.extend(numba_abi.linked_libraries(lib))
            part = numba_abi.unoptimised_module(lib)
            for fn in part.functions:
                if not fn.is_declaration:
                    fn.linkage = "weak_odr"      # always linked, duplicates merge
            if module is None:
                module = part
            else:
                module.link_in(part)
        if not stack and cres is not None:       # functions reached through recursion
            stack = [d for d in (numba_abi.library_defining(t, cres) for t in numba_abi.unresolved_targets(module))
                     if d is not None and id(d) not in seen]
    return module


def _references_to_kernel(module, symbol):
    """Numba's unresolved references in ``module`` to another compile of the kernel
    ``symbol``: a callee (mutual recursion) names the kernel as Numba compiles it, while
    adcore lowers it again, with other flags (:func:`numba_abi.lowered`)."""
    defined = {fn.name for fn in module.functions if not fn.is_declaration}
    return [t for t in numba_abi.unresolved_targets(module)
            if t not in defined and numba_abi.without_tags(t) == numba_abi.without_tags(symbol)]


def capture(f, argtypes, parfors="loops"):
    """Compile ``f`` for ``argtypes`` and return a :class:`Kernel` with its scalar LLVM module.
    ``parfors``: how a ``parallel=True`` kernel's parallel loops are lowered
    (:func:`adcore.numba_abi.lowered`); with ``"calls"`` the kernel's ``chunk_calls`` list
    them."""
    dispatcher = as_dispatcher(f)
    if hasattr(dispatcher, "_adcore_capture"):
        return dispatcher._adcore_capture(argtypes)
    with _lock:
        cres = _compiled(dispatcher, argtypes, parfors)
        module = unoptimised_module(cres.library, cres)
        to_kernel = _references_to_kernel(module, cres.fndesc.mangled_name)
        if to_kernel:
            numba_abi.point_references_at_compiled(dispatcher, argtypes, to_kernel)
            module = references_made_constants(module, dict.fromkeys(to_kernel, cres.fndesc.mangled_name))
    for fn in module.functions:
        if not fn.is_declaration and numba_abi.only_raises(fn.name):
            for attribute in ("noinline", "optnone"):     # stays a call, compiled as it is
                fn.add_function_attribute(attribute)
    pyname = getattr(dispatcher.py_func, "__qualname__", str(dispatcher.py_func))
    kernel = Kernel(argtypes, cres.signature.return_type, cres.fndesc.mangled_name, module,
                    pyname, cres.target_context, numba_abi.typed_variables(cres), cres.environment)
    kernel.chunk_calls = numba_abi.chunk_calls(dispatcher, argtypes) if parfors == "calls" else []
    return kernel
