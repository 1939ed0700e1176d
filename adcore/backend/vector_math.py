"""Vector math for LLVM's vectorisers: glibc's libmvec.

Numba calls libm's scalar ``tanhf``/``tanh`` and LLVM's ``llvm.exp``/``log``/``sin``/``cos``
intrinsics.  LLVM's vectorisers turn loops of such intrinsics into vector intrinsics
(``llvm.tanh.v8f32``), which its code generator would split into scalar libm calls again:
``-vector-library`` cannot be set through llvmlite.  So adcore does the mapping itself:

- :func:`before_optimising` declares libm's ``tanhf``/``tanh`` free of memory access
  (Numba declares them ``memory(read)``: errno, which nothing reads), so LLVM treats them
  as the ``llvm.tanh`` intrinsic and may vectorise them;
- :func:`after_optimising` renames each vector intrinsic that libmvec implements to
  libmvec's function (``llvm.tanh.v8f32`` is ``_ZGVdN8v_tanhf``: AVX2, unmasked, 8 lanes;
  ``b`` is SSE, ``e`` AVX-512), the vector function ABI's names.

libmvec's functions are accurate to 4 ulp (libm's to 1-2), so results differ from the
primal's in the last bits.  ``ADCORE_VECTOR_MATH=0`` turns both off (the setting is part
of the disk cache's key); without libmvec nothing changes.
"""
import ctypes.util
import os
import re

import llvmlite.binding as llvm
import numba

FUNCTIONS = ("tanh", "exp", "log", "sin", "cos")         # the intrinsics with libmvec twins
_ELEMENTS = {"f32": ("float", 32, "f"), "f64": ("double", 64, "")}
_VECTOR_INTRINSIC = re.compile(r"llvm\.(\w+)\.v(\d+)(f32|f64)$")


def _enabled():
    """Whether to map (libmvec loaded; code is compiled for this host's CPU, whose
    features the ABI of libmvec's functions needs)."""
    if os.environ.get("ADCORE_VECTOR_MATH", "1") == "0" or numba.config.CPU_NAME or \
            numba.config.CPU_FEATURES:
        return False
    path = ctypes.util.find_library("mvec")
    if path is None:
        return False
    try:
        llvm.load_library_permanently(path)
    except RuntimeError:
        return False
    return True


ENABLED = _enabled()
# the vector widths whose arguments the host passes in one register (the ABI of libmvec's
# functions): SSE always on x86-64, AVX2's and AVX-512's when the host has them
_FEATURES = llvm.get_host_cpu_features() if ENABLED else {}
_WIDTHS = {128: "b"} | ({256: "d"} if _FEATURES.get("avx2") else {}) | \
    ({512: "e"} if _FEATURES.get("avx512f") else {})


def key():
    """The setting, for cache keys: generated code depends on it."""
    return ENABLED


def before_optimising(text):
    """``text`` (a module's IR) with libm's ``tanhf``/``tanh`` declared without memory
    access, so that LLVM may vectorise their calls."""
    if not ENABLED:
        return text
    for name, ty in (("tanhf", "float"), ("tanh", "double")):
        text = re.sub(rf"^declare ({ty} @{name}\({ty}\))[^\n]*$", rf"declare \1 {_PURE}", text,
                      flags=re.M)
    if _PURE in text:
        text += f"\nattributes {_PURE} = {{ nounwind willreturn memory(none) }}\n"
    return text


_PURE = "#90417"       # an attribute group number adcore's and Numba's IR do not use


def libmvec_name(intrinsic):
    """libmvec's function for vector intrinsic ``intrinsic`` (``llvm.tanh.v8f32``), or
    None when it has none (or vector math is off)."""
    match = _VECTOR_INTRINSIC.match(intrinsic)
    if not ENABLED or match is None or match.group(1) not in FUNCTIONS:
        return None
    name, lanes, element = match.group(1), int(match.group(2)), match.group(3)
    _, bits, suffix = _ELEMENTS[element]
    isa = _WIDTHS.get(lanes * bits)
    vector = f"_ZGV{isa}N{lanes}v_{name}{suffix}"
    return vector if isa and llvm.address_of_symbol(vector) else None


def after_optimising(module):
    """Rename the vector intrinsics of optimised ``module`` that libmvec implements to its
    functions (a renamed intrinsic is an ordinary external function of the same type)."""
    for fn in list(module.functions):
        vector = libmvec_name(fn.name) if fn.is_declaration else None
        if vector is not None:
            fn.name = vector
