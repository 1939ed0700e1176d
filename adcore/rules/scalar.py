"""The derivative rules: one table, each rule next to its math.

A rule receives ``X`` (an :class:`adcore.ir.writer.Expr` in the instruction's float type),
the operands ``a, b, c...`` and the result ``y`` (lazy: materialised in the reverse pass
only when the rule uses them) and the adjoint ``dy``; it returns, for each operand, a
thunk computing that operand's adjoint contribution (``None`` where there is none), or a
:class:`Lane` (a contribution to one lane of a vector).  Thunks run only for active
operands, so nothing is materialised for the others.

**Singular points.** A zero adjoint stays zero: where a partial derivative is infinite
or undefined (log at 0, asin at ±1, pow with a zero base, a division by zero, overflow, a product
with ±inf), ``X.scale``/``X.unless_zero`` give 0 when ``dy`` is 0 instead of 0·∞ = NaN.  Where a
derivative is infinite at an isolated point, Enzyme's convention gives 0 there (sqrt, cbrt
and hypot at 0); ``pow``'s ``b a^(b-1)`` is 0 when ``b`` is 0.  Elsewhere a nonzero adjoint
meets the derivative as the math says (±inf).

Instructions are keyed by opcode, calls by the math function's plain name: LLVM
intrinsics (``llvm.sin.f64``) and libm calls (``sin``, ``sinf``) share one entry.

**Tangents (forward mode)** come from the same entries: an entry's thunks evaluated at
``dy = 1`` are the partial derivatives ``dy/da_i``, and the tangent is
``dy = sum_i scale(da_i, dy/da_i)`` over the operands that have tangents (so a zero tangent
stays zero where a partial is infinite, and sqrt'(0) = 0 as in reverse mode).  The entries
made with ``_linear`` (additions, negation, casts, selects, lane moves) are linear in their
float operands and carry their tangent: the same operation applied to the tangents.
"""
import math
import re
from typing import NamedTuple

from ..ir.model import Operand, is_float_type, vector_shape
from ..ir.writer import Expr, float_const

LN2, LN10 = math.log(2.0), math.log(10.0)
TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _linear(adjoint, tangent):
    """An entry linear in its float operands: ``adjoint`` for reverse mode, and its forward
    ``tangent(instr, t)``, the IR text of the same operation on the operands' tangents ``t``."""
    adjoint.tangent = tangent
    return adjoint


def _unary(derivative):
    """Rule for y = f(x) from f'(x) written as ``derivative(X, x, y)``."""
    return lambda X, ops, y, dy: [lambda: X.scale(dy, derivative(X, ops[0], y))]


def _zero_at_zero(derivative):
    """Rule for y = f(x) whose derivative is infinite at x = 0: 0 there (Enzyme's sqrt)."""
    def rule(X, ops, y, dy):
        x = ops[0]
        return [lambda: X.select(X.fcmp("oeq", x, X.c(0)), X.c(0), X.scale(dy, derivative(X, x, y)))]
    return rule


def _zero(X, ops, y, dy):
    return [None] * len(ops)


def _select(X, ops, y, dy):
    # y = c ? a : b                    da = c ? dy : 0,  db = c ? 0 : dy;   dy = c ? da : db
    c = ops[0]
    return [None, lambda: X.select(c, dy, X.c(0)), lambda: X.select(c, X.c(0), dy)]


def _minmax(pred):
    # y = a if (a pred b) else b       the chosen operand receives dy
    def rule(X, ops, y, dy):
        a, b = ops
        return [lambda: X.select(X.fcmp(pred, a, b), dy, X.c(0)),
                lambda: X.select(X.fcmp(pred, a, b), X.c(0), dy)]
    return rule


def _pow(X, ops, y, dy):
    # y = a^b                          da = b a^(b-1) dy  (0 where b = 0),
    #                                  db = y ln(a) dy    (0 where a <= 0)
    a, b = ops
    return [lambda: X.select(X.fcmp("oeq", b, X.c(0)), X.c(0),
                             X.scale(dy, X.mul(b, X.call("pow", a, X.sub(b, X.c(1)))))),
            lambda: X.select(X.fcmp("ogt", a, X.c(0)), X.scale(dy, X.mul(y, X.call("log", a))), X.c(0))]


def _atan2(X, ops, y, dy):
    # y = atan2(a, b)                  da = b/(a²+b²) dy,  db = -a/(a²+b²) dy
    a, b = ops
    r2 = lambda: X.add(X.square(a), X.square(b))
    return [lambda: X.scale(dy, X.div(b, r2())), lambda: X.scale(dy, X.div(X.neg(a), r2()))]


def _hypot(X, ops, y, dy):
    # y = sqrt(a²+b²)                  da = a/y dy,  db = b/y dy  (0 where y = 0)
    a, b = ops
    at_zero = lambda: X.fcmp("oeq", y, X.c(0))
    return [lambda: X.select(at_zero(), X.c(0), X.scale(dy, X.div(a, y))),
            lambda: X.select(at_zero(), X.c(0), X.scale(dy, X.div(b, y)))]


def _copysign(X, ops, y, dy):
    # y = |a| sign(b)                  da = sign(a) sign(b) dy
    a, b = ops
    return [lambda: X.mul(dy, X.mul(X.call("copysign", X.c(1), a), X.call("copysign", X.c(1), b))), None]


def _frem(X, ops, y, dy):
    # y = a - trunc(a/b) b             da = dy,  db = -trunc(a/b) dy
    a, b = ops
    return [lambda: dy, lambda: X.neg(X.scale(dy, X.call("trunc", X.div(a, b))))]


def _fma(X, ops, y, dy):
    # y = a b + c                      da = b dy,  db = a dy,  dc = dy
    a, b, _ = ops
    return [lambda: X.scale(dy, b), lambda: X.scale(dy, a), lambda: dy]


def _powi(X, ops, y, dy):
    # y = x^n (integer n)              dx = n x^(n-1) dy
    x, n = ops

    def dx():
        nf = X.e(f"sitofp {n.type} {n} to {X.t}")
        n1 = X.e(f"sub {n.type} {n}, 1")
        X.e.declare(f"llvm.powi.{X.s}.{n.type}",
                    f"declare {X.t} @llvm.powi.{X.s}.{n.type}({X.t}, {n.type})")
        xn1 = X.e(f"call {X.t} @llvm.powi.{X.s}.{n.type}({X.t} {x}, {n.type} {n1})")
        return X.scale(dy, X.mul(nf, xn1))
    return [dx, None]


def _fdiv(X, ops, y, dy):
    # y = a / b                        da = dy / b,  db = -y dy / b
    a, b = ops
    return [lambda: X.unless_zero(dy, X.div(dy, b)),
            lambda: X.unless_zero(dy, X.neg(X.mul(X.div(dy, b), y)))]


class Lane(NamedTuple):
    """A contribution ``value`` to lane ``index`` (an IR operand text) of a vector's
    adjoint alone: added to that lane, not as a vector with zeros elsewhere (a vector
    whose lanes are all extracted then gets its adjoint built lane by lane)."""
    value: str
    index: str


def _extractelement(X, ops, y, dy):
    # y = v[i]                          dv[i] += dy;                        dy = dv[i]
    v, i = ops
    return [lambda: Lane(dy, f"{i.type} {i}"), None]


def _insertelement(X, ops, y, dy):
    # y = v with y[i] = s               dv = dy with lane i zeroed,  ds = dy[i];  dy = dv with dy[i] = ds
    v, s, i = ops
    return [lambda: X.e(f"insertelement {X.t} {dy}, {s.type} {float_const(s.type, 0)}, {i.type} {i}"),
            lambda: X.e(f"extractelement {X.t} {dy}, {i.type} {i}"), None]


def _shuffle(mask):
    # y[j] = concat(a, b)[mask[j]]      d concat(a, b)[mask[j]] += dy[j];   dy = the same shuffle of da, db
    def rule(X, ops, y, dy):
        a, b = ops

        def adjoint(which):
            lanes, elem = vector_shape(a.type)
            d = "zeroinitializer"
            for j, m in enumerate(mask):
                if m is None or (m < lanes) != (which == 0):
                    continue
                k = m - which * lanes
                v = X.e(f"extractelement {X.t} {dy}, i32 {j}")
                cur = X.e(f"extractelement {a.type} {d}, i32 {k}")
                d = X.e(f"insertelement {a.type} {d}, {elem} {X.e(f'fadd {elem} {cur}, {v}')}, i32 {k}")
            return d
        return [lambda: adjoint(0), lambda: adjoint(1)]
    return _linear(rule, lambda ins, t: f"shufflevector {ins.operands[0].type} {t[0]}, "
                                        f"{ins.operands[1].type} {t[1]}, {_MASK.search(ins.text).group(1)}")


def _reduce_fadd(X, ops, y, dy):
    # y = start + sum(v)                dstart = dy,  dv = (dy, ..., dy);   dy = dstart + sum(dv)
    start, v = ops
    lanes = vector_shape(v.type)[0]

    def splat():
        one = X.e(f"insertelement {v.type} poison, {X.t} {dy}, i32 0")
        return X.e(f"shufflevector {v.type} {one}, {v.type} poison, <{lanes} x i32> zeroinitializer")
    return [lambda: dy, splat]


_MASK = re.compile(r"(<\s*[0-9]+\s*x\s*i32\s*>\s*(?:zeroinitializer|<[^>]*>|undef|poison))\s*$")


def shuffle_mask(text):
    """The lanes of a shufflevector's constant mask (None for undef/poison lanes)."""
    m = re.search(r"<\s*([0-9]+)\s*x\s*i32\s*>\s*(zeroinitializer|<[^>]*>|undef|poison)\s*$", text)
    n, body = int(m.group(1)), m.group(2)
    if body == "zeroinitializer":
        return [0] * n
    if body in ("undef", "poison"):
        return [None] * n
    return [None if "undef" in e or "poison" in e else int(e.split()[-1])
            for e in body.strip("<>").split(",")]


def _cast(op):
    # y = (T) x                        dx = (S) dy;                         dy = (T) dx
    return _linear(lambda X, ops, y, dy: [lambda: X.cast(op, dy, ops[0].type)],
                   lambda ins, t: f"{ins.opcode} {ins.operands[0].type} {t[0]} to {ins.type}")


RULES = {
    # instructions; the linear ones with their tangent's text (t: the operands' tangents)
    "fadd": _linear(lambda X, ops, y, dy: [lambda: dy, lambda: dy],          # y = a + b
                    lambda ins, t: f"fadd {ins.type} {t[0]}, {t[1]}"),
    "fsub": _linear(lambda X, ops, y, dy: [lambda: dy, lambda: X.neg(dy)],   # y = a - b
                    lambda ins, t: f"fsub {ins.type} {t[0]}, {t[1]}"),
    "fmul": lambda X, ops, y, dy: [lambda: X.scale(dy, ops[1]),              # y = a b
                                   lambda: X.scale(dy, ops[0])],
    "fdiv": _fdiv,
    "frem": _frem,
    "fneg": _linear(lambda X, ops, y, dy: [lambda: X.neg(dy)],               # y = -a
                    lambda ins, t: f"fneg {ins.type} {t[0]}"),
    "freeze": _linear(lambda X, ops, y, dy: [lambda: dy],                    # y = a
                      lambda ins, t: f"freeze {ins.type} {t[0]}"),
    "fpext": _cast("fptrunc"),
    "fptrunc": _cast("fpext"),
    "select": _linear(_select, lambda ins, t: f"select {ins.operands[0].type} {ins.operands[0].ref}, "
                                              f"{ins.type} {t[1]}, {ins.type} {t[2]}"),
    "extractelement": _linear(_extractelement, lambda ins, t: f"extractelement {ins.operands[0].type} "
                                                              f"{t[0]}, {ins.operands[1].type} {ins.operands[1].ref}"),
    "insertelement": _linear(_insertelement, lambda ins, t: f"insertelement {ins.type} {t[0]}, "
                                                            f"{ins.operands[1].type} {t[1]}, "
                                                            f"{ins.operands[2].type} {ins.operands[2].ref}"),
    "reduce_fadd": _linear(_reduce_fadd, lambda ins, t: f"call {ins.type} @{ins.callee}({ins.operands[0].type} "
                                                        f"{t[0]}, {ins.operands[1].type} {t[1]})"),
    # math functions: (f(x))' as a function of x and y = f(x)
    "exp": _unary(lambda X, x, y: y),                                        # e^x
    "exp2": _unary(lambda X, x, y: X.mul(y, X.c(LN2))),                      # 2^x ln 2
    "expm1": _unary(lambda X, x, y: X.add(y, X.c(1))),                       # e^x
    "log": _unary(lambda X, x, y: X.div(X.c(1), x)),                         # 1/x
    "log2": _unary(lambda X, x, y: X.div(X.c(1 / LN2), x)),                  # 1/(x ln 2)
    "log10": _unary(lambda X, x, y: X.div(X.c(1 / LN10), x)),                # 1/(x ln 10)
    "log1p": _unary(lambda X, x, y: X.div(X.c(1), X.add(x, X.c(1)))),        # 1/(1+x)
    "sin": _unary(lambda X, x, y: X.call("cos", x)),                         # cos x
    "cos": _unary(lambda X, x, y: X.neg(X.call("sin", x))),                  # -sin x
    "tan": _unary(lambda X, x, y: X.add(X.c(1), X.square(y))),               # 1 + tan² x
    "asin": _unary(lambda X, x, y: X.div(X.c(1), X.call("sqrt", X.sub(X.c(1), X.square(x))))),
    "acos": _unary(lambda X, x, y: X.div(X.c(-1), X.call("sqrt", X.sub(X.c(1), X.square(x))))),
    "atan": _unary(lambda X, x, y: X.div(X.c(1), X.add(X.c(1), X.square(x)))),   # 1/(1+x²)
    "sinh": _unary(lambda X, x, y: X.call("cosh", x)),                       # cosh x
    "cosh": _unary(lambda X, x, y: X.call("sinh", x)),                       # sinh x
    "tanh": _unary(lambda X, x, y: X.sub(X.c(1), X.square(y))),              # 1 - tanh² x
    "asinh": _unary(lambda X, x, y: X.div(X.c(1), X.call("sqrt", X.add(X.square(x), X.c(1))))),
    "acosh": _unary(lambda X, x, y: X.div(X.c(1), X.call("sqrt", X.sub(X.square(x), X.c(1))))),
    "atanh": _unary(lambda X, x, y: X.div(X.c(1), X.sub(X.c(1), X.square(x)))),
    "sqrt": _zero_at_zero(lambda X, x, y: X.div(X.c(0.5), y)),               # 1/(2 sqrt x)
    "cbrt": _zero_at_zero(lambda X, x, y: X.div(y, X.mul(X.c(3), x))),       # x^(1/3)/(3x)
    "fabs": _unary(lambda X, x, y: X.call("copysign", X.c(1), x)),           # sign x
    "erf": _unary(lambda X, x, y: X.mul(X.c(TWO_OVER_SQRT_PI), X.call("exp", X.neg(X.square(x))))),
    "erfc": _unary(lambda X, x, y: X.mul(X.c(-TWO_OVER_SQRT_PI), X.call("exp", X.neg(X.square(x))))),
    "pow": _pow,
    "atan2": _atan2,
    "hypot": _hypot,
    "copysign": _copysign,
    "fmod": _frem,
    "fma": _fma,
    "fmuladd": _fma,
    "powi": _powi,
    "minnum": _minmax("ole"), "minimum": _minmax("ole"), "fmin": _minmax("ole"),
    "maxnum": _minmax("oge"), "maximum": _minmax("oge"), "fmax": _minmax("oge"),
    # piecewise constant: zero derivative
    "floor": _zero, "ceil": _zero, "trunc": _zero, "round": _zero, "rint": _zero,
    "nearbyint": _zero, "roundeven": _zero,
}

# calls that neither read nor write memory the differentiator cares about
INACTIVE_CALLS = re.compile(r"^llvm\.(assume|expect|lifetime|dbg|experimental\.noalias|invariant|"
                            r"prefetch|sideeffect|donothing|is\.fpclass|ctpop|ctlz|cttz|abs|stacksave|stackrestore|"
                            r"smax|smin|umax|umin|sadd|ssub|smul|uadd|usub|umul|bswap|fshl|fshr)")

_INTRINSIC = re.compile(r"^llvm\.([a-z0-9]+)\.")
# compiler-runtime functions that are math functions under another name
ALIASES = {"__powidf2": "powi", "__powisf2": "powi"}


def math_name(callee):
    """The plain name of a math callee (``llvm.sin.f64``, ``sinf`` -> ``sin``), or None."""
    if not callee:
        return None
    if callee.startswith("llvm.vector.reduce.fadd."):
        return "reduce_fadd"
    m = _INTRINSIC.match(callee)
    if m:
        return m.group(1) if m.group(1) in RULES else None
    if callee in RULES:
        return callee
    if callee in ALIASES:
        return ALIASES[callee]
    if callee.endswith("f") and callee[:-1] in RULES:
        return callee[:-1]
    return None


def is_differentiable_call(instr):
    return math_name(instr.callee) is not None


def is_pure_call(instr):
    """True for calls that touch no memory: math functions and harmless intrinsics."""
    return math_name(instr.callee) is not None or bool(INACTIVE_CALLS.match(instr.callee or ""))


def rule_for(instr):
    if instr.opcode == "call":
        return RULES[math_name(instr.callee)]
    if instr.opcode == "shufflevector":
        return _shuffle(shuffle_mask(instr.text))
    return RULES[instr.opcode]


# Math functions whose derivative is another math call of the same cost: the forward pass
# may compute it next to the call (vectorised with it) and keep it for the reverse pass
# (:mod:`adcore.plan.kept_derivatives`): (that call, f'(x) from its value d)
DERIVATIVE_CALLS = {
    "sin": ("cos", lambda X, d: d),                                          # cos x
    "cos": ("sin", lambda X, d: X.neg(d)),                                   # -sin x
}


def contributions(instr, X, wrap, dy, active, derivative=None):
    """``(operand definition, adjoint contribution)`` from ``instr``'s rule for each of its
    operands in ``active``; the rule sees ``wrap(op)`` for each operand and for the result
    (the reverse pass wraps them to materialise on use, :mod:`adcore.plan.cache_cut` to note the
    reads of a dry run).  ``derivative``: the instruction computing the call of
    ``DERIVATIVE_CALLS`` that gives ``instr``'s derivative, kept by the forward pass."""
    if derivative is not None:
        x = instr.operands[0]
        if x.defn in active:
            d = wrap(Operand(derivative.ref, derivative.type, derivative))
            yield x.defn, X.scale(dy, DERIVATIVE_CALLS[math_name(instr.callee)][1](X, d))
        return
    ops = [wrap(o) for o in instr.operands]
    result = wrap(Operand(instr.ref, instr.type, instr))
    for o, thunk in zip(instr.operands, rule_for(instr)(X, ops, result, dy)):
        if thunk is not None and o.defn in active:
            yield o.defn, thunk()


class _AtOne(Expr):
    """:class:`Expr` for rules evaluated at ``dy = 1`` (their partial derivatives): ``1·d``
    is ``d`` itself and ``unless_zero(1, d)`` is ``d``, so that a partial that is an operand
    stays that operand (a finite constant one then needs no zero test in ``scale``)."""

    def mul(self, a, b):
        one = self.c(1)
        return b if str(a) == one else a if str(b) == one else super().mul(a, b)

    def unless_zero(self, dy, value):
        return value if str(dy) == self.c(1) else super().unless_zero(dy, value)


class _Known:
    """A primal value as the rules see it in forward mode (already computed)."""

    def __init__(self, op):
        self.op, self.type = op, op.type

    def __str__(self):
        return self.op.ref


def tangent_rule(instr):
    """``tangent(X, instr, tangents)``: the IR value of ``instr``'s tangent, given each
    operand's tangent (``None`` where it has none); see the module docstring."""
    adjoint = rule_for(instr)
    if hasattr(adjoint, "tangent"):
        def linear(X, ins, tangents):
            zeros = [t if t is not None or not is_float_type(o.type) else float_const(o.type, 0)
                     for o, t in zip(ins.operands, tangents)]
            return X.e(adjoint.tangent(ins, zeros), "dt")
        return linear

    def chain(X, ins, tangents):
        at_one = _AtOne(X.e, X.t)
        partials = adjoint(at_one, [_Known(o) for o in ins.operands], _Known(Operand(ins.ref, ins.type, ins)),
                           at_one.c(1))
        total = None
        for t, partial in zip(tangents, partials):
            if t is None or partial is None:
                continue
            term = X.scale(t, partial())
            total = term if total is None else X.add(total, term)
        return X.c(0) if total is None else total
    return chain
