"""The values of the Python subset that :mod:`layers.staging.direct_ir` translates: their
LLVM types as Numba gives them (``int64``, ``float32``, ``float64``, a comparison's
``i1``), how Numba types arithmetic and merges them, the constants Numba freezes into the
code, and :class:`Untranslatable`."""
import numpy as np
from numba.core import types as nbtypes

from adcore import numba_abi
from adcore.ir.writer import float_const

I64, F32, F64, BOOL = "i64", "float", "double", "i1"
FLOATS = (F32, F64)
NUMBA_TYPES = {F32: nbtypes.float32, F64: nbtypes.float64, I64: nbtypes.int64}
ELEMENTS = {nbtypes.float32: F32, nbtypes.float64: F64, nbtypes.int64: I64}
SUFFIX = {F32: "f32", F64: "f64"}


class Untranslatable(Exception):
    """The program uses a construct outside the subset: Numba compiles it."""


def unify(a, b):
    """The type Numba gives a value that is ``a`` on one path and ``b`` on another."""
    if a == b:
        return a
    if BOOL in (a, b):
        raise Untranslatable("a boolean merged with a number")
    return F64       # int64 with a float, float32 with float64


def arithmetic(a, b):
    """The type of ``a <op> b`` for ``+ - *`` (Numba's: float32 with int64 is float64)."""
    if BOOL in (a, b):
        raise Untranslatable("arithmetic on a boolean")
    if a == b:
        return a
    return F64


def frozen_constant(value):
    """``(LLVM literal, type)`` of a number Numba freezes into the code (a closure's)."""
    if isinstance(value, np.floating) and value.dtype in (np.float32, np.float64):
        ty = F32 if value.dtype == np.float32 else F64
        return float_const(ty, float(value)), ty
    if type(value) is float:
        return float_const(F64, value), F64
    raise Untranslatable(f"the constant {value!r}")


def inlined(value):
    """Whether ``value`` is an njit function Numba inlines where it is called."""
    return numba_abi.is_dispatcher(value) and value.targetoptions.get("inline") == "always"
