"""Writing LLVM IR text, for every code generator of adcore and layers: the function
writer (:class:`Emitter`: fresh names, lines, labels, declarations), the long fixed IR
read at import from ``templates/*.ll`` (:func:`fill`), typed constants, and a small typed
expression helper that derivative rules are written with."""
import math
import string
import struct
from importlib import resources

import numpy as np

from ..errors import UnsupportedError
from .model import label, vector_shape


def float_const(type_, value):
    """An exact LLVM literal for ``value`` in ``type_`` (float constants use the
    hexadecimal double form LLVM requires; vectors are splats)."""
    shape = vector_shape(type_)
    if shape:
        return "zeroinitializer" if value == 0 and math.copysign(1.0, value) > 0 \
            else f"splat ({shape[1]} {float_const(shape[1], value)})"
    if type_ == "float":
        value = float(np.float32(value))
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", float(value)))[0]


# The flags of adjoint sums (d += ...): their order is free, so LLVM may vectorise them, and
# the sign of a zero sum is not part of a derivative, so ``0.0 + d`` folds to ``d`` (the
# reverse of ``a[i] += v`` resets the shadow to 0.0, then adds the load's adjoint back).
SUM = "reassoc nsz"


def alignment(instr):
    """``", align N"`` of the primal load or store ``instr``, for the access of its shadow
    (which is laid out as its memory): without it LLVM assumes a vector type's own
    alignment (32 bytes for ``<8 x float>``) and may emit aligned moves that fault."""
    return f", align {instr.align}" if instr.align is not None else ", align 1"


def adjoint_zero(type_):
    """The start value of an adjoint held in a register: -0.0, the exact identity of
    ``fadd`` (x + -0.0 = x for every x, so LLVM folds the first ``+=`` away; x + 0.0 is not
    foldable: it turns -0.0 into 0.0)."""
    return float_const(type_, -0.0)


def is_finite_literal(value):
    """True for a scalar float literal (``2.5``, ``0x4004000000000000``) that is finite."""
    text = str(value)
    try:
        number = struct.unpack("<d", struct.pack("<Q", int(text, 16)))[0] if text.startswith("0x") \
            else float(text)
    except ValueError:
        return False
    return np.isfinite(number)


class GeneratorBase:
    """What the adjoint and tangent generators share: ``self.e`` (an :class:`Emitter`),
    ``self.allocas`` (the entry block's allocas) and ``self.spec`` (naming the kernel)."""

    def unsupported(self, instr, detail):
        return UnsupportedError(f"'{instr.text}'", self.spec.pyname, detail, instr.location)

    def alloca(self, type_, hint):
        ref = self.e.fresh(hint)
        self.allocas.append(f"  {ref} = alloca {type_}")
        return ref


class Emitter:
    """The one writer of LLVM function text: fresh local names (``%<prefix><hint>.<n>``,
    none of them in ``taken``), the lines of the body, block labels (fresh names too), the
    entry block's hoisted lines (allocas) and the declarations the body needs, each once."""

    def __init__(self, taken=(), prefix="ad."):
        self.taken = set(taken)
        self.prefix = prefix
        self.counter = 0
        self.lines = []
        self.entry = []             # lines of the entry block, before the body's
        self.declarations = {}
        # the entry block's label: a fresh one when the body has a block or value named entry
        self.entry_label = self.fresh("entry")[1:] if "entry" in self.taken else "entry"
        self.block = self.entry_label        # the label of the block being written

    def fresh(self, hint="t"):
        """A new local name (a value's, or a block's: :meth:`label` takes it)."""
        while True:
            self.counter += 1
            name = f"{self.prefix}{hint}.{self.counter}"
            if name not in self.taken:
                self.taken.add(name)
                return "%" + name

    def __call__(self, text, hint="t"):
        """Emit ``%new = text`` and return ``%new``."""
        ref = self.fresh(hint)
        self.lines.append(f"  {ref} = {text}")
        return ref

    def line(self, text):
        self.lines.append(f"  {text}")

    def label(self, name):
        """Start block ``name`` (``%name`` or ``name``)."""
        self.block = name[1:] if name.startswith("%") else name
        self.lines.append(label(self.block))

    def branch(self, cond, then, other):
        """``br i1 cond`` to blocks ``then`` and ``other`` (``%`` names)."""
        self.line(f"br i1 {cond}, label {then}, label {other}")

    def jump(self, target):
        self.line(f"br label {target}")

    def load_at(self, pointer, offset, type_, hint="f"):
        """The ``type_`` value ``offset`` bytes from ``pointer`` (a field of a struct)."""
        at = self(f"getelementptr i8, ptr {pointer}, i64 {offset}", hint + ".p")
        return self(f"load {type_}, ptr {at}", hint)

    def all_of(self, conditions):
        """An i1: every one of ``conditions`` (i1 values, at least one) holds."""
        result = conditions[0]
        for c in conditions[1:]:
            result = self(f"and i1 {result}, {c}", "all")
        return result

    def any_of(self, conditions):
        """An i1: one of ``conditions`` (i1 values, at least one) holds."""
        result = conditions[0]
        for c in conditions[1:]:
            result = self(f"or i1 {result}, {c}", "any")
        return result

    def alloca(self, type_, hint="slot", init=None):
        """A fresh stack slot of ``type_`` in the entry block, stored ``init`` there when given."""
        ref = self.fresh(hint)
        self.entry.append(f"  {ref} = alloca {type_}")
        if init is not None:
            self.entry.append(f"  store {type_} {init}, ptr {ref}")
        return ref

    def declare(self, name, text):
        """Declare global ``name`` by ``text`` (``declare ...``), once."""
        self.declarations.setdefault(name, text)

    def define(self, signature):
        """The text of ``define <signature>``: the entry block's lines, then the body's."""
        return function_text(signature, [label(self.entry_label), *self.entry, *self.lines])

    def module(self, signature):
        """The declarations, then the function :meth:`define` writes."""
        return "".join(d + "\n" for d in self.declarations.values()) + self.define(signature)


def function_text(signature, lines):
    """The text of ``define <signature>`` whose body is ``lines`` (labels included)."""
    return "\n".join([f"define {signature} {{", *lines, "}", ""])


TEMPLATES = {path.name[:-len(".ll")]: string.Template(path.read_text())
             for path in resources.files(__package__).joinpath("templates").iterdir()
             if path.name.endswith(".ll")}


def fill(template, **values):
    """The text of template ``templates/<template>.ll`` with its ``$name`` placeholders
    replaced by ``values`` (each one is needed; ``$$`` is a ``$``)."""
    return TEMPLATES[template].substitute(values)


INTRINSICS = {"sin", "cos", "exp", "exp2", "log", "log2", "log10", "sqrt", "fabs", "pow",
              "copysign", "floor", "ceil", "trunc", "minnum", "maxnum", "fma"}


def intrinsic_suffix(type_):
    """The suffix of LLVM's math intrinsics on ``type_`` (``f64``, ``v4f32``...)."""
    shape = vector_shape(type_)
    element = shape[1] if shape else type_
    suffix = "f64" if element == "double" else "f32"
    return f"v{shape[0]}{suffix}" if shape else suffix


def math_symbol(name, type_, arity=1):
    """``(symbol, declaration)`` of math function ``name`` on ``type_``: an LLVM
    intrinsic when one exists, else libm's (``sin``, ``sinf``)."""
    symbol = f"llvm.{name}.{intrinsic_suffix(type_)}" if name in INTRINSICS else \
        name if type_ == "double" else name + "f"
    return symbol, f"declare {type_} @{symbol}({', '.join([type_] * arity)})"


class Expr:
    """Typed arithmetic on IR values, used by the derivative rules.

    Arguments are IR references (``%x`` or literals) or lazy values whose ``str``
    emits their materialisation on first use."""

    def __init__(self, emitter, type_):
        self.e, self.t = emitter, type_
        self.s = intrinsic_suffix(type_)
        self.vector = vector_shape(type_) is not None

    def c(self, value):
        return float_const(self.t, value)

    def _bin(self, op, a, b):
        return self.e(f"{op} {self.t} {a}, {b}")

    def add(self, a, b):
        return self._bin("fadd", a, b)

    def sub(self, a, b):
        return self._bin("fsub", a, b)

    def mul(self, a, b):
        return self._bin("fmul", a, b)

    def div(self, a, b):
        return self._bin("fdiv", a, b)

    def neg(self, a):
        return self.e(f"fneg {self.t} {a}")

    def square(self, a):
        return self.mul(a, a)

    def select(self, cond, a, b):
        shape = vector_shape(self.t)
        ctype = f"<{shape[0]} x i1>" if shape else "i1"
        return self.e(f"select {ctype} {cond}, {self.t} {a}, {self.t} {b}")

    def unless_zero(self, dy, value):
        """``value``, or 0 where the adjoint ``dy`` is 0: a zero adjoint never becomes NaN
        through an infinite partial derivative (0·∞).  Written ``select (dy != 0), value, 0``
        (``une``: NaN keeps ``value``, as ``oeq`` would): added to an accumulator, LLVM makes
        it one add under the mask ``dy != 0`` instead of an add and a masked move back."""
        return self.select(self.fcmp("une", dy, self.c(0)), value, self.c(0))

    def scale(self, dy, d):
        """``dy·d``, and 0 where ``dy`` is 0 (see :meth:`unless_zero`; no test is needed
        when ``d`` is a finite constant)."""
        if getattr(d, "op", None) is not None and d.op.is_const and is_finite_literal(d.op.ref):
            return self.mul(dy, d)
        return self.unless_zero(dy, self.mul(dy, d))

    def fcmp(self, pred, a, b):
        return self.e(f"fcmp {pred} {self.t} {a}, {b}")

    def cast(self, op, a, to):
        return self.e(f"{op} {self.t} {a} to {to}")

    def call(self, name, *args):
        """Call math function ``name`` (an LLVM intrinsic when one exists, else libm)."""
        if self.vector and name not in INTRINSICS:
            raise UnsupportedError(f"{name} on {self.t}", None, "no vector form of this function")
        symbol, declaration = math_symbol(name, self.t, len(args))
        self.e.declare(symbol, declaration)
        typed = ", ".join(f"{self.t} {a}" for a in args)
        return self.e(f"call {self.t} @{symbol}({typed})")
