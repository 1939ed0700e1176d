"""numpy dispatch: which ufuncs and numpy functions map to which rules.

This module installs ``Tracked.__array_ufunc__`` (served by ``ufunc_call``) and
``Tracked.__array_function__`` (served by ``function_call``).  Anything not listed here raises
``UnsupportedError`` naming the numpy function, so no gradient is silently wrong.
"""
import numpy as np

from ..errors import UnsupportedError
from . import observe, rules_complex, rules_linalg, rules_scan  # noqa: F401  (all rules in RULES first)
from .rules import RULES
from .tracked import BINARY, Tracked, apply, apply1, primal, _axis, _norm_axis

# ufunc -> rule name: the ufunc of every rule whose forward is one (see ``rules``), and aliases
UFUNC_OPS = {r.forward: name for name, r in RULES.items() if isinstance(r.forward, np.ufunc)}
UFUNC_OPS.update({np.fabs: "absolute", np.radians: "deg2rad", np.degrees: "rad2deg"})

# ufuncs with boolean/integer results or zero derivative almost everywhere: plain results;
# each with its ``scalar`` template (as in ``rules``; ``None``: not recomputed by generated code)
PLAIN_UFUNCS = {
    np.greater: "({0} > {1})", np.greater_equal: "({0} >= {1})", np.less: "({0} < {1})",
    np.less_equal: "({0} <= {1})", np.equal: "({0} == {1})", np.not_equal: "({0} != {1})",
    np.isfinite: "math.isfinite({0})", np.isnan: "math.isnan({0})", np.isinf: "math.isinf({0})",
    np.signbit: None, np.sign: "S.sign({0})", np.floor: "math.floor({0})",
    np.ceil: "math.ceil({0})", np.rint: "S.rint({0})", np.trunc: "math.trunc({0})",
    np.logical_and: "(bool({0}) and bool({1}))", np.logical_or: "(bool({0}) or bool({1}))",
    np.logical_not: "(not {0})", np.logical_xor: "(bool({0}) != bool({1}))",
    np.floor_divide: None, np.heaviside: None,
}

REDUCE_OPS = {np.add: "sum", np.maximum: "max", np.minimum: "min", np.multiply: "prod"}
ACCUMULATE_OPS = {np.add: "cumsum", np.multiply: "cumprod"}
COMPOSED_UFUNCS = {}  # generalized ufuncs composed from recorded ops (filled by numpy_linalg)


def _name(f):
    mod = getattr(f, "__module__", None) or "numpy"
    return f"{'numpy' if mod.startswith('numpy._') else mod}.{f.__name__}"


def ufunc_call(ufunc, method, inputs, kwargs):
    """Record ``ufunc.method(*inputs, **kwargs)`` or raise ``UnsupportedError``."""
    name = f"numpy.{ufunc.__name__}"
    if kwargs.get("out") is not None and ufunc not in PLAIN_UFUNCS:
        raise UnsupportedError(
            f"{name} with out=",
            detail="writing a tracked result into an existing array (including `a += x` on a "
                   "plain array a) would drop its gradient; use the returned value instead")
    if method == "__call__":
        if ufunc in PLAIN_UFUNCS:
            plain = [primal(i) for i in inputs]
            if ufunc is np.sign and any(np.iscomplexobj(p) for p in plain):
                raise UnsupportedError(f"{name} of a complex tracked value",
                                       detail="sign(z) = z/|z| is not piecewise constant; write z / np.abs(z)")
            return observe.plain(ufunc(*plain, **kwargs), None if kwargs else ufunc.__name__, inputs)
        op = UFUNC_OPS.get(ufunc)
        if op is not None:
            if kwargs:
                raise UnsupportedError(f"{name} with keyword arguments {sorted(kwargs)}")
            return apply(op, inputs)
        if ufunc in COMPOSED_UFUNCS:
            return COMPOSED_UFUNCS[ufunc](*inputs, **kwargs)
    elif method == "reduce" and ufunc in REDUCE_OPS and len(inputs) == 1 and not set(kwargs) - {"axis", "keepdims"}:
        x = inputs[0]
        return apply(REDUCE_OPS[ufunc], (x,), {"axis": _norm_axis(kwargs.get("axis", 0), np.ndim(primal(x))),
                                               "keepdims": kwargs.get("keepdims", False)})
    elif method == "accumulate" and ufunc in ACCUMULATE_OPS and len(inputs) == 1 and not set(kwargs) - {"axis"}:
        x = inputs[0]
        return apply(ACCUMULATE_OPS[ufunc], (x,), {"axis": _axis(kwargs.get("axis", 0), np.ndim(primal(x)))})
    elif method == "outer" and ufunc in UFUNC_OPS and len(inputs) == 2 and not kwargs:
        a, b = inputs
        nb = np.ndim(primal(b))
        return ufunc(np.reshape(a, np.shape(primal(a)) + (1,) * nb), b)
    raise UnsupportedError(f"{name}" + ("" if method == "__call__" else f".{method}"),
                           detail="adcore.tape has no rule for it")


FUNCTIONS = {}


def implements(*funcs):
    """Register the decorated function as the tracked implementation of numpy ``funcs``."""
    def register(handler):
        for f in funcs:
            FUNCTIONS[f] = handler
        return handler
    return register


def function_call(func, args, kwargs):
    """Run the tracked implementation of numpy function ``func`` or raise ``UnsupportedError``."""
    handler = FUNCTIONS.get(func)
    if handler is None:
        raise UnsupportedError(_name(func), detail="adcore.tape has no rule for it")
    return handler(*args, **kwargs)


def _only(func, options, **allowed):
    """Refuse options of ``func`` the tape does not record (beyond their default values)."""
    for k, v in options.items():
        if k not in allowed or not (v is allowed[k] or isinstance(v, str) and v == allowed[k]):
            raise UnsupportedError(f"{_name(func)} with {k}={v!r}", detail="adcore.tape does not record this option")


def _reduction(func, op):
    def handler(a, axis=None, keepdims=False, **options):
        if options:
            _only(func, options, dtype=None, out=None)
        if type(a) is Tracked:
            return apply1(op, a, {"axis": _norm_axis(axis, a.value.ndim), "keepdims": keepdims})
        return apply(op, (a,), {"axis": _norm_axis(axis, np.ndim(primal(a))), "keepdims": keepdims})
    FUNCTIONS[func] = handler


_reduction(np.sum, "sum")
_reduction(np.mean, "mean")
_reduction(np.max, "max")
_reduction(np.amax, "max")
_reduction(np.min, "min")
_reduction(np.amin, "min")


@implements(np.var)
def _var(a, axis=None, ddof=0, keepdims=False, **options):
    """Mean squared deviation (|deviation|**2 for complex), composed from recorded ops."""
    _only(np.var, options, dtype=None, out=None)
    d = a - np.mean(a, axis=axis, keepdims=True)
    n = np.size(primal(a)) // np.size(np.mean(primal(a), axis=axis))
    sq = np.real(d * np.conj(d)) if np.iscomplexobj(primal(a)) else d * d
    return np.sum(sq, axis=axis, keepdims=keepdims) / (n - ddof)


def safe_sqrt(v):
    """sqrt(v) for v >= 0 whose derivative at v = 0 is taken as 0 (the minimum-norm
    subgradient of the norm it ends), not inf * 0 = nan."""
    if type(v) is not Tracked:
        return np.sqrt(v)
    pos = v > 0  # a comparison of the tracked value: the compiled path recomputes it
    return np.where(pos, np.sqrt(np.where(pos, v, 1)), 0)


@implements(np.std)
def _std(a, axis=None, ddof=0, keepdims=False, **options):
    """sqrt(var); its derivative where the deviations are all 0 (a constant, a scalar) is 0."""
    _only(np.std, options, dtype=None, out=None)
    return safe_sqrt(_var(a, axis=axis, ddof=ddof, keepdims=keepdims))


@implements(np.reshape)
def _reshape(a, shape=None, order="C", **options):
    shape = options.pop("newshape", shape)
    _only(np.reshape, options, copy=None)
    return a.reshape(shape, order=order) if type(a) is Tracked else np.reshape(a, shape, order=order)


@implements(np.ravel)
def _ravel(a, order="C"):
    return np.reshape(a, -1, order=order)


@implements(np.squeeze)
def _squeeze(a, axis=None):
    return a.squeeze(axis) if type(a) is Tracked else np.squeeze(a, axis)


@implements(np.expand_dims)
def _expand_dims(a, axis):
    shape = np.expand_dims(np.empty(np.shape(primal(a)), dtype=bool), axis).shape
    return apply("reshape", (a,), {"shape": shape})


@implements(np.transpose)
def _transpose(a, axes=None):
    return a.transpose(axes) if type(a) is Tracked else np.transpose(a, axes)


@implements(np.swapaxes)
def _swapaxes(a, axis1, axis2):
    return a.swapaxes(axis1, axis2) if type(a) is Tracked else np.swapaxes(a, axis1, axis2)


@implements(np.moveaxis)
def _moveaxis(a, source, destination):
    ndim = np.ndim(primal(a))
    source = [source] if isinstance(source, (int, np.integer)) else source
    destination = [destination] if isinstance(destination, (int, np.integer)) else destination
    source = [_axis(s, ndim) for s in source]
    destination = [_axis(d, ndim) for d in destination]
    perm = [n for n in range(ndim) if n not in source]
    for dest, src in sorted(zip(destination, source)):
        perm.insert(dest, src)
    return _transpose(a, tuple(perm))


@implements(np.broadcast_to)
def _broadcast_to(a, shape, subok=False):
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    return apply("broadcast_to", (a,), {"shape": shape})


@implements(np.copy)
def _copy(a, order="K", subok=False):
    return apply("copy", (a,))


@implements(np.take)
def _take(a, indices, axis=None, **options):
    _only(np.take, options, out=None, mode="raise")
    return apply("take", (a, primal(indices)), {"axis": axis})


@implements(np.concatenate)
def _concatenate(arrays, axis=0, **options):
    _only(np.concatenate, options, out=None, dtype=None, casting="same_kind")
    return apply("concatenate", tuple(arrays), {"axis": axis})


@implements(np.stack)
def _stack(arrays, axis=0, **options):
    _only(np.stack, options, out=None, dtype=None, casting="same_kind")
    arrays = tuple(arrays)
    return apply("stack", arrays, {"axis": _axis(axis, np.ndim(primal(arrays[0])) + 1)})


@implements(np.where)
def _where(condition, *xy):
    if not xy:
        return np.where(primal(condition))
    if len(xy) != 2:
        raise TypeError("np.where takes 1 or 3 arguments")
    return apply("where", (primal(condition),) + xy)


@implements(np.clip)
def _clip(a, a_min=None, a_max=None, **options):
    a_min = options.pop("min", a_min)
    a_max = options.pop("max", a_max)
    _only(np.clip, options, out=None)
    return apply("clip", (a, a_min, a_max))


def _plain(func, of_values):
    """Serve ``func`` on the primal values; a result that depends on the values (not only
    on shapes and dtypes) is reported to ``observe``."""
    def handler(*args, **kwargs):
        out = func(*[primal(a) for a in args], **{k: primal(v) for k, v in kwargs.items()})
        return observe.plain(out, None, args + tuple(kwargs.values())) if of_values else out
    FUNCTIONS[func] = handler


# integer/boolean results, or a derivative that is zero almost everywhere
for _f in (np.argmax, np.argmin, np.argsort, np.argpartition, np.nonzero, np.flatnonzero,
           np.argwhere, np.count_nonzero, np.any, np.all, np.isclose, np.allclose,
           np.array_equal, np.round, np.around, np.iscomplex, np.isreal, np.isneginf,
           np.isposinf, np.searchsorted, np.nanargmax, np.nanargmin):
    _plain(_f, of_values=True)
for _f in (np.shape, np.ndim, np.size, np.result_type, np.zeros_like, np.ones_like,
           np.empty_like, np.iscomplexobj, np.isrealobj):
    _plain(_f, of_values=False)


@implements(np.full_like)
def _full_like(a, fill_value, *args, **kwargs):
    if type(fill_value) is Tracked:
        raise UnsupportedError("numpy.full_like with a tracked fill_value")
    return np.full_like(primal(a), fill_value, *args, **kwargs)


del _f


# ---------------------------------------------------------------- complex parts, elementwise functions

@implements(np.real)
def _real(val):
    return apply("real", (val,))


@implements(np.imag)
def _imag(val):
    return apply("imag", (val,))


@implements(np.real_if_close)
def _real_if_close(a, tol=100):
    return apply("real_if_close", (a,), {"tol": tol})


@implements(np.angle)
def _angle(z, deg=False):
    out = apply("angle", (z,))
    return np.rad2deg(out) if deg else out


@implements(np.sinc)
def _sinc(x):
    return apply("sinc", (x,))


@implements(np.nan_to_num)
def _nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    if np.iscomplexobj(primal(x)):
        raise UnsupportedError("numpy.nan_to_num of a complex tracked value")
    return apply("nan_to_num", (x,), {"nan": nan, "posinf": posinf, "neginf": neginf})


# ---------------------------------------------------------------- products, running sums

@implements(np.prod)
def _prod(a, axis=None, keepdims=False, **options):
    _only(np.prod, options, dtype=None, out=None, initial=np._NoValue, where=True)
    return apply("prod", (a,), {"axis": _norm_axis(axis, np.ndim(primal(a))), "keepdims": keepdims})


def _running(func, op):
    def handler(a, axis=None, **options):
        _only(func, options, dtype=None, out=None)
        if axis is None:
            a, axis = np.reshape(a, -1), 0
        return apply(op, (a,), {"axis": _axis(axis, np.ndim(primal(a)))})
    FUNCTIONS[func] = handler


_running(np.cumsum, "cumsum")
_running(np.cumprod, "cumprod")


@implements(np.nansum)
def _nansum(a, axis=None, keepdims=False, **options):
    """sum with NaNs counted as 0 (their derivative is 0)."""
    _only(np.nansum, options, dtype=None, out=None)
    return np.sum(np.where(np.isnan(a), 0, a), axis=axis, keepdims=keepdims)


@implements(np.nanmean)
def _nanmean(a, axis=None, keepdims=False, **options):
    """mean of the values that are not NaN."""
    _only(np.nanmean, options, dtype=None, out=None)
    count = np.sum(~np.isnan(primal(a)), axis=axis, keepdims=keepdims).astype(primal(a).real.dtype)
    return _nansum(a, axis=axis, keepdims=keepdims) / count



def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
    if method == "__call__" and not kwargs:
        op = UFUNC_OPS.get(ufunc)
        if op is not None:
            if len(inputs) == 1:
                return apply1(op, self)
            pair = BINARY.get(op) if len(inputs) == 2 else None
            if pair is None:
                return apply(op, inputs)
            # self is the first tracked operand: np.matmul(x, w) records as x @ w does
            return pair[0](self, inputs[1]) if inputs[0] is self else pair[1](self, inputs[0])
    return ufunc_call(ufunc, method, inputs, kwargs)


def _array_function(self, func, types, args, kwargs):
    return function_call(func, args, kwargs)


Tracked.__array_ufunc__ = _array_ufunc
Tracked.__array_function__ = _array_function
