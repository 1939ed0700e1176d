"""numpy dispatch of order statistics (median, quantile, percentile, nanmax, nanmin), sampling
(linspace, interp) and 1-D convolution (convolve, correlate).  Each is composed from recorded
ops (sort, indexing, where, products, concatenation), so its gradient comes from their rules:
an order statistic passes its cotangent to the element(s) it picks, a linear interpolation
splits it between the two neighbours by their weights."""
import numpy as np

from ..errors import UnsupportedError
from .numpy_api import _only, implements
from .tracked import Tracked, primal, _norm_axis


def _sorted_leading(a, axis):
    """``a`` sorted along ``axis`` (all axes flattened for None), that axis moved first."""
    if axis is None:
        return np.sort(np.reshape(a, -1))
    axes = _norm_axis(axis, np.ndim(primal(a)))
    if len(axes) != 1:
        raise UnsupportedError("a quantile over several axes", detail="adcore.tape takes one axis or None")
    return np.moveaxis(np.sort(a, axis=axes[0]), axes[0], 0)


def _quantile(a, q, axis, keepdims, method, func):
    """numpy's ``method="linear"`` quantile: between the sorted values at floor and ceil of
    ``q (n - 1)``, weighted by the fraction (numpy's lerp, so the values agree)."""
    _only(func, {"method": method}, method="linear")
    if type(q) is Tracked:
        raise UnsupportedError(f"{func.__name__} of a tracked q", detail="q must be a constant")
    q = np.asarray(q, dtype=float)
    if np.any((q < 0) | (q > 1)):
        raise ValueError("Quantiles must be in the range [0, 1]")
    s = _sorted_leading(a, axis)
    n = np.shape(primal(s))[0]
    pos = q * (n - 1)
    lo = np.floor(pos).astype(np.intp)
    hi = np.minimum(lo + 1, n - 1)
    rest = (1,) * (np.ndim(primal(s)) - 1)
    t = (pos - lo).reshape(q.shape + rest)
    below, above = s[lo], s[hi]
    diff = above - below
    out = np.where(t >= 0.5, above - diff * (1 - t), below + diff * t)
    if keepdims:
        ndim = np.ndim(primal(a))
        kept = tuple(range(ndim)) if axis is None else _norm_axis(axis, ndim)
        shape = list(np.shape(primal(a)))
        for k in kept:
            shape[k] = 1
        out = np.reshape(out, q.shape + tuple(shape))
    return out


@implements(np.quantile)
def _np_quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False):
    _only(np.quantile, {"out": out}, out=None)
    return _quantile(a, q, axis, keepdims, method, np.quantile)


@implements(np.percentile)
def _percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False):
    _only(np.percentile, {"out": out}, out=None)
    return _quantile(a, np.asarray(primal(q), dtype=float) / 100, axis, keepdims, method, np.percentile)


@implements(np.median)
def _median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    _only(np.median, {"out": out}, out=None)
    return _quantile(a, 0.5, axis, keepdims, "linear", np.median)


def _nan_extreme(func, reduce, fill):
    def handler(a, axis=None, out=None, keepdims=False, **options):
        """``reduce`` of the values that are not NaN (NaN where a slice has none, as numpy)."""
        _only(func, dict(options, out=out), out=None)
        nan = np.isnan(primal(a))
        value = reduce(np.where(nan, fill, a), axis=axis, keepdims=keepdims)
        none = np.all(nan, axis=axis, keepdims=keepdims)
        return np.where(none, np.nan, value) if np.any(none) else value
    implements(func)(handler)


_nan_extreme(np.nanmax, np.max, -np.inf)
_nan_extreme(np.nanmin, np.min, np.inf)


@implements(np.linspace)
def _linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0):
    """start + (stop - start) t for t = k / (num - 1) (or k / num without the endpoint); the
    last sample is ``stop`` itself when ``endpoint``, as numpy's."""
    _only(np.linspace, {"dtype": dtype, "axis": axis}, dtype=None, axis=0)
    div = (num - 1) if endpoint else num
    shape = np.broadcast_shapes(np.shape(primal(start)), np.shape(primal(stop)))
    t = np.arange(num, dtype=float).reshape((num,) + (1,) * len(shape))
    step = (stop - start) / div if div > 0 else (stop - start) * np.nan
    samples = start + t * step if div > 0 else start + t * (stop - start)
    if endpoint and num > 1:
        samples = np.concatenate([samples[:-1], np.reshape(stop + np.zeros(shape), (1,) + shape)])
    return (samples, step) if retstep else samples


@implements(np.interp)
def _interp(x, xp, fp, left=None, right=None, period=None):
    """Piecewise-linear interpolation, differentiable in ``x``, ``fp``, ``left`` and ``right``
    (``xp``, the sample points, must be constant): ``fp[j] + slope_j (x - xp[j])``."""
    if period is not None:
        raise UnsupportedError("numpy.interp with period=", detail="adcore.tape does not record this option")
    if type(xp) is Tracked:
        raise UnsupportedError("numpy.interp of tracked sample points xp", detail="xp must be a constant")
    xp = np.asarray(xp, dtype=float)
    fp = fp if type(fp) is Tracked else np.asarray(fp, dtype=float)
    xv = np.asarray(primal(x), dtype=float)
    j = np.clip(np.searchsorted(xp, xv, side="right") - 1, 0, max(len(xp) - 2, 0))
    if len(xp) == 1:
        inside = fp[j] + 0 * x
    else:
        slope = (fp[j + 1] - fp[j]) / (xp[j + 1] - xp[j])
        inside = np.where(xv == xp[j + 1], fp[j + 1], slope * (x - xp[j]) + fp[j])
    below = fp[0] if left is None else left
    above = fp[-1] if right is None else right
    return np.where(xv < xp[0], below, np.where(xv > xp[-1], above, inside))


def _full_convolution(a, v):
    """sum_j v[j] a shifted right by j: the 'full' convolution, one recorded product per
    element of the shorter operand."""
    if np.size(primal(v)) > np.size(primal(a)):
        a, v = v, a
    n, m = np.size(primal(a)), np.size(primal(v))
    return sum(np.concatenate([np.zeros(j), a * v[j], np.zeros(m - 1 - j)]) for j in range(m))


def _mode_slice(full, n, m, mode):
    long, short = max(n, m), min(n, m)
    if mode == "full":
        return full
    if mode == "same":
        start = (short - 1) // 2
        return full[start:start + long]
    if mode == "valid":
        return full[short - 1:long]
    raise ValueError(f"mode must be 'full', 'same' or 'valid', not {mode!r}")


def _vector(x, func):
    if np.ndim(primal(x)) != 1 or np.size(primal(x)) == 0:
        raise ValueError(f"{func} takes two non-empty 1-D arrays")
    if np.iscomplexobj(primal(x)):
        raise UnsupportedError(f"numpy.{func} of complex arrays", detail="adcore.tape convolves real arrays")
    return x


@implements(np.convolve)
def _convolve(a, v, mode="full"):
    """(a * v)[k] = sum_j a[j] v[k - j], cut to ``mode`` as numpy does."""
    a, v = _vector(a, "convolve"), _vector(v, "convolve")
    n, m = np.size(primal(a)), np.size(primal(v))
    return _mode_slice(_full_convolution(a, v), n, m, mode)


@implements(np.correlate)
def _correlate(a, v, mode="valid"):
    """c[k] = sum_j a[j + k] v[j] (real arrays): the convolution of ``a`` with ``v`` reversed,
    or for a shorter ``a`` that of ``v`` with ``a`` reversed, read backwards (numpy's order)."""
    a, v = _vector(a, "correlate"), _vector(v, "correlate")
    if np.size(primal(a)) >= np.size(primal(v)):
        return _convolve(a, v[::-1], mode)
    return _convolve(v, a[::-1], mode)[::-1]
