"""adcore: reverse-mode automatic differentiation of Numba kernels at the LLVM IR level.

The annotations, errors and ``make_zero`` load at once; the differentiator (Numba and
llvmlite) loads on first use of one of its entry points, so ``import adcore.tape`` (the
operator-overloading engine) needs neither.
"""
import importlib

__version__ = "0.1.0"

from .errors import ADError, UnsupportedError, ActivityError, CompileError, LinkError
from .annotations import (Active, BatchDuplicated, Const, Duplicated, Forward, ForwardWithPrimal,
                          Reverse, ReverseWithPrimal)
from .tree import make_zero

# entry point -> the module defining it, imported on first access
_LAZY = {
    "autodiff": "api", "gradient": "api", "primal_ir": "api", "adjoint_ir": "api",
    "last_cached_bytes": "api", "compile_gradient": "api", "cache_report": "api", "last_compile_report": "timings",
    "register_rule": "rules.custom", "rule": "rules.custom", "carray": "rules.custom",
    "from_llvm": "frontend.foreign", "jacobian": "forward.api", "hvp": "forward.api",
    "hessian": "forward.api",
}

__all__ = ["ADError", "UnsupportedError", "ActivityError", "CompileError", "LinkError", "Active",
           "Const", "Duplicated", "BatchDuplicated", "Reverse", "ReverseWithPrimal", "Forward",
           "ForwardWithPrimal", "make_zero", *_LAZY]


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'adcore' has no attribute {name!r}")
    importlib.import_module(".rules.blas", __name__)    # registers the rules of Numba's BLAS calls
    value = getattr(importlib.import_module("." + _LAZY[name], __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
