"""The statements of the Python subset (:mod:`layers.staging.direct_ir`) as Numba lowers
them: assignments to variables (stack slots, as Numba's) and to array items, loops over
``range``, ``while``, ``if``, vector-kernel calls and the returns of inlined callees."""
import ast

from adcore.ir.writer import float_const

from .direct_types import BOOL, I64, Untranslatable, frozen_constant


class Statements:
    """The statements and variables of a translated function (a part of ``direct_ir``'s
    function writer: ``self.e`` is its :class:`adcore.ir.writer.Emitter`)."""

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
            self.e.line(f"store {element} {self.cast(value, ty, element)}, ptr {pointer}")
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
        iterator, count = self.slot("next", I64), self.slot("count", I64)
        difference = self.e(f"sub i64 {stop}, {start}")
        positive = self.e(f"icmp sgt i64 {difference}, 0")
        self.e.line(f"store i64 {self.e(f'select i1 {positive}, i64 {difference}, i64 0')}, ptr {count}")
        self.e.line(f"store i64 {start}, ptr {iterator}")
        head, take, check = self.e.fresh("for"), self.e.fresh("take"), self.e.fresh("check")
        body, done = self.e.fresh("body"), self.e.fresh("done")
        self.e.jump(head)
        self.e.label(head)
        left = self.e(f"load i64, ptr {count}")
        more = self.e(f"icmp sgt i64 {left}, 0")
        self.e.branch(more, take, check)
        self.e.label(take)
        i = self.e(f"load i64, ptr {iterator}")
        self.e.line(f"store i64 {self.e(f'sub nsw i64 {left}, 1')}, ptr {count}")
        self.e.line(f"store i64 {self.e(f'add i64 {i}, 1')}, ptr {iterator}")
        self.assign(s.target.id, i, I64)
        self.e.jump(check)
        self.e.label(check)
        self.e.branch(more, body, done)
        self.e.label(body)
        self.nested_statements(s.body)
        self.e.jump(head)
        self.e.label(done)

    def _While(self, s):
        if s.orelse:
            raise Untranslatable("while ... else")
        head, body, done = self.e.fresh("while"), self.e.fresh("body"), self.e.fresh("done")
        self.e.jump(head)
        self.e.label(head)
        self.e.branch(self.condition(s.test), body, done)
        self.e.label(body)
        self.nested_statements(s.body)
        self.e.jump(head)
        self.e.label(done)

    def _If(self, s):
        then, other, done = self.e.fresh("then"), self.e.fresh("else"), self.e.fresh("endif")
        self.e.branch(self.condition(s.test), then, other)
        self.e.label(then)
        self.nested_statements(s.body)
        self.e.jump(done)
        self.e.label(other)
        self.nested_statements(s.orelse)
        self.e.jump(done)
        self.e.label(done)

    def _Expr(self, s):
        call = s.value
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
            raise Untranslatable("an expression statement")
        self.vector_call(call)

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
            self.variables[name] = (self.slot("v", ty), ty)
        slot, declared = self.variables[name]
        if declared != ty:
            raise Untranslatable(f"variable {name} assigned a {ty} and a {declared}")
        self.e.line(f"store {ty} {value}, ptr {slot}")

    def load(self, name):
        if name in self.frame:
            return self.frame[name]
        if name in self.scalars and not self.prefix:
            return self.scalars[name]
        if name in self.scope and isinstance(self.scope[name], float):    # Numba freezes it
            return frozen_constant(self.scope[name])
        name = self.prefix + name
        if name not in self.variables:
            raise Untranslatable(f"the name {name}")
        slot, ty = self.variables[name]
        return self.e(f"load {ty}, ptr {slot}"), ty

    def _Return(self, s):
        if self.returns is None or s.value is None:
            raise Untranslatable("a return before the program's end")
        exit_label, returns = self.returns
        returns.append((self.expression(s.value), len(self.e.lines)))
        self.e.jump(exit_label)
        self.e.label(self.e.fresh("unreachable"))     # for what follows in the same block

    def slot(self, hint, ty):
        """A new stack slot for a value of ``ty``, zeroed at entry (as Numba's)."""
        return self.e.alloca(ty, hint, "0" if ty == I64 else float_const(ty, 0.0))
