"""A staged program written straight to LLVM IR, without Numba (issue 14).

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
import functools
import inspect
import itertools
import math
import textwrap

import llvmlite.binding as llvm
import numpy as np
from numba.core import types as nbtypes

from adcore import numba_abi
from adcore.frontend.capture import Kernel
from adcore.ir.writer import float_const
from adcore.known_functions import DECREF, INCREF, LIBM

from optim.rules import like

from .. import kernels, vector_kernels

ENABLED = True      # tests turn it off to compare with Numba's compile
I64, F32, F64, BOOL = "i64", "float", "double", "i1"
_FLOATS = (F32, F64)
_NUMBA_TYPES = {F32: nbtypes.float32, F64: nbtypes.float64, I64: nbtypes.int64}
_ELEMENTS = {nbtypes.float32: F32, nbtypes.float64: F64, nbtypes.int64: I64}
_SUFFIX = {F32: "f32", F64: "f64"}
# math functions as Numba lowers them on a float: LLVM intrinsics, and libm functions
# (float32 name, float64 name: adcore.known_functions.LIBM) declared pure
# (``cgutils.insert_pure_function``)
_INTRINSICS = {"exp": "llvm.exp", "log": "llvm.log", "sin": "llvm.sin", "cos": "llvm.cos",
               "fabs": "llvm.fabs"}
_INT_OPS = {ast.Add: "add nsw", ast.Sub: "sub nsw", ast.Mult: "mul nsw"}
_FLOAT_OPS = {ast.Add: "fadd", ast.Sub: "fsub", ast.Mult: "fmul", ast.Div: "fdiv"}
_ICMP = {ast.Lt: "slt", ast.LtE: "sle", ast.Gt: "sgt", ast.GtE: "sge", ast.Eq: "eq", ast.NotEq: "ne"}
_FCMP = {ast.Lt: "olt", ast.LtE: "ole", ast.Gt: "ogt", ast.GtE: "oge", ast.Eq: "oeq", ast.NotEq: "une"}
_ATTRIBUTES = "attributes #0 = { nounwind memory(read) }\n"    # readonly nounwind libm
_counter = itertools.count()


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


class _Function:
    """The LLVM text of one program (a ``FunctionDef``) for Numba argument types."""

    def __init__(self, tree, argtypes, scope, symbol, procedure=False):
        self.scope, self.symbol = scope, symbol
        self.entry, self.body, self.declares = [], [], {}
        self.names = itertools.count()
        self.variables = {}        # name -> (alloca, type)
        self.frame, self.prefix = {}, ""    # an inlined callee's arguments and constants
        self.returns = None                 # an inlined callee's (exit label, [returns])
        self.arrays, self.scalars, self.meminfos = {}, {}, {}
        self.nesting = 0                    # loops and branches around the statement
        ctx = numba_abi.target_context()
        params = ["ptr noalias captures(none) %retptr", "ptr noalias captures(none) %excinfo"]
        args = tree.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.defaults or args.posonlyargs or \
                len(args.args) != len(argtypes):
            raise Untranslatable("the program's parameters")
        for k, (a, t) in enumerate(zip(args.args, argtypes)):
            flat = numba_abi.flat_types(ctx, t)
            names = [f"%a{k}.{j}" for j in range(len(flat))]
            params += [f"{ty} {n}" for ty, n in zip(flat, names)]
            if isinstance(t, nbtypes.Array) and t.ndim == 1 and t.layout == "C" and \
                    t.dtype in _ELEMENTS:
                self.arrays[a.arg] = (names[numba_abi.DATA], names[numba_abi.shape_field(0)],
                                      _ELEMENTS[t.dtype])
                self.meminfos[a.arg] = names[numba_abi.MEMINFO]
            elif t in _ELEMENTS and len(flat) == 1:
                self.scalars[a.arg] = (names[0], _ELEMENTS[t])
            else:
                raise Untranslatable(f"an argument of type {t}")
        self.params = params
        self.restype = None
        body = tree.body[1:] if ast.get_docstring(tree) is not None else tree.body
        if procedure:         # no value: Numba's status for a None result
            body = body + [ast.Return(value=None)]
        if not body or not isinstance(body[-1], ast.Return):
            raise Untranslatable("a program not ending in a return")
        self.block("b0")
        last = _last_uses(body, self.meminfos)
        self.references(INCREF, self.meminfos)
        self.references(DECREF, last.get(None, ()))
        for k, statement in enumerate(body[:-1]):
            self.statements([statement])
            self.references(DECREF, last.get(k, ()))
        if procedure:
            self.references(DECREF, last.get(len(body) - 1, ()))
            self.emit(f"ret i32 {numba_abi.STATUS_NONE}")
            return
        value, ty = self.expression(body[-1].value)
        if ty == BOOL:
            raise Untranslatable("a boolean result")
        self.restype = ty
        self.references(DECREF, last.get(len(body) - 1, ()))
        self.emit(f"store {ty} {value}, ptr %retptr")
        self.emit(f"ret i32 {numba_abi.STATUS_OK}")

    # -- output --------------------------------------------------------------------------
    def text(self):
        head = f"define i32 @{self.symbol}({', '.join(self.params)}) {{\nentry:\n"
        declares = "".join(d + "\n" for d in self.declares.values())
        return (declares + head + "".join(f"  {x}\n" for x in self.entry) + "  br label %b0\n" +
                "".join(x + "\n" for x in self.body) + "}\n")

    def emit(self, line):
        self.body.append("  " + line)

    def block(self, label):
        self.body.append(f"{label}:")

    def fresh(self, prefix="t"):
        return f"%{prefix}{next(self.names)}"

    def label(self, prefix):
        return f"{prefix}{next(self.names)}"

    def value(self, instruction, prefix="t"):
        name = self.fresh(prefix)
        self.emit(f"{name} = {instruction}")
        return name

    def slot(self, name, ty):
        """A stack slot ``name`` for a value of ``ty``, zeroed at entry (as Numba's)."""
        zero = "0" if ty == I64 else float_const(ty, 0.0)
        self.entry += [f"{name} = alloca {ty}", f"store {ty} {zero}, ptr {name}"]

    def declare(self, name, ret, params, attributes=""):
        self.declares.setdefault(name, f"declare {ret} @{name}({params}){attributes}")

    def references(self, function, arrays):
        """Numba's reference counting of the array arguments ``arrays``: a reference taken
        at entry, dropped after the statement of its last use.  Between these calls LLVM
        forwards no stored value to a load, as in Numba's code, until Numba's pass removes
        them (adcore differentiates one it left, as in a Numba kernel)."""
        for name in arrays:
            self.declare(function, "void", "ptr noalias captures(none)")
            self.emit(f"call void @{function}(ptr {self.meminfos[name]})")

    # -- statements ------------------------------------------------------------------------
    def statements(self, body):
        for s in body:
            method = getattr(self, "_" + type(s).__name__, None)
            if method is None:
                raise Untranslatable(f"the statement {type(s).__name__}")
            method(s)

    def nested_statements(self, body):
        self.nesting += 1
        self.statements(body)
        self.nesting -= 1

    def _Pass(self, s):
        pass

    def _Assign(self, s):
        if len(s.targets) != 1:
            raise Untranslatable("a multiple assignment")
        target = s.targets[0]
        if isinstance(target, ast.Tuple) and isinstance(s.value, ast.Tuple) and \
                len(target.elts) == len(s.value.elts):    # all values first, as Python
            values = [self.expression(v) for v in s.value.elts]
            for name, (value, ty) in zip(target.elts, values):
                if not isinstance(name, ast.Name):
                    raise Untranslatable("an assignment target")
                self.assign(name.id, value, ty)
            return
        value, ty = self.expression(s.value)
        if isinstance(target, ast.Name):
            self.assign(target.id, value, ty)
        elif isinstance(target, ast.Subscript):
            pointer, element = self.element(target)
            self.emit(f"store {element} {self.cast(value, ty, element)}, ptr {pointer}")
        else:
            raise Untranslatable("an assignment target")

    def _AugAssign(self, s):
        if not isinstance(s.target, ast.Name):
            raise Untranslatable("an in-place update of an array item")
        left = self.load(s.target.id)
        value, ty = self.binary(s.op, left, s.value)
        self.assign(s.target.id, value, ty)

    def _For(self, s):
        it = s.iter
        if s.orelse or not isinstance(s.target, ast.Name) or not isinstance(it, ast.Call) or \
                not (isinstance(it.func, ast.Name) and it.func.id == "range") or it.keywords or \
                not 1 <= len(it.args) <= 2 or self.scope.get("range", range) is not range:
            raise Untranslatable("a for loop other than over range(stop) or range(start, stop)")
        bounds = [self.expression(a) for a in it.args]
        if any(t != I64 for _, t in bounds):
            raise Untranslatable("a range of non-integers")
        start, stop = ("0", bounds[0][0]) if len(bounds) == 1 else (bounds[0][0], bounds[1][0])
        # Numba's range iterator: a count of the trips left and the next value; each trip
        # takes the value and counts down, then the loop goes on while one was taken
        iterator, count = self.fresh("next"), self.fresh("count")
        self.slot(iterator, I64)
        self.slot(count, I64)
        difference = self.value(f"sub i64 {stop}, {start}")
        positive = self.value(f"icmp sgt i64 {difference}, 0")
        self.emit(f"store i64 {self.value(f'select i1 {positive}, i64 {difference}, i64 0')}, "
                  f"ptr {count}")
        self.emit(f"store i64 {start}, ptr {iterator}")
        head, take, check = self.label("for"), self.label("take"), self.label("check")
        body, done = self.label("body"), self.label("done")
        self.emit(f"br label %{head}")
        self.block(head)
        left = self.value(f"load i64, ptr {count}")
        more = self.value(f"icmp sgt i64 {left}, 0")
        self.emit(f"br i1 {more}, label %{take}, label %{check}")
        self.block(take)
        i = self.value(f"load i64, ptr {iterator}")
        self.emit(f"store i64 {self.value(f'sub nsw i64 {left}, 1')}, ptr {count}")
        self.emit(f"store i64 {self.value(f'add i64 {i}, 1')}, ptr {iterator}")
        self.assign(s.target.id, i, I64)
        self.emit(f"br label %{check}")
        self.block(check)
        self.emit(f"br i1 {more}, label %{body}, label %{done}")
        self.block(body)
        self.nested_statements(s.body)
        self.emit(f"br label %{head}")
        self.block(done)

    def _While(self, s):
        if s.orelse:
            raise Untranslatable("while ... else")
        head, body, done = self.label("while"), self.label("body"), self.label("done")
        self.emit(f"br label %{head}")
        self.block(head)
        self.emit(f"br i1 {self.condition(s.test)}, label %{body}, label %{done}")
        self.block(body)
        self.nested_statements(s.body)
        self.emit(f"br label %{head}")
        self.block(done)

    def _If(self, s):
        then, other, done = self.label("then"), self.label("else"), self.label("endif")
        self.emit(f"br i1 {self.condition(s.test)}, label %{then}, label %{other}")
        self.block(then)
        self.nested_statements(s.body)
        self.emit(f"br label %{done}")
        self.block(other)
        self.nested_statements(s.orelse)
        self.emit(f"br label %{done}")
        self.block(done)

    def _Expr(self, s):
        call = s.value
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
            raise Untranslatable("an expression statement")
        self.vector_call(call)

    # -- variables -----------------------------------------------------------------------
    def assign(self, name, value, ty):
        """Store into variable ``name``; each variable keeps the one type it was first
        given (where Numba would give a later assignment another type, its SSA versions
        and their unification are not modelled: untranslatable)."""
        if name in self.scalars and not self.prefix and not self.nesting and \
                name not in self.variables:
            del self.scalars[name]      # a scalar argument given a new value at the top
            # level: from here on a variable (Numba's next SSA version, of its own type)
        if name in self.arrays or name in self.scalars or name in self.scope or \
                name in self.frame:
            raise Untranslatable(f"an assignment to the argument or global {name}")
        name = self.prefix + name
        if name not in self.variables:
            if ty == BOOL:
                raise Untranslatable("a boolean variable")
            slot = self.fresh("v")
            self.slot(slot, ty)
            self.variables[name] = (slot, ty)
        slot, declared = self.variables[name]
        if declared != ty:
            raise Untranslatable(f"variable {name} assigned a {ty} and a {declared}")
        self.emit(f"store {ty} {value}, ptr {slot}")

    def load(self, name):
        if name in self.frame:
            return self.frame[name]
        if name in self.scalars and not self.prefix:
            return self.scalars[name]
        if name in self.scope and isinstance(self.scope[name], float):    # Numba freezes it
            return _constant(self.scope[name])
        name = self.prefix + name
        if name not in self.variables:
            raise Untranslatable(f"the name {name}")
        slot, ty = self.variables[name]
        return self.value(f"load {ty}, ptr {slot}"), ty

    # -- expressions ---------------------------------------------------------------------
    def expression(self, e):
        method = getattr(self, "_" + type(e).__name__, None)
        if method is None:
            raise Untranslatable(f"the expression {type(e).__name__}")
        return method(e)

    def _Constant(self, e):
        v = e.value
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise Untranslatable(f"the constant {v!r}")
        if isinstance(v, int):
            if not -2 ** 63 <= v < 2 ** 63:
                raise Untranslatable("an integer beyond int64")
            return str(v), I64
        return float_const(F64, v), F64

    def _Name(self, e):
        return self.load(e.id)

    def _Attribute(self, e):
        """``array.size`` of a 1-D array argument."""
        if e.attr != "size" or not isinstance(e.value, ast.Name) or e.value.id not in self.arrays:
            raise Untranslatable(f"the attribute {e.attr}")
        return self.arrays[e.value.id][1], I64

    def _Subscript(self, e):
        pointer, element = self.element(e)
        return self.value(f"load {element}, ptr {pointer}"), element

    def element(self, e):
        """``(pointer, element type)`` of ``array[index]``, the index wrapped as Numba
        wraps a negative one."""
        if not isinstance(e.value, ast.Name) or e.value.id not in self.arrays:
            raise Untranslatable("an index into something other than an array argument")
        data, shape, element = self.arrays[e.value.id]
        index, ty = self.expression(e.slice)
        if ty != I64:
            raise Untranslatable("a non-integer index")
        negative = self.value(f"icmp slt i64 {index}, 0")
        wrapped = self.value(f"add i64 {index}, {shape}")
        index = self.value(f"select i1 {negative}, i64 {wrapped}, i64 {index}")
        return self.value(f"getelementptr {element}, ptr {data}, i64 {index}"), element

    def _BinOp(self, e):
        return self.binary(e.op, self.expression(e.left), e.right)

    def binary(self, op, left, right_node):
        """``left <op> right`` (``left`` computed, ``right_node`` not yet) as Numba
        types and lowers it."""
        (a, ta), (b, tb) = left, self.expression(right_node)
        if isinstance(op, ast.Div):
            ty = F64 if I64 in (ta, tb) and ta == tb else arithmetic(ta, tb)
        elif type(op) in _INT_OPS:
            ty = arithmetic(ta, tb)
        else:
            raise Untranslatable(f"the operator {type(op).__name__}")
        if ty == I64:
            return self.value(f"{_INT_OPS[type(op)]} i64 {a}, {b}"), I64
        a, b = self.cast(a, ta, ty), self.cast(b, tb, ty)
        return self.value(f"{_FLOAT_OPS[type(op)]} {ty} {a}, {b}"), ty

    def _UnaryOp(self, e):
        value, ty = self.expression(e.operand)
        if isinstance(e.op, ast.UAdd) and ty != BOOL:
            return value, ty
        if isinstance(e.op, ast.USub) and ty == I64:
            return self.value(f"sub i64 0, {value}"), I64
        if isinstance(e.op, ast.USub) and ty in _FLOATS:
            return self.value(f"fsub {ty} {float_const(ty, -0.0)}, {value}"), ty
        raise Untranslatable(f"the unary operator {type(e.op).__name__}")

    def condition(self, e):
        value, ty = self.expression(e)
        if ty != BOOL:
            raise Untranslatable("a condition that is not a comparison")
        return value

    def _Compare(self, e):
        if len(e.ops) != 1 or type(e.ops[0]) not in _ICMP:
            raise Untranslatable("a chained or non-numeric comparison")
        (a, ta), (b, tb) = self.expression(e.left), self.expression(e.comparators[0])
        op = type(e.ops[0])
        if ta == tb == I64:
            return self.value(f"icmp {_ICMP[op]} i64 {a}, {b}"), BOOL
        ty = arithmetic(ta, tb)
        a, b = self.cast(a, ta, ty), self.cast(b, tb, ty)
        return self.value(f"fcmp {_FCMP[op]} {ty} {a}, {b}"), BOOL

    def _IfExp(self, e):
        """Both branches store into one variable of the unified type, as Numba's phi."""
        test = self.condition(e.test)
        then, other, done = self.label("then"), self.label("else"), self.label("endif")
        self.emit(f"br i1 {test}, label %{then}, label %{other}")
        branches = []
        for label, node in ((then, e.body), (other, e.orelse)):
            self.block(label)
            branches.append((self.expression(node), len(self.body)))
            self.emit(f"br label %{done}")
        ty = unify(branches[0][0][1], branches[1][0][1])
        if ty == BOOL:
            raise Untranslatable("a boolean conditional expression")
        slot = self.fresh("phi")
        self.slot(slot, ty)
        for (value, vt), at in reversed(branches):      # the later insertion first
            self.body[at:at] = self.lines_of(
                lambda: self.emit(f"store {ty} {self.cast(value, vt, ty)}, ptr {slot}"))
        self.block(done)
        return self.value(f"load {ty}, ptr {slot}"), ty

    def lines_of(self, write):
        """The lines ``write()`` emits, taken out of the body."""
        body, self.body = self.body, []
        try:
            write()
            return self.body
        finally:
            self.body = body

    def _Call(self, e):
        f = e.func
        if isinstance(f, ast.Name) and not e.keywords:
            callee = self.scope.get(f.id)
            if callee is like and len(e.args) == 2 and isinstance(e.args[0], ast.Name) and \
                    e.args[0].id in self.arrays:       # the value in the array's element type
                value, ty = self.expression(e.args[1])
                target = self.arrays[e.args[0].id][2]
                return self.cast(value, ty, target), target
            if _inlined(callee) and len(e.args) > 1:
                return self.inlined_call(callee.py_func, *[self.expression(a) for a in e.args])
        if e.keywords or len(e.args) != 1:
            raise Untranslatable("a call")
        if isinstance(f, ast.Name) and f.id == "abs" and self.scope.get("abs", abs) is abs:
            value, ty = self.expression(e.args[0])
            if ty not in _FLOATS:
                raise Untranslatable("abs of a non-float")
            return self.intrinsic("llvm.fabs", value, ty), ty
        if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)):
            raise Untranslatable("a call")
        module = self.scope.get(f.value.id)
        value, ty = self.expression(e.args[0])
        if ty == BOOL:
            raise Untranslatable("a call on a boolean")
        if module is np and f.attr in ("float32", "float64"):
            target = F32 if f.attr == "float32" else F64
            return self.cast(value, ty, target), target
        if (module is kernels or module is kernels.S) and _inlined(getattr(module, f.attr, None)):
            return self.inlined_call(getattr(module, f.attr).py_func, (value, ty))
        if module is not math:
            raise Untranslatable(f"the call {f.value.id}.{f.attr}")
        if ty == I64:                 # Numba: an integer argument is converted to float64
            value, ty = self.cast(value, I64, F64), F64
        if f.attr == "isfinite":      # x - x is ordered
            difference = self.value(f"fsub {ty} {value}, {value}")
            return self.value(f"fcmp ord {ty} {difference}, {difference}"), BOOL
        if f.attr in _INTRINSICS:
            return self.intrinsic(_INTRINSICS[f.attr], value, ty), ty
        if f.attr in LIBM:
            name = LIBM[f.attr][ty == F64]
            self.declare(name, ty, ty, " #0")
            return self.value(f"call {ty} @{name}({ty} {value})"), ty
        raise Untranslatable(f"math.{f.attr}")

    def inlined_call(self, fn, *arguments):
        """``fn(*arguments)`` (``(value, type)`` each) for an njit function Numba inlines where it is called
        (``inline="always"``): its body written here, with variables of its own and its
        closure's numbers as constants; each ``return`` stores into one result variable of
        the returns' unified type (as Numba's inliner does) and leaves the body."""
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
        body = tree.body[1:] if ast.get_docstring(tree) is not None else tree.body
        args = tree.args
        if not isinstance(tree, ast.FunctionDef) or len(args.args) != len(arguments) or args.vararg or \
                args.kwarg or args.kwonlyargs or args.defaults or args.posonlyargs or \
                not body or not isinstance(body[-1], ast.Return):     # (its njit decorator aside)
            raise Untranslatable(f"the callee {fn.__qualname__}")
        frame = {a.arg: argument for a, argument in zip(args.args, arguments)}
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            frame[name] = _constant(cell.cell_contents)
        saved = self.scope, self.frame, self.prefix, self.returns
        prefix = f"{fn.__name__}.{next(self.names)}."
        self.scope, self.frame, self.prefix = fn.__globals__, frame, prefix
        self.returns = (self.label("return"), [])
        try:
            self.statements(body)
            exit_label, returns = self.returns
        finally:
            self.scope, self.frame, self.prefix, self.returns = saved
        ty = functools.reduce(unify, [t for (_, t), _ in returns])
        if ty == BOOL:
            raise Untranslatable("a callee returning a boolean")
        slot = self.fresh("result")
        self.slot(slot, ty)
        for (value, vt), at in reversed(returns):      # the later insertion first
            self.body[at:at] = self.lines_of(
                lambda: self.emit(f"store {ty} {self.cast(value, vt, ty)}, ptr {slot}"))
        self.emit(f"br label %{exit_label}")    # from the block after the last return
        self.block(exit_label)
        return self.value(f"load {ty}, ptr {slot}"), ty

    def _Return(self, s):
        if self.returns is None or s.value is None:
            raise Untranslatable("a return before the program's end")
        exit_label, returns = self.returns
        returns.append((self.expression(s.value), len(self.body)))
        self.emit(f"br label %{exit_label}")
        self.block(self.label("unreachable"))     # for what follows in the same block

    def intrinsic(self, name, value, ty):
        full = f"{name}.{_SUFFIX[ty]}"
        self.declare(full, ty, ty)
        return self.value(f"call {ty} @{full}({ty} {value})")

    def vector_call(self, call):
        """``vector_<op>_<dtype>(out, oo, x, xo)`` (:func:`layers.vector_kernels.vector_op`;
        ``..._first<k>``: the first ``k`` elements) as its code generator writes it."""
        name = call.func.id
        base, _, first = name.partition("_first")
        count = int(first) if first.isdigit() else None
        op, _, dtype = base[len("vector_"):].rpartition("_") if base.startswith("vector_") \
            else ("", "", "")
        if not op or dtype not in ("float32", "float64") or call.keywords or len(call.args) != 4 or \
                (first and count is None) or \
                self.scope.get(name) is not vector_kernels.vector_op(op, dtype, count):
            raise Untranslatable(f"the call {name}")
        out, oo, x, xo = call.args
        element = F32 if dtype == "float32" else F64
        vector = f"<{vector_kernels.lanes(dtype)} x {element}>"
        pointers = []
        for array, offset in ((out, oo), (x, xo)):
            if not isinstance(array, ast.Name) or array.id not in self.arrays or \
                    self.arrays[array.id][2] != element:
                raise Untranslatable("a vector kernel on something other than an array argument")
            pointers.append((self.arrays[array.id][0], self.expression(offset)))
        if any(t != I64 for _, (_, t) in pointers):
            raise Untranslatable("a vector kernel at a non-integer offset")
        (out_data, (out_at, _)), (x_data, (x_at, _)) = pointers
        source = self.value(f"getelementptr {element}, ptr {x_data}, i64 {x_at}")
        target = self.value(f"getelementptr {element}, ptr {out_data}, i64 {out_at}")
        intrinsic = f"llvm.{op}.v{vector_kernels.lanes(dtype)}{_SUFFIX[element]}"
        self.declare(intrinsic, vector, vector)
        size = np.dtype(dtype).itemsize
        if count is None:
            loaded = self.value(f"load {vector}, ptr {source}, align {size}")
            result = self.value(f"call {vector} @{intrinsic}({vector} {loaded})")
            self.emit(f"store {vector} {result}, ptr {target}, align {size}")
            return
        loaded = "zeroinitializer"          # lanes read and written one by one
        for k in range(count):
            at = self.value(f"getelementptr {element}, ptr {source}, i64 {k}")
            lane = self.value(f"load {element}, ptr {at}")
            loaded = self.value(f"insertelement {vector} {loaded}, {element} {lane}, i32 {k}")
        result = self.value(f"call {vector} @{intrinsic}({vector} {loaded})")
        for k in range(count):
            at = self.value(f"getelementptr {element}, ptr {target}, i64 {k}")
            self.emit(f"store {element} {self.value(f'extractelement {vector} {result}, i32 {k}')}, ptr {at}")

    def cast(self, value, src, dst):
        """``value`` of type ``src`` converted to ``dst`` as Numba's ``context.cast``."""
        if src == dst:
            return value
        if src == I64 and dst in _FLOATS:
            return self.value(f"sitofp i64 {value} to {dst}")
        if src == F32 and dst == F64:
            return self.value(f"fpext float {value} to double")
        if src == F64 and dst == F32:
            return self.value(f"fptrunc double {value} to float")
        raise Untranslatable(f"a conversion from {src} to {dst}")


def _inlined(value):
    """Whether ``value`` is an njit function Numba inlines where it is called."""
    return numba_abi.is_dispatcher(value) and value.targetoptions.get("inline") == "always"


def _constant(value):
    """``(LLVM literal, type)`` of a number Numba freezes into the code (a closure's)."""
    if isinstance(value, np.floating) and value.dtype in (np.float32, np.float64):
        ty = F32 if value.dtype == np.float32 else F64
        return float_const(ty, float(value)), ty
    if type(value) is float:
        return float_const(F64, value), F64
    raise Untranslatable(f"the constant {value!r}")


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
    return DirectProgram(source, argtypes, symbol, text, _NUMBA_TYPES[fn.restype])
