"""The calls of the Python subset (:mod:`layers.staging.direct_ir`) as Numba lowers them:
``math`` functions (LLVM intrinsics and pure libm calls), ``abs``, numpy's float casts,
``optim.rules.like``, njit helpers Numba inlines (their bodies written in place) and the
vector kernels of :mod:`layers.vector_kernels`."""
import ast
import functools
import inspect
import math
import textwrap

import numpy as np

from adcore.known_functions import LIBM

from optim.rules import like

from .. import kernels, vector_kernels
from .direct_types import BOOL, F32, F64, FLOATS, I64, SUFFIX, Untranslatable, frozen_constant, inlined, unify

# math functions as Numba lowers them on a float: LLVM intrinsics, and libm functions
# (float32 name, float64 name: adcore.known_functions.LIBM) declared pure
# (``cgutils.insert_pure_function``, attributes #0 of the module)
_INTRINSICS = {"exp": "llvm.exp", "log": "llvm.log", "sin": "llvm.sin", "cos": "llvm.cos",
               "fabs": "llvm.fabs"}


class Calls:
    """The calls of a translated function (a part of ``direct_ir``'s function writer:
    ``self.e`` is its :class:`adcore.ir.writer.Emitter`)."""

    def _Call(self, node):
        f = node.func
        if isinstance(f, ast.Name) and not node.keywords:
            callee = self.scope.get(f.id)
            if callee is like and len(node.args) == 2 and isinstance(node.args[0], ast.Name) and \
                    node.args[0].id in self.arrays:       # the value in the array's element type
                value, ty = self.expression(node.args[1])
                target = self.arrays[node.args[0].id][2]
                return self.cast(value, ty, target), target
            if inlined(callee) and len(node.args) > 1:
                return self.inlined_call(callee.py_func, *[self.expression(a) for a in node.args])
        if node.keywords or len(node.args) != 1:
            raise Untranslatable("a call")
        if isinstance(f, ast.Name) and f.id == "abs" and self.scope.get("abs", abs) is abs:
            value, ty = self.expression(node.args[0])
            if ty not in FLOATS:
                raise Untranslatable("abs of a non-float")
            return self.intrinsic("llvm.fabs", value, ty), ty
        if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)):
            raise Untranslatable("a call")
        module = self.scope.get(f.value.id)
        value, ty = self.expression(node.args[0])
        if ty == BOOL:
            raise Untranslatable("a call on a boolean")
        if module is np and f.attr in ("float32", "float64"):
            target = F32 if f.attr == "float32" else F64
            return self.cast(value, ty, target), target
        if (module is kernels or module is kernels.S) and inlined(getattr(module, f.attr, None)):
            return self.inlined_call(getattr(module, f.attr).py_func, (value, ty))
        if module is not math:
            raise Untranslatable(f"the call {f.value.id}.{f.attr}")
        if ty == I64:                 # Numba: an integer argument is converted to float64
            value, ty = self.cast(value, I64, F64), F64
        if f.attr == "isfinite":      # x - x is ordered
            difference = self.e(f"fsub {ty} {value}, {value}")
            return self.e(f"fcmp ord {ty} {difference}, {difference}"), BOOL
        if f.attr in _INTRINSICS:
            return self.intrinsic(_INTRINSICS[f.attr], value, ty), ty
        if f.attr in LIBM:
            name = LIBM[f.attr][ty == F64]
            self.e.declare(name, f"declare {ty} @{name}({ty}) #0")
            return self.e(f"call {ty} @{name}({ty} {value})"), ty
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
            frame[name] = frozen_constant(cell.cell_contents)
        saved = self.scope, self.frame, self.prefix, self.returns
        prefix = self.e.fresh(fn.__name__)[1:] + "."
        self.scope, self.frame, self.prefix = fn.__globals__, frame, prefix
        self.returns = (self.e.fresh("return"), [])
        try:
            self.statements(body)
            exit_label, returns = self.returns
        finally:
            self.scope, self.frame, self.prefix, self.returns = saved
        ty = functools.reduce(unify, [t for (_, t), _ in returns])
        if ty == BOOL:
            raise Untranslatable("a callee returning a boolean")
        slot = self.slot("result", ty)
        for (value, vt), at in reversed(returns):      # the later insertion first
            self.e.lines[at:at] = self.lines_of(
                lambda: self.e.line(f"store {ty} {self.cast(value, vt, ty)}, ptr {slot}"))
        self.e.jump(exit_label)    # from the block after the last return
        self.e.label(exit_label)
        return self.e(f"load {ty}, ptr {slot}"), ty

    def intrinsic(self, name, value, ty):
        full = f"{name}.{SUFFIX[ty]}"
        self.e.declare(full, f"declare {ty} @{full}({ty})")
        return self.e(f"call {ty} @{full}({ty} {value})")

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
        source = self.e(f"getelementptr {element}, ptr {x_data}, i64 {x_at}")
        target = self.e(f"getelementptr {element}, ptr {out_data}, i64 {out_at}")
        intrinsic = f"llvm.{op}.v{vector_kernels.lanes(dtype)}{SUFFIX[element]}"
        self.e.declare(intrinsic, f"declare {vector} @{intrinsic}({vector})")
        size = np.dtype(dtype).itemsize
        if count is None:
            loaded = self.e(f"load {vector}, ptr {source}, align {size}")
            result = self.e(f"call {vector} @{intrinsic}({vector} {loaded})")
            self.e.line(f"store {vector} {result}, ptr {target}, align {size}")
            return
        loaded = "zeroinitializer"          # lanes read and written one by one
        for k in range(count):
            at = self.e(f"getelementptr {element}, ptr {source}, i64 {k}")
            lane = self.e(f"load {element}, ptr {at}")
            loaded = self.e(f"insertelement {vector} {loaded}, {element} {lane}, i32 {k}")
        result = self.e(f"call {vector} @{intrinsic}({vector} {loaded})")
        for k in range(count):
            at = self.e(f"getelementptr {element}, ptr {target}, i64 {k}")
            self.e.line(f"store {element} {self.e(f'extractelement {vector} {result}, i32 {k}')}, ptr {at}")
