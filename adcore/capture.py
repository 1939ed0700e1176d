"""Capture the LLVM IR of a Numba kernel before Numba's module-level optimisation.

Numba optimises a library's whole module (inlining, unrolling, vectorisation) when the
library is finalised.  adcore wraps ``CPUCodeLibrary.finalize`` so that every library
finalised after ``import adcore`` keeps a clone of its own module as it was *before*
that step (already through Numba's per-function passes: SSA, no allocas) and the list
of libraries it links.  Linking those clones gives the kernel and all its callees as
scalar code, the input the differentiator wants.
"""
import threading

import numba
from numba.core import codegen as _codegen
from numba.core.registry import CPUDispatcher
from numba.core.runtime import rtsys

from .errors import ADError

_lock = threading.Lock()


def _install_hook():
    cls = _codegen.CPUCodeLibrary
    if getattr(cls.finalize, "_adcore_hook", False):
        return
    original = cls.finalize

    def finalize(self):
        self._adcore_own = self._final_module.clone()
        self._adcore_links = list(self._linking_libraries)
        return original(self)

    finalize._adcore_hook = True
    cls.finalize = finalize


_install_hook()


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
    if isinstance(f, CPUDispatcher) or hasattr(f, "_adcore_capture"):
        return f
    if callable(f):
        return numba.njit(f)
    raise ADError(f"expected a numba.njit function or a Python function, got {f!r}")


def _overload(dispatcher, argtypes):
    dispatcher.compile(tuple(argtypes))
    return dispatcher.overloads[tuple(argtypes)]


def _unoptimised_module(library):
    """Link the pre-optimisation clones of ``library``, everything it links, and Numba's
    runtime library (whose IR-defined helpers, such as ``NRT_MemInfo_data_fast``, have
    no native symbol of their own)."""
    seen, order, stack = set(), [], [rtsys.library, library]     # the kernel first
    while stack:
        lib = stack.pop()
        if id(lib) in seen:
            continue
        seen.add(id(lib))
        order.append(lib)
        stack.extend(getattr(lib, "_adcore_links", []))
    module = None
    for lib in order:
        own = getattr(lib, "_adcore_own", None)
        part = own.clone() if own is not None else lib._get_module_for_linking().clone()
        for fn in part.functions:
            if not fn.is_declaration:
                fn.linkage = "weak_odr"          # always linked, duplicates merge
        if module is None:
            module = part
        else:
            module.link_in(part)
    return module


def capture(f, argtypes):
    """Compile ``f`` for ``argtypes`` and return a :class:`Kernel` with its scalar LLVM module."""
    dispatcher = as_dispatcher(f)
    if hasattr(dispatcher, "_adcore_capture"):
        return dispatcher._adcore_capture(argtypes)
    with _lock:
        cres = _overload(dispatcher, argtypes)
        if getattr(cres.library, "_adcore_own", None) is None:
            # compiled before adcore was imported: compile a fresh copy so the hook sees it
            options = {k: v for k, v in dispatcher.targetoptions.items() if k != "nopython"}
            dispatcher = numba.njit(**options)(dispatcher.py_func)
            cres = _overload(dispatcher, argtypes)
        module = _unoptimised_module(cres.library)
    pyname = getattr(dispatcher.py_func, "__qualname__", str(dispatcher.py_func))
    return Kernel(argtypes, cres.signature.return_type, cres.fndesc.mangled_name, module,
                  pyname, cres.target_context)
