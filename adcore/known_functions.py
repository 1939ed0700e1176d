"""External functions adcore knows by name, and what each is to adcore (Enzyme's
``LibraryFuncs``): one table, :data:`TABLE`, and the names other modules use.

* Numba's runtime (NRT): the allocations a kernel makes (an array's memory with its
  meminfo, or bare memory) get zeroed shadow allocations; the frees, destructor calls and
  reference drops of the forward pass are deferred to the end of the gradient (the
  reverse pass still reads that memory); reference counts and meminfo reads move no
  derivative.  adcore's own generated code declares some of them (``declaration``).
* Functions that only consume values: Numba's ``print`` and the Python C-API calls around
  it (boxing a float, formatting, writing to stdout, the GIL, the reference counts of the
  objects they make).  A differentiable float passed to one of them is just read: the
  call runs once in the forward pass, gets nothing in the reverse pass (Enzyme treats
  ``printf`` the same way), and writes no memory the kernel reads.
* libm functions Numba lowers ``math`` functions to: pure; their derivatives are in
  :mod:`adcore.rules.scalar`'s table (which knows every math name, not only these).

A callee not listed here (nor a math function, nor one with a rule) is still refused when
a derivative could flow into or through it.
"""
from typing import NamedTuple


class Role:
    """What a known function is to adcore."""
    ALLOCATES = "allocates an array's memory and its meminfo (returns the meminfo)"
    ALLOCATES_RAW = "allocates bare memory (no meminfo)"
    MEMINFO_DATA = "returns the data pointer of a meminfo"
    FREES = "frees memory, or runs a meminfo's destructor (deferred to the gradient's end)"
    DECREF = "drops a reference, freeing at the last (deferred to the gradient's end)"
    INCREF = "takes a reference"
    READS_SHAPES = "reads only integers (shapes, strides) through its pointers"
    CONSUMES_ONLY = "only consumes its arguments (printing): runs once, no derivative"
    BOXES_ARRAY = "makes a Python object of an array (print of an array: refused)"
    PURE_MATH = "a libm math function: pure, differentiated by adcore.rules.scalar"


class Known(NamedTuple):
    """``name`` is ``role`` to adcore; ``declaration``: adcore's own declaration of it
    (``ret (params)``), for the functions adcore's generated code calls."""
    name: str
    role: str
    declaration: tuple = None


RUNTIME_PREFIX = "NRT_"            # the symbols of Numba's runtime

# -- the names adcore's generated code and analyses refer to --------------------------------
MEMINFO_ALLOC_ALIGNED = "NRT_MemInfo_alloc_aligned"
ALLOCATE = "NRT_Allocate"
FREE = "NRT_Free"
CALL_DTOR = "NRT_MemInfo_call_dtor"
DECREF = "NRT_decref"
INCREF = "NRT_incref"
ADAPT_NDARRAY_TO_PYTHON = "NRT_adapt_ndarray_to_python"     # a prefix: Numba 0.68 adds "_acqref"

# libm functions Numba lowers a ``math`` function on a float to (declared pure), as
# ``{math name: (float32 symbol, float64 symbol)}``; the others become LLVM intrinsics
LIBM = {"tanh": ("tanhf", "tanh"), "sqrt": ("sqrtf", "sqrt"), "expm1": ("expm1f", "expm1"),
        "log1p": ("log1pf", "log1p"), "tan": ("tanf", "tan"), "atan": ("atanf", "atan"),
        "sinh": ("sinhf", "sinh"), "cosh": ("coshf", "cosh")}

TABLE = (
    # Numba's runtime
    Known(MEMINFO_ALLOC_ALIGNED, Role.ALLOCATES, ("ptr", "i64, i32")),
    Known("NRT_MemInfo_alloc_safe_aligned", Role.ALLOCATES),
    Known("NRT_MemInfo_alloc", Role.ALLOCATES),
    Known("NRT_MemInfo_alloc_safe", Role.ALLOCATES),
    Known("NRT_MemInfo_new_varsize", Role.ALLOCATES),
    Known("NRT_MemInfo_new_varsize_dtor", Role.ALLOCATES),
    Known(ALLOCATE, Role.ALLOCATES_RAW, ("ptr", "i64")),
    Known("NRT_MemInfo_data_fast", Role.MEMINFO_DATA),
    Known("NRT_MemInfo_data", Role.MEMINFO_DATA),
    Known(FREE, Role.FREES, ("void", "ptr")),
    Known(CALL_DTOR, Role.FREES, ("void", "ptr")),
    Known(DECREF, Role.DECREF),
    Known(INCREF, Role.INCREF),
    Known(ADAPT_NDARRAY_TO_PYTHON + "_acqref", Role.BOXES_ARRAY),
    # Numba's helpers
    Known("numba_attempt_nocopy_reshape", Role.READS_SHAPES),
    # print: the GIL, boxing scalars, formatting and writing, reference counts
    *(Known(name, Role.CONSUMES_ONLY) for name in (
        "numba_gil_ensure", "numba_gil_release",
        "PyFloat_FromDouble", "PyLong_FromLongLong", "PyLong_FromUnsignedLongLong",
        "PyLong_FromSsize_t", "PyBool_FromLong",
        "PyObject_Str", "PyObject_Repr", "PyUnicode_AsUTF8", "PyUnicode_FromString",
        "PySys_FormatStdout", "PySys_WriteStdout", "PyObject_Print",
        "PyErr_WriteUnraisable", "PyErr_Clear", "Py_DecRef", "Py_IncRef")),
    # libm
    *(Known(symbol, Role.PURE_MATH) for pair in LIBM.values() for symbol in pair),
)

ROLE = {f.name: f.role for f in TABLE}
assert len(ROLE) == len(TABLE), "a function listed twice"


def named(*roles):
    """The names of the functions of ``roles``, in the table's order."""
    return tuple(f.name for f in TABLE if f.role in roles)


ALLOCATORS = named(Role.ALLOCATES)
RAW_ALLOCATORS = named(Role.ALLOCATES_RAW)
MEMINFO_DATA_READERS = named(Role.MEMINFO_DATA)
DEFERRED_FREES = named(Role.FREES, Role.DECREF)               # run at the gradient's end
READS_NO_POINTERS = named(Role.READS_SHAPES, Role.FREES, Role.DECREF, Role.INCREF)
CONSUMES_ONLY = frozenset(named(Role.CONSUMES_ONLY))


def declaration(name):
    """adcore's declaration of known function ``name`` (``declare ptr @NRT_Allocate(i64)``)."""
    ret, params = next(f.declaration for f in TABLE if f.name == name and f.declaration)
    return f"declare {ret} @{name}({params})"


def is_runtime(name):
    """True for a symbol of Numba's runtime (``NRT_*``)."""
    return name.startswith(RUNTIME_PREFIX)


def consumes_only(instr):
    """True for a call to one of the functions that only consume values."""
    return instr.opcode == "call" and instr.callee in CONSUMES_ONLY
