"""Python constructs adcore does not differentiate, recognised by Numba's types of the
kernel's arguments and variables or by the runtime calls they compile to, and named in
the user's words.

When differentiation fails in a kernel that uses one of them, the error names the
construct (and its source line, when debug info tells) instead of the LLVM value where
the analysis gave up.
"""
import re

from numba.core import types as nbtypes

from ..errors import UnsupportedError
from ..known_functions import ADAPT_NDARRAY_TO_PYTHON

PARALLEL = ("a call to a parallel=True function (its prange loops or parallel array expressions)",
            "adcore differentiates the parallel loops of the kernel it is given, not those of "
            "the njit functions that kernel calls; make the kernel itself parallel=True, or "
            "call a parallel=False version of the callee")
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
    (ADAPT_NDARRAY_TO_PYTHON, PRINT_OBJECT),
)
LINALG = ("linear algebra other than products, norms and dot products has no derivative rule; "
          "differentiate a function that calls it through adcore.register_rule, or write it as loops")
NO_RULE = "it has no derivative rule; give the function that calls it one with adcore.register_rule"
# external callee without a rule -> (the numpy or math function compiled to it, what to do)
CALLEES = {
    "numba_xgesv": ("np.linalg.solve", LINALG),
    "numba_xxgetrf": ("np.linalg.inv, det, slogdet or solve", LINALG),
    "numba_ez_xxgetri": ("np.linalg.inv", LINALG), "numba_xxpotrf": ("np.linalg.cholesky", LINALG),
    "numba_ez_gesdd": ("np.linalg.svd (or pinv, cond, matrix_rank, a 2-norm)", LINALG),
    "numba_ez_rgeev": ("np.linalg.eig", LINALG), "numba_ez_cgeev": ("np.linalg.eig", LINALG),
    "numba_ez_xxxevd": ("np.linalg.eigh", LINALG), "numba_ez_geqrf": ("np.linalg.qr", LINALG),
    "numba_ez_xxgqr": ("np.linalg.qr", LINALG), "numba_ez_gelsd": ("np.linalg.lstsq", LINALG),
    "lgamma": ("math.lgamma", NO_RULE), "lgammaf": ("math.lgamma", NO_RULE),
    "numba_gamma": ("math.gamma", NO_RULE), "numba_gammaf": ("math.gamma", NO_RULE),
}
_CALLED = re.compile(r"call [^@]*@([\w.$]+)\(")
# Numba types of the user's variables and arguments -> (construct, what to do instead)
VARIABLE_TYPES = (
    (nbtypes.List, LIST), (nbtypes.ListType, ("a typed list (numba.typed.List)", LIST[1])),
    (nbtypes.DictType, DICT), (nbtypes.Set, ("a set", "use an array")),
    (nbtypes.ClassInstanceType, ("a jitclass instance",
                                 "jitclass fields are not differentiated; pass its arrays and "
                                 "floats to the kernel as arguments")),
)


def _of(table, key, match):
    return next((c for k, c in table if match(key, k)), None)


def in_user_words(err, func, kernel):
    """``err`` restated as the construct that caused it, when ``kernel`` (its cleaned
    function ``func``) has an argument or variable of a container type, calls a runtime
    function of such a construct, or ``err`` is a call of a numpy or math function without
    a rule; otherwise ``err`` itself."""
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
    called = _CALLED.search(err.what)
    if called is not None and called.group(1) in CALLEES:
        construct, advice = CALLEES[called.group(1)]
        return UnsupportedError(f"{construct} (compiled to a call of {called.group(1)})",
                                err.function, advice, err.location)
    return err
