"""adcore: reverse-mode automatic differentiation of Numba kernels at the LLVM IR level."""
from .errors import ADError, UnsupportedError, ActivityError, LinkError
from .annotations import Active, Const, Duplicated, Reverse, ReverseWithPrimal
from .tree import make_zero

__all__ = [
    "ADError", "UnsupportedError", "ActivityError", "LinkError",
    "Active", "Const", "Duplicated", "Reverse", "ReverseWithPrimal", "make_zero",
]
from .api import autodiff, gradient, primal_ir, adjoint_ir, last_cached_bytes, compile_gradient
from .custom_rules import register_rule, rule, carray
from . import blas_rules  # noqa: F401  (registers the rules for Numba's BLAS calls)

__all__ += ["autodiff", "gradient", "primal_ir", "adjoint_ir", "last_cached_bytes", "compile_gradient",
            "register_rule", "rule", "carray"]
from .foreign import from_llvm
__all__ += ["from_llvm"]
