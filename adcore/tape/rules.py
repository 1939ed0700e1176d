"""The rule table: for every op, its forward computation and its vector-Jacobian product.

``RULES[name]`` is a ``Rule(name, forward, vjp, view, complex_ok, scalar)``.  ``forward(*args, **attrs)``
computes the primal on plain numpy values; ``vjp(g, rec)`` receives the output
cotangent ``g`` and the ``Record`` (operands ``rec.args``, output ``rec.value``,
``rec.attrs``) and returns one cotangent per operand (``None`` allowed for
constants).  Cotangents may have the broadcast shape; the tape sums them back to
the operand's shape and casts them to its dtype.  ``view`` marks ops whose numpy
result may share memory with the operand (in-place updates are refused there).

This table is also the one place that knows an elementwise op: a rule whose ``forward``
is a numpy ufunc serves that ufunc on tracked values (``numpy_api``), and its ``scalar``
is the op on one element, for programs generated from a recording (the compiled path
of ``layers``): a Python expression with ``{0}``, ``{1}``... for the operands, or a
tuple of statement lines assigning ``{out}`` (choices are if/else statements, not a
select expression, so each branch is stored as computed), or a function of the
``Record`` returning either.  Templates may call ``math`` and the helpers
``S.<name>`` of ``scalars``.  So adding an elementwise op to both engines is one entry::

    @rule("tanh", np.tanh, complex_ok=True, scalar="math.tanh({0})")
    def _tanh(g, r):
        "out = tanh x:  dx = g (1 - out**2)."
        return (g * (1 - r.value * r.value),)

Complex values follow autograd's and JAX's convention: the cotangent of a complex
``z = x + iy`` is ``dL/dx - i dL/dy`` (for a real loss ``L``), so a holomorphic op's
VJP is the real formula ``g f'(z)`` (transposes, never conjugates), and a real
operand of a complex op gets the real part (done by the tape).  ``complex_ok``
marks the rules whose formula is right for complex values; any other rule with a
complex result raises ``UnsupportedError``.

Singular points: a formula that would give ``0 * inf = nan`` where the function is
finite uses JAX's convention instead (``d(a**0)/da = 0``; the derivative of a norm,
``abs``, ``hypot``, ``arctan2`` or ``angle`` at 0 is 0, the minimum-norm subgradient).
Where the derivative itself is infinite (``sqrt`` or ``log`` at 0) it stays ``inf``,
and a zero cotangent times it gives ``nan`` as in JAX (mask the input, not only the output).

``cotangents`` tells the tape what a VJP returns, so that it can add into the arrays in
place and return a leaf's adjoint without copying it: ``"new"``, arrays no one else holds
(products, sums); ``"of g"``, ``g`` itself or a view of it (a reshape, a transpose), private
when ``g`` was; ``None`` (the default), anything (``g`` shared between operands, views of
the operands, read-only views).

Rules on more topics live in ``rules_complex``, ``rules_scan`` and ``rules_linalg``, which
register theirs in ``RULES`` when the package (``adcore.tape``) imports them.
"""
import math

import numpy as np

from .recording import unbroadcast
from .sums import ones, row_sums


class Rule:
    __slots__ = ("name", "forward", "vjp", "view", "complex_ok", "scalar", "cotangents")

    def __init__(self, name, forward, vjp, view, complex_ok=False, scalar=None, cotangents=None):
        self.name = name
        self.forward = forward
        self.vjp = vjp
        self.view = view
        self.complex_ok = complex_ok
        self.scalar = scalar
        self.cotangents = cotangents


RULES = {}


def rule(name, forward, view=False, complex_ok=False, scalar=None, cotangents=None):
    """Register the decorated function as the VJP of op ``name``."""
    def register(vjp):
        RULES[name] = Rule(name, forward, vjp, view, complex_ok, scalar, cotangents)
        return vjp
    return register


def choose(cond, then, other):
    """The ``scalar`` statements ``{out} = then if cond else other``."""
    return (f"if {cond}:", f"    {{out}} = {then}", "else:", f"    {{out}} = {other}")


def _expand(g, axis, keepdims, ndim):
    """Re-insert the reduced axes into a reduction's cotangent so it broadcasts."""
    if keepdims or axis is None:
        return g
    axes = (axis,) if np.isscalar(axis) else tuple(axis)
    return np.expand_dims(g, tuple(a % ndim for a in axes))


SMALL = 4096  # entries: a full reduction's cotangent this small is written out


def spread(g, shape):
    """``np.broadcast_to(g, shape)`` (read-only); one value is laid out with zero strides
    directly (the full reductions' cotangent, without broadcast_to's Python layers), or,
    up to ``SMALL`` entries, written out: as fast to make, and the VJPs' ufuncs run
    their contiguous loops on it (a product with a zero-stride operand takes twice as long)."""
    if type(g) is not np.ndarray or g.ndim == 0:
        g = np.asarray(g)
        if math.prod(shape) <= SMALL:
            out = np.empty(shape, g.dtype)
            out.fill(g)
            return out
        out = np.ndarray(shape, g.dtype, g, 0, (0,) * len(shape))
        out.flags.writeable = False
        return out
    return np.broadcast_to(g, shape)


def _log_base(x):
    """log(x), taken as 0 where x = 0 and, for real x, where x < 0 (the exponent's partial of x**p)."""
    if isinstance(x, (int, float)):
        return math.log(x) if x > 0 else 0.0  # a Python number keeps float32 cotangents float32
    if isinstance(x, complex) or np.iscomplexobj(x):
        return np.log(np.where(x == 0, 1, x))
    return np.log(np.where(x > 0, x, 1))


def _exponent_less_one(b):
    """b - 1, replaced by 1 where b = 0 so that b * a**(b-1) is 0 there, also at a = 0."""
    if isinstance(b, (int, float, complex)):
        return b - 1 if b != 0 else 1
    return np.where(b == 0, 1, b - 1)


def _nonzero(x):
    """x with zeros replaced by ones: a safe denominator where the numerator is 0 too."""
    return np.where(x == 0, 1, x)


# ---------------------------------------------------------------- arithmetic

@rule("add", np.add, complex_ok=True, scalar="({0} + {1})")
def _add(g, r):
    """out = a + b:  da = g,  db = g."""
    return g, g


@rule("subtract", np.subtract, complex_ok=True, scalar="({0} - {1})")
def _subtract(g, r):
    """out = a - b:  da = g,  db = -g."""
    return g, (-g if r.inputs[1] is not None else None)


@rule("multiply", np.multiply, complex_ok=True, scalar="({0} * {1})")
def _multiply(g, r):
    """out = a * b:  da = g * b,  db = g * a."""
    a, b = r.args
    return (g * b if r.inputs[0] is not None else None,
            g * a if r.inputs[1] is not None else None)


@rule("divide", np.divide, complex_ok=True, scalar="({0} / {1})")
def _divide(g, r):
    """out = a / b:  da = g / b,  db = -g * a / b**2 = -g * out / b."""
    a, b = r.args
    ga = g / b
    return ga, (-ga * r.value if r.inputs[1] is not None else None)


def _power(g, r):
    """out = a ** b:  da = g b a**(b-1) (0 where b = 0),  db = g out log a (0 where a = 0, or real a < 0)."""
    a, b = r.args
    if r.inputs[1] is None and type(b) is int and b == 2:  # the common square: no power call
        twice = a + a
        if type(twice) is np.ndarray and type(g) is np.ndarray and twice.shape == g.shape \
                and g.dtype == twice.dtype:
            twice *= g                     # g (a + a), in the temporary
            return twice, None
        return g * twice, None
    ga = g * b * a ** _exponent_less_one(b) if r.inputs[0] is not None else None
    gb = g * r.value * _log_base(a) if r.inputs[1] is not None else None
    return ga, gb


def power_scalar(r):
    """``a ** b``; a constant exponent 0..4 as products, 0.5 as ``sqrt``."""
    b = r.args[1]
    if r.inputs[1] is None and isinstance(b, (int, float, np.integer, np.floating)):
        if float(b).is_integer() and 0 <= b <= 4:
            return "1.0" if b == 0 else "(" + " * ".join(["{0}"] * int(b)) + ")"
        if b == 0.5:
            return "math.sqrt({0})"
    return "({0} ** {1})"


rule("power", np.power, complex_ok=True, scalar=power_scalar)(_power)
rule("float_power", np.float_power, complex_ok=True)(_power)


def power_operator(a, b):
    """``a ** b`` as numpy's operator computes it: ``np.square`` for the exponent 2 of a real
    array (the same values as ``np.power``, which converts the 2 on every call: half the time)."""
    if type(b) is int and b == 2 and type(a) is np.ndarray and a.dtype.kind == "f":
        return np.square(a)
    return np.power(a, b)




@rule("negative", np.negative, complex_ok=True, scalar="-{0}")
def _negative(g, r):
    """out = -x:  dx = -g."""
    return (-g,)


@rule("positive", np.positive, complex_ok=True, scalar="{0}")
def _positive(g, r):
    """out = +x:  dx = g."""
    return (g,)


@rule("maximum", np.maximum, complex_ok=True, scalar=choose("{0} >= {1}", "{0}", "{1}"))
def _maximum(g, r):
    """out = max(a, b):  da = g [a >= b],  db = g [a < b]  (complex: numpy's order, by real
    part then imaginary part; out is a or b, so the cotangent goes to the one chosen; equal
    real parts with different imaginary parts are a jump: ``UnsupportedError``)."""
    a, b = r.args
    pick_a = np.greater_equal(a, b)
    if np.iscomplexobj(a) or np.iscomplexobj(b):
        _refuse_complex_jump(np.real(a) == np.real(b), a == b, "maximum")
    return np.where(pick_a, g, 0), np.where(pick_a, 0, g)


@rule("minimum", np.minimum, complex_ok=True, scalar=choose("{0} <= {1}", "{0}", "{1}"))
def _minimum(g, r):
    """out = min(a, b):  da = g [a <= b],  db = g [a > b]  (complex: numpy's order, as maximum)."""
    a, b = r.args
    pick_a = np.less_equal(a, b)
    if np.iscomplexobj(a) or np.iscomplexobj(b):
        _refuse_complex_jump(np.real(a) == np.real(b), a == b, "minimum")
    return np.where(pick_a, g, 0), np.where(pick_a, 0, g)


@rule("logaddexp", np.logaddexp, scalar="S.logaddexp({0}, {1})")
def _logaddexp(g, r):
    """out = log(e**a + e**b):  da = g e**(a - out),  db = g e**(b - out)."""
    a, b = r.args
    return g * np.exp(a - r.value), g * np.exp(b - r.value)


# ---------------------------------------------------------------- elementwise functions

@rule("exp", np.exp, complex_ok=True, scalar="math.exp({0})")
def _exp(g, r):
    """out = e**x:  dx = g out."""
    return (g * r.value,)


@rule("expm1", np.expm1, complex_ok=True, scalar="math.expm1({0})")
def _expm1(g, r):
    """out = e**x - 1:  dx = g (out + 1)."""
    return (g * (r.value + 1),)


@rule("exp2", np.exp2, complex_ok=True, scalar="math.exp({0} * 0.6931471805599453)")
def _exp2(g, r):
    """out = 2**x:  dx = g out ln 2."""
    return (g * r.value * math.log(2.0),)


@rule("log", np.log, complex_ok=True, scalar="math.log({0})")
def _log(g, r):
    """out = log x:  dx = g / x."""
    return (g / r.args[0],)


@rule("log1p", np.log1p, complex_ok=True, scalar="math.log1p({0})")
def _log1p(g, r):
    """out = log(1 + x):  dx = g / (1 + x)."""
    return (g / (1 + r.args[0]),)


@rule("log2", np.log2, complex_ok=True, scalar="(math.log({0}) / 0.6931471805599453)")
def _log2(g, r):
    """out = log2 x:  dx = g / (x ln 2)."""
    return (g / (r.args[0] * math.log(2.0)),)


@rule("log10", np.log10, complex_ok=True, scalar="(math.log({0}) / 2.302585092994046)")
def _log10(g, r):
    """out = log10 x:  dx = g / (x ln 10)."""
    return (g / (r.args[0] * math.log(10.0)),)


@rule("sqrt", np.sqrt, complex_ok=True, scalar="math.sqrt({0})")
def _sqrt(g, r):
    """out = sqrt x:  dx = g / (2 out)."""
    return (g / (2 * r.value),)


@rule("square", np.square, complex_ok=True, scalar="({0} * {0})")
def _square(g, r):
    """out = x**2:  dx = 2 g x."""
    return (2 * g * r.args[0],)


@rule("reciprocal", np.reciprocal, complex_ok=True, scalar="(1.0 / {0})")
def _reciprocal(g, r):
    """out = 1 / x:  dx = -g out**2."""
    return (-g * r.value * r.value,)


@rule("absolute", np.absolute, complex_ok=True, scalar="abs({0})")
def _absolute(g, r):
    """out = |x|:  dx = g sign(x) for real x;  dz = g conj(z) / |z| for complex z (0 at z = 0)."""
    x = r.args[0]
    if x.dtype.kind == "c":
        return (g * np.conj(x) / _nonzero(r.value),)
    return (g * np.sign(x),)


@rule("sin", np.sin, complex_ok=True, scalar="math.sin({0})")
def _sin(g, r):
    """out = sin x:  dx = g cos x."""
    return (g * np.cos(r.args[0]),)


@rule("cos", np.cos, complex_ok=True, scalar="math.cos({0})")
def _cos(g, r):
    """out = cos x:  dx = -g sin x."""
    return (-g * np.sin(r.args[0]),)


@rule("tan", np.tan, complex_ok=True, scalar="math.tan({0})")
def _tan(g, r):
    """out = tan x:  dx = g (1 + out**2)."""
    return (g * (1 + r.value * r.value),)


@rule("arctan", np.arctan, complex_ok=True, scalar="math.atan({0})")
def _arctan(g, r):
    """out = atan x:  dx = g / (1 + x**2)."""
    x = r.args[0]
    return (g / (1 + x * x),)


@rule("sinh", np.sinh, complex_ok=True, scalar="math.sinh({0})")
def _sinh(g, r):
    """out = sinh x:  dx = g cosh x."""
    return (g * np.cosh(r.args[0]),)


@rule("cosh", np.cosh, complex_ok=True, scalar="math.cosh({0})")
def _cosh(g, r):
    """out = cosh x:  dx = g sinh x."""
    return (g * np.sinh(r.args[0]),)


@rule("tanh", np.tanh, complex_ok=True, scalar="math.tanh({0})")
def _tanh(g, r):
    """out = tanh x:  dx = g (1 - out**2)."""
    return (g * (1 - r.value * r.value),)


@rule("arcsin", np.arcsin, complex_ok=True)
def _arcsin(g, r):
    """out = asin x:  dx = g / sqrt(1 - x**2)."""
    x = r.args[0]
    return (g / np.sqrt(1 - x * x),)


@rule("arccos", np.arccos, complex_ok=True)
def _arccos(g, r):
    """out = acos x:  dx = -g / sqrt(1 - x**2)."""
    x = r.args[0]
    return (-g / np.sqrt(1 - x * x),)


@rule("arcsinh", np.arcsinh, complex_ok=True)
def _arcsinh(g, r):
    """out = asinh x:  dx = g / sqrt(x**2 + 1)."""
    x = r.args[0]
    return (g / np.sqrt(x * x + 1),)


@rule("arccosh", np.arccosh, complex_ok=True)
def _arccosh(g, r):
    """out = acosh x:  dx = g / (sqrt(x - 1) sqrt(x + 1))."""
    x = r.args[0]
    return (g / (np.sqrt(x - 1) * np.sqrt(x + 1)),)


@rule("arctanh", np.arctanh, complex_ok=True)
def _arctanh(g, r):
    """out = atanh x:  dx = g / (1 - x**2)."""
    x = r.args[0]
    return (g / (1 - x * x),)


@rule("arctan2", np.arctan2)
def _arctan2(g, r):
    """out = atan2(y, x):  dy = g x / (x**2 + y**2),  dx = -g y / (x**2 + y**2)  (0 at x = y = 0)."""
    y, x = r.args
    d = _nonzero(x * x + y * y)
    return g * x / d, -g * y / d


@rule("hypot", np.hypot)
def _hypot(g, r):
    """out = sqrt(a**2 + b**2):  da = g a / out,  db = g b / out  (0 at a = b = 0)."""
    a, b = r.args
    d = _nonzero(r.value)
    return g * a / d, g * b / d


@rule("deg2rad", np.deg2rad)
def _deg2rad(g, r):
    """out = x pi / 180:  dx = g pi / 180."""
    return (g * (math.pi / 180),)


@rule("rad2deg", np.rad2deg)
def _rad2deg(g, r):
    """out = x 180 / pi:  dx = g 180 / pi."""
    return (g * (180 / math.pi),)


@rule("remainder", np.remainder)
def _remainder(g, r):
    """out = a - floor(a / b) b:  da = g,  db = -g floor(a / b)  (jumps where a / b is an integer)."""
    a, b = r.args
    return g, (-g * np.floor_divide(a, b) if r.inputs[1] is not None else None)


@rule("fmod", np.fmod)
def _fmod(g, r):
    """out = a - trunc(a / b) b:  da = g,  db = -g trunc(a / b)  (jumps where a / b is an integer)."""
    a, b = r.args
    return g, (-g * np.rint((a - r.value) / b) if r.inputs[1] is not None else None)


@rule("fmax", np.fmax)
def _fmax(g, r):
    """out = fmax(a, b) (NaN ignored):  da = g [a >= b or b is NaN],  db = g otherwise."""
    a, b = r.args
    pick_a = np.greater_equal(a, b) | np.isnan(b)
    return np.where(pick_a, g, 0), np.where(pick_a, 0, g)


@rule("fmin", np.fmin)
def _fmin(g, r):
    """out = fmin(a, b) (NaN ignored):  da = g [a <= b or b is NaN],  db = g otherwise."""
    a, b = r.args
    pick_a = np.less_equal(a, b) | np.isnan(b)
    return np.where(pick_a, g, 0), np.where(pick_a, 0, g)


@rule("logaddexp2", np.logaddexp2)
def _logaddexp2(g, r):
    """out = log2(2**a + 2**b):  da = g 2**(a - out),  db = g 2**(b - out)."""
    a, b = r.args
    return g * np.exp2(a - r.value), g * np.exp2(b - r.value)


@rule("cbrt", np.cbrt)
def _cbrt(g, r):
    """out = x**(1/3):  dx = g / (3 out**2)."""
    return (g / (3 * r.value * r.value),)


@rule("sinc", np.sinc)
def _sinc(g, r):
    """out = sin(pi x) / (pi x):  dx = g (cos(pi x) - out) / x  (0 at x = 0)."""
    x = r.args[0]
    return (g * (np.cos(np.pi * x) - r.value) / _nonzero(x),)


def nan_to_num_forward(x, nan=0.0, posinf=None, neginf=None):
    return np.nan_to_num(x, nan=nan, posinf=posinf, neginf=neginf)


@rule("nan_to_num", nan_to_num_forward)
def _nan_to_num(g, r):
    """out = x where finite, else a constant:  dx = g [x finite]."""
    return (np.where(np.isfinite(r.args[0]), g, 0),)


# ---------------------------------------------------------------- activations (stable)

def sigmoid_forward(x):
    """1 / (1 + e**-x), evaluated without overflow for either sign of x.

    A real array whose entries are all above ``-SAFE_EXP`` (so e**-x is finite and the
    result a normal number) takes that formula in place, four passes; otherwise (and with
    NaN) ``where(x >= 0, 1, e) / (1 + e)`` with ``e = e**-|x|``, which cannot overflow."""
    if type(x) is not np.ndarray:  # np.asarray is a Python wrapper while recording (builders)
        x = np.asarray(x)
    if x.ndim == 0 or x.dtype.kind != "f":
        e = np.exp(-np.abs(x))
        return np.where(x >= 0, 1, e) / (1 + e)
    if x.size and np.minimum.reduce(x, axis=None) > -SAFE_EXP.get(x.dtype.type, 0.0):
        e = np.negative(x)
        np.exp(e, out=e)
        np.add(e, ones((), e.dtype), out=e)
        return np.reciprocal(e, out=e)
    e = np.abs(x)                      # e = e**-|x|, in place
    np.negative(e, out=e)
    np.exp(e, out=e)
    out = np.where(x >= 0, 1, e)
    e += 1
    out /= e
    return out


# -log of the smallest normal number: for x above minus this, 1 / (1 + e**-x) is normal
SAFE_EXP = {t: -float(np.log(np.finfo(t).tiny)) for t in (np.float16, np.float32, np.float64)}


def softplus_forward(x):
    """log(1 + e**x) = max(x, 0) + log1p(e**-|x|)."""
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


def logsumexp_forward(x, axis=None, keepdims=False):
    """log(sum(e**x)) along ``axis``, shifted by the maximum so it cannot overflow."""
    x = np.asarray(x)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


def softmax_forward(x, axis=-1):
    """e**x / sum(e**x) along ``axis``, shifted by the maximum."""
    if type(x) is not np.ndarray:  # np.asarray is a Python wrapper while recording (builders)
        x = np.asarray(x)
    if x.ndim == 0 or x.dtype.kind not in "fc":
        e = np.exp(x - np.max(x, axis=axis, keepdims=True))
        return e / np.sum(e, axis=axis, keepdims=True)
    e = x - along(np.maximum, x, axis)
    np.exp(e, out=e)
    e /= along(np.add, e, axis)
    return e


def along(ufunc, x, axis):
    """``ufunc.reduce(x, axis, keepdims=True)`` for ``np.maximum`` or ``np.add``.  Short
    rows (the last axis of a 2-D real array) are reduced through a transposed copy: numpy
    runs its inner loop once per row along a contiguous axis, once per column along the
    first (3x faster at 128 rows of 10); float32 and float64 sums are a BLAS product
    (``sums.row_sums``, 2x faster again).  A maximum gives the same values; a sum adds
    the row's entries in another order (numpy pairs them), to rounding."""
    if x.ndim == 2 and (axis == 1 or axis == -1) and x.dtype.kind == "f" and x.shape[1] <= 64 \
            and x.shape[0] >= 16:
        if ufunc is np.add and type(x) is np.ndarray and x.dtype.char in "fd":
            return row_sums(x)
        return ufunc.reduce(x.T.copy(), axis=0)[:, None]
    return ufunc.reduce(x, axis=axis, keepdims=True)


def logsoftmax_forward(x, axis=-1):
    """x - logsumexp(x) along ``axis``."""
    return x - logsumexp_forward(x, axis=axis, keepdims=True)


def relu_forward(x):
    """max(x, 0)."""
    return np.maximum(x, 0)


@rule("sigmoid", sigmoid_forward, scalar="S.sigmoid({0})")
def _sigmoid(g, r):
    """out = 1 / (1 + e**-x):  dx = g out (1 - out)."""
    s = r.value
    gs = g * s
    if type(gs) is np.ndarray and gs.ndim:
        gs *= np.subtract(ones((), s.dtype), s)   # the same products, one temporary fewer
        return (gs,)
    return (gs * (1 - s),)


@rule("softplus", softplus_forward, scalar="S.softplus({0})")
def _softplus(g, r):
    """out = log(1 + e**x):  dx = g sigmoid(x)."""
    return (g * sigmoid_forward(r.args[0]),)


@rule("relu", relu_forward, scalar=choose("{0} > 0", "{0}", "0.0"))
def _relu(g, r):
    """out = max(x, 0):  dx = g [x > 0]."""
    return (np.where(r.args[0] > 0, g, 0),)


@rule("logsumexp", logsumexp_forward)
def _logsumexp(g, r):
    """out = log sum_i e**x_i:  dx_i = g e**(x_i - out)."""
    x = r.args[0]
    axis, keepdims = r.attrs.get("axis"), r.attrs.get("keepdims", False)
    out = _expand(r.value, axis, keepdims, x.ndim)
    return (_expand(g, axis, keepdims, x.ndim) * np.exp(x - out),)


@rule("softmax", softmax_forward)
def _softmax(g, r):
    """s = softmax(x):  dx = s (g - sum(g s))  (sums along the softmax axis)."""
    s = r.value
    axis = r.attrs.get("axis", -1)
    gs = g * s
    if type(gs) is not np.ndarray or gs.ndim == 0:
        return (s * (g - np.sum(gs, axis=axis, keepdims=True)),)
    gs -= s * along(np.add, gs, axis)  # = s (g - sum(g s))
    return (gs,)


@rule("logsoftmax", logsoftmax_forward)
def _logsoftmax(g, r):
    """out = x - logsumexp(x):  dx = g - e**out sum(g)  (sums along the axis)."""
    axis = r.attrs.get("axis", -1)
    return (g - np.exp(r.value) * np.sum(g, axis=axis, keepdims=True),)


# ---------------------------------------------------------------- reductions

def sum_forward(x, axis=None, keepdims=False):
    """``np.sum``: the ufunc reduction it calls, without its Python dispatch."""
    return np.add.reduce(x, axis=axis, keepdims=keepdims)


@rule("sum", sum_forward, complex_ok=True)
def _sum(g, r):
    """out = sum x (over axis):  dx = g broadcast back over the summed axes."""
    x = r.args[0]
    a = r.attrs
    return (spread(_expand(g, a.get("axis"), a.get("keepdims", False), x.ndim), x.shape),)


@rule("mean", np.mean, complex_ok=True)
def _mean(g, r):
    """out = sum x / n (over axis):  dx = g / n broadcast back, n = x.size / out.size."""
    x = r.args[0]
    a = r.attrs
    n = x.size // max(np.size(r.value), 1)
    g = _expand(g, a.get("axis"), a.get("keepdims", False), x.ndim) / n
    return (spread(g, x.shape),)


def _refuse_complex_jump(same_real, same, what):
    """numpy orders complex numbers by real part, then imaginary part: where two candidates
    have equal real parts and different imaginary parts the choice jumps with the real part
    (a discontinuity, not a kink), so there is no derivative."""
    if np.any(same_real & ~same):
        from ..errors import UnsupportedError
        raise UnsupportedError(f"numpy.{what} of complex values at a tie of their real parts",
                               detail="numpy orders complex numbers by real part first, so the result "
                                      "jumps there and has no derivative")


def _extremum_vjp(g, r):
    """out = max x (or min x):  dx = g [x == out] / (number of ties).  Complex x: numpy orders
    by real part, then imaginary part; out is then one of the z (a selection), dz = g there
    (a tie of real parts with different imaginary parts is a jump: ``UnsupportedError``)."""
    x = r.args[0]
    axis, keepdims = r.attrs.get("axis"), r.attrs.get("keepdims", False)
    out = _expand(r.value, axis, keepdims, x.ndim)
    hit = x == out
    if x.dtype.kind == "c":
        _refuse_complex_jump(np.real(x) == np.real(out), hit, "max or min")
    hit = hit.astype(x.dtype)
    share = hit / np.sum(hit, axis=axis, keepdims=True)
    return (_expand(g, axis, keepdims, x.ndim) * share,)


rule("max", np.max, complex_ok=True)(_extremum_vjp)
rule("min", np.min, complex_ok=True)(_extremum_vjp)


# ---------------------------------------------------------------- linear algebra

def _matmul_vjp(g, r):
    """out = a @ b:  da = g @ b^T,  db = a^T @ g  (1-D operands promoted, batch dims summed)."""
    a, b = r.args
    if a.ndim <= 2 and b.ndim <= 2 and a.ndim and b.ndim:  # no batch axes: the same formula, fewer calls
        ta, tb = r.inputs[0] is not None, r.inputs[1] is not None
        if a.ndim == 1:
            if b.ndim == 1:                           # a . b
                return (g * b if ta else None), (g * a if tb else None)
            return (b @ g if ta else None), (a[:, None] * g[None, :] if tb else None)
        if b.ndim == 1:                               # (m, k) @ (k,)
            return (g[:, None] * b[None, :] if ta else None), (g @ a if tb else None)
        if not tb:
            return _dot(g, b.T), None
        # db = a^T g, computed as (g^T a)^T when b is a transposed view (x @ W.T): the
        # cotangent then has b's layout, and W's adjoint (through the transpose) is row-major
        flags = b.flags
        gb = _dot(g.T, a).T if flags.f_contiguous and not flags.c_contiguous else _dot(a.T, g)
        return (_dot(g, b.T) if ta else None), gb
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    g2 = g
    if a.ndim == 1:
        g2 = np.expand_dims(g2, -2 if b.ndim > 1 else -1)
    if b.ndim == 1:
        g2 = np.expand_dims(g2, -1)
    ga = gb = None
    if r.inputs[0] is not None:
        ga = g2 @ np.swapaxes(b2, -1, -2)
        ga = unbroadcast(ga, a2.shape).reshape(a.shape)
    if r.inputs[1] is not None:
        gb = np.swapaxes(a2, -1, -2) @ g2
        gb = unbroadcast(gb, b2.shape).reshape(b.shape)
    return ga, gb


rule("matmul", np.matmul, complex_ok=True, cotangents="new")(_matmul_vjp)

# the product of two matrices: ndarray.dot calls the same BLAS routine as np.matmul without
# the ufunc's dispatch (0.5 µs less a call); ndarrays only
_dot = np.ndarray.dot


def matmul_operator(a, b):
    """``a @ b``; two matrices (ndarrays) through ``_dot``."""
    if type(a) is np.ndarray and type(b) is np.ndarray and a.ndim == 2 and b.ndim == 2:
        return _dot(a, b)
    return np.matmul(a, b)


OPERATORS = {"power": power_operator, "matmul": matmul_operator}  # an operator's forward where it is not the rule's


# ---------------------------------------------------------------- shape and copies

def reshape_forward(x, shape):
    return x.reshape(shape) if type(x) is np.ndarray else np.reshape(x, shape)


def transpose_forward(x, axes=None):
    return x.transpose(axes) if type(x) is np.ndarray else np.transpose(x, axes)


@rule("reshape", reshape_forward, view=True, complex_ok=True, cotangents="of g")
def _reshape(g, r):
    """out = x reshaped:  dx = g reshaped back to x.shape."""
    return (g.reshape(r.args[0].shape) if type(g) is np.ndarray else np.reshape(g, np.shape(r.args[0])),)


@rule("transpose", transpose_forward, view=True, complex_ok=True, cotangents="of g")
def _transpose(g, r):
    """out = x with axes permuted by p:  dx = g permuted by the inverse of p."""
    axes = r.attrs.get("axes")
    if axes is None:
        return (np.transpose(g),)
    inverse = [0] * len(axes)
    for i, a in enumerate(axes):
        inverse[a] = i
    return (g.transpose(inverse) if type(g) is np.ndarray else np.transpose(g, inverse),)


@rule("broadcast_to", lambda x, shape: np.broadcast_to(x, shape), view=True, complex_ok=True)
def _broadcast_to(g, r):
    """out = x broadcast to shape:  dx = g summed over the broadcast axes (done by the tape)."""
    return (g,)


@rule("astype", lambda x, dtype: x.astype(dtype), complex_ok=True, scalar="{0}")
def _astype(g, r):
    """out = x cast to another float dtype:  dx = g cast back (done by the tape)."""
    return (g,)


@rule("copy", np.copy, complex_ok=True)
def _copy(g, r):
    """out = copy of x:  dx = g."""
    return (g,)


# ---------------------------------------------------------------- indexing

def _is_advanced(index):
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, (list, np.ndarray)) for i in items)


def _scatter_add(shape, dtype, index, g):
    """Zeros of ``shape`` with ``g`` added at ``index`` (repeated indices accumulate)."""
    z = np.zeros(shape, dtype=dtype)
    if _is_advanced(index):
        np.add.at(z, index, g)
    else:
        z[index] = g
    return z


def getitem_forward(x, index):
    return x[index]


@rule("getitem", getitem_forward, view=True, complex_ok=True)
def _getitem(g, r):
    """out = x[index]:  dx = zeros with g added at index (accumulating repeats)."""
    x = r.args[0]
    return (_scatter_add(x.shape, x.dtype, r.attrs["index"], g),)


def take_forward(x, indices, axis=None):
    return np.take(x, indices, axis=axis)


@rule("take", take_forward, complex_ok=True)
def _take(g, r):
    """out = take(x, idx, axis):  dx = zeros with g added at idx along axis."""
    x, idx = r.args[0], r.args[1]
    axis = r.attrs.get("axis")
    if axis is None:
        return _scatter_add(x.size, x.dtype, (np.asarray(idx),), g).reshape(x.shape), None
    axis %= x.ndim
    index = (slice(None),) * axis + (np.asarray(idx),)
    return _scatter_add(x.shape, x.dtype, index, g), None


def setitem_forward(x, v, index):
    out = np.array(x, copy=True)
    out[index] = v
    return out


@rule("setitem", setitem_forward, complex_ok=True)
def _setitem(g, r):
    """out = x with out[index] = v:  dx = g with g[index] = 0,  dv = g[index]."""
    index = r.attrs["index"]
    gx = np.array(g, copy=True)
    gx[index] = 0
    return gx, g[index]


# ---------------------------------------------------------------- joining and selection

def concatenate_forward(*xs, axis=0):
    return np.concatenate(xs, axis=axis)


@rule("concatenate", concatenate_forward, complex_ok=True)
def _concatenate(g, r):
    """out = concat(x_1..x_n, axis):  dx_i = the slice of g where x_i sits."""
    axis = r.attrs.get("axis", 0)
    if axis is None:
        sizes = [np.size(x) for x in r.args]
        parts = np.split(g, np.cumsum(sizes)[:-1])
        return tuple(p.reshape(np.shape(x)) for p, x in zip(parts, r.args))
    sizes = [np.shape(x)[axis] for x in r.args]
    return tuple(np.split(g, np.cumsum(sizes)[:-1], axis=axis))


def stack_forward(*xs, axis=0):
    return np.stack(xs, axis=axis)


@rule("stack", stack_forward, complex_ok=True)
def _stack(g, r):
    """out = stack(x_1..x_n, axis):  dx_i = g[..., i, ...] (index i along axis)."""
    axis = r.attrs.get("axis", 0)
    g = np.moveaxis(g, axis, 0)
    return tuple(g[i] for i in range(len(r.args)))


@rule("where", np.where, complex_ok=True, scalar=choose("{0}", "{1}", "{2}"))
def _where(g, r):
    """out = where(c, a, b):  da = g [c],  db = g [not c]."""
    c = r.args[0]
    return None, np.where(c, g, 0), np.where(c, 0, g)


def clip_forward(x, lo, hi):
    return np.clip(x, lo, hi)


def clip_scalar(r):
    """``min(max(x, lo), hi)`` over the bounds that are given (the operands that are not ``None``)."""
    lo, hi = r.args[1] is not None, r.args[2] is not None
    if lo and hi:
        return ("if {0} < {1}:", "    {out} = {1}", "elif {0} > {2}:", "    {out} = {2}",
                "else:", "    {out} = {0}")
    if lo:
        return choose("{0} < {1}", "{1}", "{0}")
    return choose("{0} > {1}", "{1}", "{0}") if hi else "{0}"


@rule("clip", clip_forward, scalar=clip_scalar)
def _clip(g, r):
    """out = min(max(x, lo), hi):  dx = g [lo <= x <= hi],  dlo = g [x < lo <= hi],  dhi = g [max(x, lo) > hi]."""
    x, lo, hi = r.args
    t = x if lo is None else np.maximum(x, lo)
    to_hi = np.zeros(np.shape(r.value), bool) if hi is None else t > hi
    to_lo = np.zeros(np.shape(r.value), bool) if lo is None else (x < lo) & ~to_hi
    gx = np.where(to_lo | to_hi, 0, g)
    glo = np.where(to_lo, g, 0) if r.inputs[1] is not None else None
    ghi = np.where(to_hi, g, 0) if r.inputs[2] is not None else None
    return gx, glo, ghi
