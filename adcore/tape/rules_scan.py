"""Rules of products and running sums/products (``axis`` is an int or, for ``prod``, as ``sum``)."""
import numpy as np

from .rules import _expand, rule


def _products_of_others(x, axes):
    """For each element, the product of the others over ``axes`` (prefix times suffix
    products: no division, so zeros are fine)."""
    axes = tuple(range(x.ndim)) if axes is None else tuple(axes)
    kept = [d for d in range(x.ndim) if d not in axes]
    xt = np.transpose(x, kept + list(axes))
    flat = xt.reshape(xt.shape[:len(kept)] + (-1,))
    one = np.ones_like(flat[..., :1])
    left = np.cumprod(np.concatenate([one, flat[..., :-1]], -1), -1)
    right = np.cumprod(np.concatenate([one, flat[..., :0:-1]], -1), -1)[..., ::-1]
    return np.transpose((left * right).reshape(xt.shape), np.argsort(kept + list(axes)))


@rule("prod", np.prod, complex_ok=True)
def _prod(g, r):
    """out = prod x (over axis):  dx_i = g prod_{j != i} x_j."""
    x = r.args[0]
    axis, keepdims = r.attrs.get("axis"), r.attrs.get("keepdims", False)
    return (_expand(g, axis, keepdims, x.ndim) * _products_of_others(x, axis),)


def _reverse_cumsum(g, axis):
    return np.flip(np.cumsum(np.flip(g, axis), axis), axis)


@rule("cumsum", lambda x, axis: np.cumsum(x, axis=axis), complex_ok=True)
def _cumsum(g, r):
    """out_k = sum_{j <= k} x_j:  dx_j = sum_{k >= j} g_k."""
    return (_reverse_cumsum(g, r.attrs["axis"]),)


@rule("cumprod", lambda x, axis: np.cumprod(x, axis=axis), complex_ok=True)
def _cumprod(g, r):
    """out_k = prod_{j <= k} x_j:  dx_j = sum_{k >= j} g_k prod_{i <= k, i != j} x_i
    (= reverse cumsum(g out)_j / x_j when x has no zero; else one cumprod per j)."""
    x, axis = r.args[0], r.attrs["axis"]
    if np.all(x != 0):
        return (_reverse_cumsum(g * r.value, axis) / x,)
    gx = np.zeros(np.broadcast_shapes(x.shape, g.shape), np.result_type(x, g))
    for j in range(x.shape[axis]):
        at = (slice(None),) * axis + (j,)
        xj = np.array(x, copy=True)
        xj[at] = 1
        later = (slice(None),) * axis + (slice(j, None),)
        gx[at] = np.sum((g * np.cumprod(xj, axis=axis))[later], axis=axis)
    return (gx,)
