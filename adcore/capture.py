"""Capture the LLVM IR of a Numba kernel before Numba's module-level optimisation.

Numba optimises a library's whole module (inlining, unrolling, vectorisation) when the
library is finalised.  Once adcore's differentiator is loaded, every library finalised
keeps a clone of its own module as it was *before* that step (already through Numba's
per-function passes: SSA, no allocas) and the list of libraries it links
(:func:`adcore.numba_abi.keep_unoptimised_modules`).  Linking those clones gives the kernel
and all its callees as scalar code, the input the differentiator wants.
"""
import threading

import numba

from . import numba_abi
from .errors import ADError

_lock = threading.Lock()
numba_abi.keep_unoptimised_modules()


class Kernel:
    """A function compiled for one signature, with its unoptimised LLVM module.

    ``symbol`` names the entry in ``module``; it follows Numba's calling convention
    (``i32 (ptr retptr, ptr excinfo, <flattened arguments>)``) for arguments of
    ``argtypes`` and a result of ``restype`` (Numba types); ``context`` is the Numba
    target context that flattens them; ``pyname`` names the function in messages."""

    def __init__(self, argtypes, restype, symbol, module, pyname, context):
        self.argtypes, self.restype, self.symbol = argtypes, restype, symbol
        self.module, self.pyname, self.context = module, pyname, context


def as_dispatcher(f):
    """``f`` itself when it is an njit dispatcher or provides its own kernels
    (``_adcore_capture``), else ``numba.njit(f)``."""
    if numba_abi.is_dispatcher(f) or hasattr(f, "_adcore_capture"):
        return f
    if callable(f):
        return numba.njit(f)
    raise ADError(f"expected a numba.njit function or a Python function, got {f!r}")


def _unoptimised_module(library, cres):
    """Link the pre-optimisation clones of ``library``, everything it links, the libraries
    defining what it reaches through Numba's unresolved references (recursion), and Numba's
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
        if not stack:                            # functions reached through recursion
            stack = [d for d in (numba_abi.library_defining(t, cres) for t in numba_abi.unresolved_targets(module))
                     if d is not None and id(d) not in seen]
    return module


def capture(f, argtypes):
    """Compile ``f`` for ``argtypes`` and return a :class:`Kernel` with its scalar LLVM module."""
    dispatcher = as_dispatcher(f)
    if hasattr(dispatcher, "_adcore_capture"):
        return dispatcher._adcore_capture(argtypes)
    with _lock:
        cres = numba_abi.overload(dispatcher, argtypes)
        if not numba_abi.has_unoptimised_module(cres.library):
            # compiled before adcore was loaded: compile a fresh copy so the hook sees it
            dispatcher = numba_abi.recompiled(dispatcher)
            cres = numba_abi.overload(dispatcher, argtypes)
        module = _unoptimised_module(cres.library, cres)
    pyname = getattr(dispatcher.py_func, "__qualname__", str(dispatcher.py_func))
    return Kernel(argtypes, cres.signature.return_type, cres.fndesc.mangled_name, module,
                  pyname, cres.target_context)
