"""Python constructs adcore does not differentiate, recognised by the Numba runtime calls
they compile to, and named in the user's words.

When differentiation fails in a kernel that uses one of them, the error names the
construct (and its source line, when debug info tells) instead of the LLVM value where
the analysis gave up.
"""
from numba.core import types as nbtypes

from .errors import UnsupportedError

PARALLEL = ("a parallel=True loop (prange, or an array expression Numba parallelised)",
            "parallel loops are not differentiated yet; compile the kernel with parallel=False "
            "(prange then runs serially and differentiates)")
LIST = ("a list (for example a list of arrays)",
        "lists are not differentiated; use a tuple of arrays, or one array with an extra axis")
PRINT_OBJECT = ("print of a non-float object (an array or a container)",
                "print floats (or ints) one by one, or print outside the kernel")

# callee name prefix -> (construct, what to do instead)
RUNTIME_CALLS = (
    ("do_scheduling_", PARALLEL), ("numba_parallel_for", PARALLEL), ("numba_gufunc_", PARALLEL),
    ("get_parallel_chunksize", PARALLEL),
    ("numba_list_", ("a typed list (numba.typed.List)", LIST[1])),
    ("NRT_MemInfo_new_varsize", LIST),
    ("numba_dict_", ("a dict", "dicts are not differentiated; use arrays indexed by integers")),
    ("NRT_adapt_ndarray_to_python", PRINT_OBJECT), ("numba_unpickle", PRINT_OBJECT),
)
# Numba argument types -> (construct, what to do instead)
ARGUMENT_TYPES = (
    (nbtypes.List, ("a Python list argument", "pass a numpy array or a tuple")),
    (nbtypes.ListType, ("a typed list argument (numba.typed.List)", "pass a numpy array or a tuple")),
    (nbtypes.DictType, ("a dict argument", "pass numpy arrays")),
    (nbtypes.Set, ("a set argument", "pass a numpy array")),
)


def construct_of(callee):
    """``(construct, advice)`` of a runtime function, or None."""
    return next((c for prefix, c in RUNTIME_CALLS if (callee or "").startswith(prefix)), None)


def in_user_words(err, func, argtypes):
    """``err`` restated as the construct that caused it, when ``func`` (the cleaned
    kernel) calls a runtime function of one or has an argument of such a type;
    otherwise ``err`` itself."""
    for instr in func.instructions():
        found = construct_of(instr.callee) if instr.opcode == "call" else None
        if found is not None:
            return UnsupportedError(found[0], err.function, found[1], instr.location)
    for k, t in enumerate(argtypes):
        found = next((c for cls, c in ARGUMENT_TYPES if isinstance(t, cls)), None)
        if found is not None:
            return UnsupportedError(f"{found[0]} (argument {k})", err.function, found[1])
    return err
