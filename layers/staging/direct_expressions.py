"""The expressions of the Python subset (:mod:`layers.staging.direct_ir`) as Numba types
and lowers them: constants, names, ``array.size``, items of 1-D arrays (negative indices
wrapped), arithmetic, comparisons, conditional expressions and conversions."""
import ast

from adcore.ir.writer import float_const

from .direct_types import BOOL, F32, F64, FLOATS, I64, Untranslatable, arithmetic, unify

_INT_OPS = {ast.Add: "add nsw", ast.Sub: "sub nsw", ast.Mult: "mul nsw"}
_FLOAT_OPS = {ast.Add: "fadd", ast.Sub: "fsub", ast.Mult: "fmul", ast.Div: "fdiv"}
_ICMP = {ast.Lt: "slt", ast.LtE: "sle", ast.Gt: "sgt", ast.GtE: "sge", ast.Eq: "eq", ast.NotEq: "ne"}
_FCMP = {ast.Lt: "olt", ast.LtE: "ole", ast.Gt: "ogt", ast.GtE: "oge", ast.Eq: "oeq", ast.NotEq: "une"}


class Expressions:
    """The expressions of a translated function (a part of ``direct_ir``'s function
    writer: ``self.e`` is its :class:`adcore.ir.writer.Emitter`); each returns ``(value,
    LLVM type)``."""

    def expression(self, node):
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            raise Untranslatable(f"the expression {type(node).__name__}")
        return method(node)

    def _Constant(self, node):
        v = node.value
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise Untranslatable(f"the constant {v!r}")
        if isinstance(v, int):
            if not -2 ** 63 <= v < 2 ** 63:
                raise Untranslatable("an integer beyond int64")
            return str(v), I64
        return float_const(F64, v), F64

    def _Name(self, node):
        return self.load(node.id)

    def _Attribute(self, node):
        """``array.size`` of a 1-D array argument."""
        if node.attr != "size" or not isinstance(node.value, ast.Name) or node.value.id not in self.arrays:
            raise Untranslatable(f"the attribute {node.attr}")
        return self.arrays[node.value.id][1], I64

    def _Subscript(self, node):
        pointer, element = self.element(node)
        return self.e(f"load {element}, ptr {pointer}"), element

    def element(self, node):
        """``(pointer, element type)`` of ``array[index]``, the index wrapped as Numba
        wraps a negative one."""
        if not isinstance(node.value, ast.Name) or node.value.id not in self.arrays:
            raise Untranslatable("an index into something other than an array argument")
        data, shape, element = self.arrays[node.value.id]
        index, ty = self.expression(node.slice)
        if ty != I64:
            raise Untranslatable("a non-integer index")
        negative = self.e(f"icmp slt i64 {index}, 0")
        wrapped = self.e(f"add i64 {index}, {shape}")
        index = self.e(f"select i1 {negative}, i64 {wrapped}, i64 {index}")
        return self.e(f"getelementptr {element}, ptr {data}, i64 {index}"), element

    def _BinOp(self, node):
        return self.binary(node.op, self.expression(node.left), node.right)

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
            return self.e(f"{_INT_OPS[type(op)]} i64 {a}, {b}"), I64
        a, b = self.cast(a, ta, ty), self.cast(b, tb, ty)
        return self.e(f"{_FLOAT_OPS[type(op)]} {ty} {a}, {b}"), ty

    def _UnaryOp(self, node):
        value, ty = self.expression(node.operand)
        if isinstance(node.op, ast.UAdd) and ty != BOOL:
            return value, ty
        if isinstance(node.op, ast.USub) and ty == I64:
            return self.e(f"sub i64 0, {value}"), I64
        if isinstance(node.op, ast.USub) and ty in FLOATS:
            return self.e(f"fsub {ty} {float_const(ty, -0.0)}, {value}"), ty
        raise Untranslatable(f"the unary operator {type(node.op).__name__}")

    def condition(self, node):
        value, ty = self.expression(node)
        if ty != BOOL:
            raise Untranslatable("a condition that is not a comparison")
        return value

    def _Compare(self, node):
        if len(node.ops) != 1 or type(node.ops[0]) not in _ICMP:
            raise Untranslatable("a chained or non-numeric comparison")
        (a, ta), (b, tb) = self.expression(node.left), self.expression(node.comparators[0])
        op = type(node.ops[0])
        if ta == tb == I64:
            return self.e(f"icmp {_ICMP[op]} i64 {a}, {b}"), BOOL
        ty = arithmetic(ta, tb)
        a, b = self.cast(a, ta, ty), self.cast(b, tb, ty)
        return self.e(f"fcmp {_FCMP[op]} {ty} {a}, {b}"), BOOL

    def _IfExp(self, node):
        """Both branches store into one variable of the unified type, as Numba's phi."""
        test = self.condition(node.test)
        then, other, done = self.e.fresh("then"), self.e.fresh("else"), self.e.fresh("endif")
        self.e.line(f"br i1 {test}, label {then}, label {other}")
        branches = []
        for label, branch in ((then, node.body), (other, node.orelse)):
            self.e.label(label)
            branches.append((self.expression(branch), len(self.e.lines)))
            self.e.line(f"br label {done}")
        ty = unify(branches[0][0][1], branches[1][0][1])
        if ty == BOOL:
            raise Untranslatable("a boolean conditional expression")
        slot = self.slot("phi", ty)
        for (value, vt), at in reversed(branches):      # the later insertion first
            self.e.lines[at:at] = self.lines_of(
                lambda: self.e.line(f"store {ty} {self.cast(value, vt, ty)}, ptr {slot}"))
        self.e.label(done)
        return self.e(f"load {ty}, ptr {slot}"), ty

    def lines_of(self, write):
        """The lines ``write()`` emits, taken out of the body."""
        body, self.e.lines = self.e.lines, []
        try:
            write()
            return self.e.lines
        finally:
            self.e.lines = body

    def cast(self, value, src, dst):
        """``value`` of type ``src`` converted to ``dst`` as Numba's ``context.cast``."""
        if src == dst:
            return value
        if src == I64 and dst in FLOATS:
            return self.e(f"sitofp i64 {value} to {dst}")
        if src == F32 and dst == F64:
            return self.e(f"fpext float {value} to double")
        if src == F64 and dst == F32:
            return self.e(f"fptrunc double {value} to float")
        raise Untranslatable(f"a conversion from {src} to {dst}")
