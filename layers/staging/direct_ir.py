"""A staged program written straight to LLVM IR, without Numba.

The generated program (``Lowering.source``) is a small subset of Python: loops over
``range``, ``while`` and ``if`` on integer and float comparisons, scalar variables,
loads and stores of 1-D contiguous arrays, arithmetic, ``np.float32``/``np.float64``
casts, a few ``math`` functions, the vector kernels of :mod:`layers.vector_kernels` and
the helpers of :mod:`layers.kernels` (and its ``S``) that Numba inlines.
:func:`translated` reads its syntax tree and writes the function as Numba lowers it,
construct by construct: Numba's calling convention and array arguments, Numba's types
(an ``acc = 0.0`` is float64, ``float32 * 2`` float64, ``int / int`` float64, ...),
its negative-index wraparound, its intrinsics and libm calls, followed by the
per-function passes Numba runs.  adcore differentiates the result like a captured
kernel (``_adcore_capture``), and the process never starts Numba's compiler for it
(its first compile costs 0.25-0.35 s).  A program using anything else (a BLAS product,
an njit callee Numba does not inline, a variable whose type would change) is not
translated at all: the caller compiles it with Numba, as before.
"""
import ast
import inspect
import itertools
import textwrap

import llvmlite.binding as llvm
from numba.core import types as nbtypes

from adcore import numba_abi
from adcore.frontend.capture import Kernel
from adcore.ir.writer import Emitter
from adcore.known_functions import DECREF, INCREF

from .direct_calls import Calls
from .direct_expressions import Expressions
from .direct_statements import Statements
from .direct_types import BOOL, ELEMENTS, NUMBA_TYPES, Untranslatable

ENABLED = True      # tests turn it off to compare with Numba's compile
_ATTRIBUTES = "attributes #0 = { nounwind memory(read) }\n"    # readonly nounwind libm
_counter = itertools.count()


class _Function(Statements, Expressions, Calls):
    """The LLVM text of one program (a ``FunctionDef``) for Numba argument types, written
    by ``self.e`` (an :class:`adcore.ir.writer.Emitter`): its statements, expressions and
    calls are those of :mod:`direct_statements`, :mod:`direct_expressions` and
    :mod:`direct_calls`."""

    def __init__(self, tree, argtypes, scope, symbol, procedure=False):
        self.scope, self.symbol = scope, symbol
        self.e = Emitter(prefix="")
        self.variables = {}        # name -> (alloca, type)
        self.frame, self.prefix = {}, ""    # an inlined callee's arguments and constants
        self.returns = None                 # an inlined callee's (exit label, [returns])
        self.arrays, self.scalars, self.meminfos = {}, {}, {}
        self.nesting = 0                    # loops and branches around the statement
        self.params = self._parameters(tree.args, argtypes)
        self.restype = None
        body = tree.body[1:] if ast.get_docstring(tree) is not None else tree.body
        if procedure:         # no value: Numba's status for a None result
            body = body + [ast.Return(value=None)]
        if not body or not isinstance(body[-1], ast.Return):
            raise Untranslatable("a program not ending in a return")
        last = _last_uses(body, self.meminfos)
        self.references(INCREF, self.meminfos)
        self.references(DECREF, last.get(None, ()))
        for k, statement in enumerate(body[:-1]):
            self.statements([statement])
            self.references(DECREF, last.get(k, ()))
        if procedure:
            self.references(DECREF, last.get(len(body) - 1, ()))
            self.e.line(f"ret i32 {numba_abi.STATUS_NONE}")
            return
        value, ty = self.expression(body[-1].value)
        if ty == BOOL:
            raise Untranslatable("a boolean result")
        self.restype = ty
        self.references(DECREF, last.get(len(body) - 1, ()))
        self.e.line(f"store {ty} {value}, ptr %retptr")
        self.e.line(f"ret i32 {numba_abi.STATUS_OK}")

    def _parameters(self, args, argtypes):
        """The function's parameters (Numba's calling convention) for the arguments
        ``args`` of Numba types ``argtypes``; records the arrays and scalars."""
        ctx = numba_abi.target_context()
        params = ["ptr noalias captures(none) %retptr", "ptr noalias captures(none) %excinfo"]
        if args.vararg or args.kwarg or args.kwonlyargs or args.defaults or args.posonlyargs or \
                len(args.args) != len(argtypes):
            raise Untranslatable("the program's parameters")
        for k, (a, t) in enumerate(zip(args.args, argtypes)):
            flat = numba_abi.flat_types(ctx, t)
            names = [f"%a{k}.{j}" for j in range(len(flat))]
            params += [f"{ty} {n}" for ty, n in zip(flat, names)]
            if isinstance(t, nbtypes.Array) and t.ndim == 1 and t.layout == "C" and \
                    t.dtype in ELEMENTS:
                self.arrays[a.arg] = (names[numba_abi.DATA], names[numba_abi.shape_field(0)],
                                      ELEMENTS[t.dtype])
                self.meminfos[a.arg] = names[numba_abi.MEMINFO]
            elif t in ELEMENTS and len(flat) == 1:
                self.scalars[a.arg] = (names[0], ELEMENTS[t])
            else:
                raise Untranslatable(f"an argument of type {t}")
        return params

    def text(self):
        return self.e.module(f"i32 @{self.symbol}({', '.join(self.params)})")

    def references(self, function, arrays):
        """Numba's reference counting of the array arguments ``arrays``: a reference taken
        at entry, dropped after the statement of its last use.  Between these calls LLVM
        forwards no stored value to a load, as in Numba's code, until Numba's pass removes
        them (adcore differentiates one it left, as in a Numba kernel)."""
        for name in arrays:
            self.e.declare(function, f"declare void @{function}(ptr noalias captures(none))")
            self.e.line(f"call void @{function}(ptr {self.meminfos[name]})")


def _last_uses(body, arrays):
    """``{index of the top-level statement of its last use (None: unused): [array names]}``,
    each list in the order the names appear in that statement."""
    named = [list(dict.fromkeys(n.id for n in sorted(
        (n for n in ast.walk(statement) if isinstance(n, ast.Name)),
        key=lambda n: (n.lineno, n.col_offset)))) for statement in body]
    last = {name: max((k for k, names in enumerate(named) if name in names), default=None)
            for name in arrays}
    out = {k: [name for name in names if name in last and last[name] == k]
           for k, names in enumerate(named)}
    out[None] = [name for name, k in last.items() if k is None]
    return out


def kernel_ir(kernel, argtypes, symbol):
    """The LLVM text of function ``symbol``: njit ``kernel`` (an optimiser's kernel:
    arrays, float scalars, no result) for Numba argument types ``argtypes``, as Numba
    lowers it, or None when it uses a construct outside the subset."""
    if not ENABLED:
        return None
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(kernel.py_func))).body[0]
        if not isinstance(tree, ast.FunctionDef) or any(
                not (isinstance(d, ast.Name) or isinstance(d, ast.Attribute)) for d in tree.decorator_list):
            raise Untranslatable("not one function")
        text = _Function(tree, argtypes, kernel.py_func.__globals__, symbol, procedure=True).text()
        text += _ATTRIBUTES
        llvm.parse_assembly(text).verify()
    except (Untranslatable, RecursionError, OSError, TypeError):
        return None
    return text


class DirectProgram:
    """A staged program translated to LLVM IR for the argument types ``argtypes``: adcore
    differentiates it through ``_adcore_capture`` (and keys its disk cache on the source)."""

    def __init__(self, source, argtypes, symbol, ir_text, restype):
        self.source, self.argtypes, self.symbol = source, tuple(argtypes), symbol
        self.ir, self.restype = ir_text, restype
        self.__name__ = "program"

    def __repr__(self):
        return f"<staged program as LLVM IR {self.symbol}>"

    def _adcore_capture(self, argtypes):
        if tuple(argtypes) != self.argtypes:
            raise TypeError(f"translated for {self.argtypes}, asked for {tuple(argtypes)}")
        module = llvm.parse_assembly(self.ir)
        module.triple = numba_abi.target_machine().triple
        numba_abi.run_function_passes(module)    # 10-20 ms: not for a gradient from disk
        return Kernel(self.argtypes, self.restype, self.symbol, module, "program",
                      numba_abi.target_context())

    def _adcore_cache_key(self):
        """What the compiled gradient depends on besides adcore's environment."""
        return ("staged program as LLVM IR", self.source, tuple(str(t) for t in self.argtypes))


def translated(source, scope, argtypes):
    """The :class:`DirectProgram` of the generated ``source`` (one ``def program``;
    ``scope``: its globals) for Numba argument types ``argtypes``, or None when it uses a
    construct outside the subset (then Numba compiles it)."""
    if not ENABLED:
        return None
    try:
        tree = ast.parse(source)
        if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef) or \
                tree.body[0].decorator_list:
            raise Untranslatable("not one plain function")
        symbol = f"adcore_staged_program_{next(_counter)}"
        fn = _Function(tree.body[0], argtypes, scope, symbol)
        text = fn.text() + _ATTRIBUTES
        llvm.parse_assembly(text).verify()
    except (Untranslatable, RecursionError):
        return None
    return DirectProgram(source, argtypes, symbol, text, NUMBA_TYPES[fn.restype])
