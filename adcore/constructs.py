"""Python constructs adcore does not differentiate, recognised by Numba's types of the
kernel's arguments and variables or by the runtime calls they compile to, and named in
the user's words.

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
DICT = ("a dict", "dicts are not differentiated; use arrays indexed by integers")
PRINT_OBJECT = ("print of a non-float object (an array or a container)",
                "print floats (or ints) one by one, or print outside the kernel")

# callee name prefix -> (construct, what to do instead)
RUNTIME_CALLS = (
    ("do_scheduling_", PARALLEL), ("numba_parallel_for", PARALLEL), ("numba_gufunc_", PARALLEL),
    ("get_parallel_chunksize", PARALLEL),
    ("numba_list_", ("a typed list (numba.typed.List)", LIST[1])),
    ("numba_dict_", DICT),
    ("NRT_adapt_ndarray_to_python", PRINT_OBJECT),
)
# Numba types of the user's variables and arguments -> (construct, what to do instead)
VARIABLE_TYPES = (
    (nbtypes.List, LIST), (nbtypes.ListType, ("a typed list (numba.typed.List)", LIST[1])),
    (nbtypes.DictType, DICT), (nbtypes.Set, ("a set", "use an array")),
)


def _of(table, key, match):
    return next((c for k, c in table if match(key, k)), None)


def in_user_words(err, func, kernel):
    """``err`` restated as the construct that caused it, when ``kernel`` (its cleaned
    function ``func``) has an argument or variable of a container type, or calls a
    runtime function of such a construct; otherwise ``err`` itself."""
    for k, t in enumerate(kernel.argtypes):
        found = _of(VARIABLE_TYPES, t, isinstance)
        if found is not None:
            return UnsupportedError(f"{found[0]} (argument {k})", err.function, found[1])
    for t, location in kernel.variables:
        found = _of(VARIABLE_TYPES, t, isinstance)
        if found is not None:
            return UnsupportedError(found[0], err.function, found[1], location)
    for instr in func.instructions():
        if instr.opcode == "call":
            found = _of(RUNTIME_CALLS, instr.callee or "", str.startswith)
            if found is not None:
                return UnsupportedError(found[0], err.function, found[1], instr.location)
    return err
