"""numpy dispatch of array manipulation: stacking, splitting, reordering, padding, triangles,
differences.  Each is composed from recorded ops (indexing, ``take``, ``concatenate``,
``reshape``, ``transpose``, ``where``), so its gradient comes from their rules."""
import numpy as np

from ..errors import UnsupportedError
from .numpy_api import FUNCTIONS, _only, implements
from .tracked import Tracked, apply, primal, _axis

# ---------------------------------------------------------------- helpers


def _shape(x):
    return np.shape(primal(x))


def _ndim(x):
    return len(_shape(x))


def _along(axis, ndim, index):
    """An index tuple applying ``index`` on ``axis`` of an array with ``ndim`` axes."""
    return (slice(None),) * axis + (index,) + (slice(None),) * (ndim - axis - 1)


def _getitem(x, index):
    return apply("getitem", (x,), {"index": index}) if type(x) is Tracked else np.asarray(x)[index]


def _gather(x, axis, positions):
    """``take`` with integer ``positions`` along ``axis`` (an int)."""
    return apply("take", (x, np.asarray(positions, dtype=np.intp)), {"axis": axis})


def _index_grid(indices, axis):
    """The advanced index picking ``indices`` (an integer array, the shape of the result)
    along ``axis`` and the matching position along every other axis."""
    grid = list(np.ogrid[tuple(slice(n) for n in indices.shape)])
    grid[axis] = indices
    return tuple(grid)


# ---------------------------------------------------------------- at least n-d, stacking

def _atleast(x, nd):
    shape = _shape(x)
    if len(shape) >= nd:
        return x
    if nd == 3 and len(shape) == 1:
        new = (1,) + shape + (1,)
    elif nd == 3 and len(shape) == 2:
        new = shape + (1,)
    else:
        new = (1,) * (nd - len(shape)) + shape
    return np.reshape(x, new)


def _atleast_handler(nd):
    def handler(*arys):
        out = tuple(_atleast(a, nd) for a in arys)
        return out[0] if len(out) == 1 else out
    return handler


for _nd, _f in ((1, np.atleast_1d), (2, np.atleast_2d), (3, np.atleast_3d)):
    FUNCTIONS[_f] = _atleast_handler(_nd)


def _joined(arrays, axis, **options):
    _only(np.concatenate, options, dtype=None, casting="same_kind")
    return apply("concatenate", tuple(arrays), {"axis": axis})


@implements(np.vstack)
def _vstack(tup, **options):
    return _joined([_atleast(a, 2) for a in tup], 0, **options)


@implements(np.hstack)
def _hstack(tup, **options):
    arrs = [_atleast(a, 1) for a in tup]
    return _joined(arrs, 0 if _ndim(arrs[0]) == 1 else 1, **options)


@implements(np.dstack)
def _dstack(tup):
    return _joined([_atleast(a, 3) for a in tup], 2)


@implements(np.column_stack)
def _column_stack(tup):
    return _joined([np.reshape(a, (-1, 1)) if _ndim(a) < 2 else a for a in tup], 1)


@implements(np.append)
def _append(arr, values, axis=None):
    if axis is None:
        return _joined([np.reshape(arr, -1), np.reshape(values, -1)], 0)
    return _joined([arr, values], axis)


# ---------------------------------------------------------------- splitting

def _split(ary, indices_or_sections, axis, exact):
    axis = _axis(axis, _ndim(ary))
    n = _shape(ary)[axis]
    split = np.split if exact else np.array_split
    pieces = split(np.arange(n), indices_or_sections)  # numpy's own checks and boundaries
    out, start = [], 0
    for p in pieces:
        out.append(_getitem(ary, _along(axis, _ndim(ary), slice(start, start + len(p)))))
        start += len(p)
    return out


@implements(np.split)
def _split_fn(ary, indices_or_sections, axis=0):
    return _split(ary, indices_or_sections, axis, True)


@implements(np.array_split)
def _array_split(ary, indices_or_sections, axis=0):
    return _split(ary, indices_or_sections, axis, False)


@implements(np.hsplit)
def _hsplit(ary, indices_or_sections):
    if _ndim(ary) == 0:
        raise ValueError("hsplit only works on arrays of 1 or more dimensions")
    return _split(ary, indices_or_sections, 1 if _ndim(ary) > 1 else 0, True)


@implements(np.vsplit)
def _vsplit(ary, indices_or_sections):
    if _ndim(ary) < 2:
        raise ValueError("vsplit only works on arrays of 2 or more dimensions")
    return _split(ary, indices_or_sections, 0, True)


@implements(np.dsplit)
def _dsplit(ary, indices_or_sections):
    if _ndim(ary) < 3:
        raise ValueError("dsplit only works on arrays of 3 or more dimensions")
    return _split(ary, indices_or_sections, 2, True)


# ---------------------------------------------------------------- order

@implements(np.flip)
def _flip(m, axis=None):
    nd = _ndim(m)
    axes = range(nd) if axis is None else [axis] if isinstance(axis, (int, np.integer)) else axis
    index = [slice(None)] * nd
    for a in axes:
        index[_axis(a, nd)] = slice(None, None, -1)
    return _getitem(m, tuple(index))


@implements(np.fliplr)
def _fliplr(m):
    if _ndim(m) < 2:
        raise ValueError("Input must be >= 2-d.")
    return _flip(m, 1)


@implements(np.flipud)
def _flipud(m):
    if _ndim(m) < 1:
        raise ValueError("Input must be >= 1-d.")
    return _flip(m, 0)


@implements(np.roll)
def _roll(a, shift, axis=None):
    if axis is None:
        return np.reshape(_roll(np.reshape(a, -1), shift, 0), _shape(a))
    shifts, axes = np.broadcast_arrays(shift, axis)
    for s, ax in zip(shifts.ravel(), axes.ravel()):
        ax = _axis(ax, _ndim(a))
        a = _gather(a, ax, np.roll(np.arange(_shape(a)[ax]), s))
    return a


@implements(np.rollaxis)
def _rollaxis(a, axis, start=0):
    nd = _ndim(a)
    axis = _axis(axis, nd)
    if not -nd <= start <= nd:
        raise np.exceptions.AxisError(f"start={start} is out of bounds for {nd} dimensions")
    start = start % (nd + 1) if start < 0 else start
    if axis < start:
        start -= 1
    perm = [d for d in range(nd) if d != axis]
    perm.insert(start, axis)
    return np.transpose(a, perm)


@implements(np.rot90)
def _rot90(m, k=1, axes=(0, 1)):
    nd = _ndim(m)
    a0, a1 = _axis(axes[0], nd), _axis(axes[1], nd)
    if a0 == a1:
        raise ValueError("Axes must be different.")
    k %= 4
    if k == 0:
        return apply("copy", (m,))
    if k == 2:
        return _flip(_flip(m, a0), a1)
    perm = list(range(nd))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    return np.transpose(_flip(m, a1), perm) if k == 1 else _flip(np.transpose(m, perm), a1)


@implements(np.repeat)
def _repeat(a, repeats, axis=None):
    if axis is None:
        a, axis = np.reshape(a, -1), 0
    axis = _axis(axis, _ndim(a))
    return _gather(a, axis, np.repeat(np.arange(_shape(a)[axis]), primal(repeats)))


@implements(np.tile)
def _tile(A, reps):
    reps = (reps,) if isinstance(reps, (int, np.integer)) else tuple(reps)
    nd = max(len(reps), _ndim(A))
    A = np.reshape(A, (1,) * (nd - _ndim(A)) + _shape(A))
    reps = (1,) * (nd - len(reps)) + reps
    for ax, r in enumerate(reps):
        if r != 1:
            A = _gather(A, ax, np.tile(np.arange(_shape(A)[ax]), r))
    return A


def _sorted_by(a, order, axis):
    """``a`` rearranged along ``axis`` by the integer array ``order`` (argsort-like output)."""
    if axis is None:
        return _sorted_by(np.reshape(a, -1), order, 0)
    return _getitem(a, _index_grid(order, _axis(axis, _ndim(a))))


@implements(np.sort)
def _sort(a, axis=-1, kind=None, order=None, **options):
    if order is not None:
        raise UnsupportedError("numpy.sort with order=")
    flat = primal(a).ravel() if axis is None else primal(a)
    return _sorted_by(a, np.argsort(flat, axis=-1 if axis is None else axis, kind="stable"), axis)


@implements(np.partition)
def _partition(a, kth, axis=-1, kind="introselect", order=None):
    if order is not None:
        raise UnsupportedError("numpy.partition with order=")
    flat = primal(a).ravel() if axis is None else primal(a)
    return _sorted_by(a, np.argpartition(flat, kth, axis=-1 if axis is None else axis), axis)


@implements(np.take_along_axis)
def _take_along_axis(arr, indices, axis=-1):
    indices = np.asarray(primal(indices))
    if axis is None:
        return _getitem(np.reshape(arr, -1), indices)
    axis = _axis(axis, _ndim(arr))
    shape = np.broadcast_shapes(_shape(arr), indices.shape[:axis] + (1,) + indices.shape[axis + 1:])
    grid = [np.arange(n if m != 1 else 1).repeat(1 if m != 1 else n).reshape(
            [-1 if e == d else 1 for e in range(len(shape))]) for d, (n, m) in enumerate(zip(shape, _shape(arr)))]
    grid[axis] = indices
    return _getitem(arr, tuple(grid))


# ---------------------------------------------------------------- padding

_INDEX_MODES = {"edge", "reflect", "symmetric", "wrap"}


@implements(np.pad)
def _pad(array, pad_width, mode="constant", **kwargs):
    nd = _ndim(array)
    widths = np.broadcast_to(np.asarray(pad_width, dtype=np.intp), (nd, 2))
    if mode == "constant":
        _only(np.pad, {k: v for k, v in kwargs.items() if k != "constant_values"})
        if type(kwargs.get("constant_values")) is Tracked:
            raise UnsupportedError("numpy.pad with tracked constant_values")
        values = np.broadcast_to(np.asarray(kwargs.get("constant_values", 0)), (nd, 2))
        for ax, ((before, after), (vb, va)) in enumerate(zip(widths, values)):
            shape = list(_shape(array))
            parts = []
            if before:
                parts.append(np.full(shape[:ax] + [before] + shape[ax + 1:], vb, dtype=primal(array).dtype))
            parts.append(array)
            if after:
                parts.append(np.full(shape[:ax] + [after] + shape[ax + 1:], va, dtype=primal(array).dtype))
            array = apply("concatenate", tuple(parts), {"axis": ax}) if len(parts) > 1 else array
        return array
    if mode in _INDEX_MODES and kwargs.get("reflect_type", "even") == "even":
        for ax, (before, after) in enumerate(widths):
            if before or after:
                positions = np.pad(np.arange(_shape(array)[ax]), (before, after), mode=mode)
                array = _gather(array, ax, positions)
        return array
    raise UnsupportedError(f"numpy.pad with mode={mode!r}" + (f" and {sorted(kwargs)}" if kwargs else ""),
                           detail="adcore.tape records the modes constant, edge, reflect, symmetric, wrap")


# ---------------------------------------------------------------- triangles, diagonals

def _triangle(m, keep):
    n, k = _shape(m)[-2:]
    return apply("where", (keep(n, k), m, 0.0))


@implements(np.tril)
def _tril(m, k=0):
    if _ndim(m) < 2:
        raise UnsupportedError("numpy.tril of a 1-D tracked array")
    return _triangle(m, lambda n, c: np.tri(n, c, k, dtype=bool))


@implements(np.triu)
def _triu(m, k=0):
    if _ndim(m) < 2:
        raise UnsupportedError("numpy.triu of a 1-D tracked array")
    return _triangle(m, lambda n, c: ~np.tri(n, c, k - 1, dtype=bool))


def _diagonal_positions(n_rows, n_cols, offset):
    rows = np.arange(max(0, -offset), min(n_rows, n_cols - offset))
    return rows, rows + offset


@implements(np.diagonal)
def _diagonal(a, offset=0, axis1=0, axis2=1):
    nd = _ndim(a)
    axis1, axis2 = _axis(axis1, nd), _axis(axis2, nd)
    a = np.moveaxis(a, (axis1, axis2), (-2, -1))
    rows, cols = _diagonal_positions(*_shape(a)[-2:], offset)
    return _getitem(a, (Ellipsis, rows, cols))


@implements(np.diag)
def _diag(v, k=0):
    if _ndim(v) == 1:
        n = _shape(v)[0] + abs(k)
        zeros = np.zeros((n, n), dtype=primal(v).dtype)
        return apply("setitem", (zeros, v), {"index": _diagonal_positions(n, n, k)})
    if _ndim(v) == 2:
        return _diagonal(v, k)
    raise ValueError("Input must be 1- or 2-d.")


@implements(np.trace)
def _trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    _only(np.trace, {"dtype": dtype, "out": out}, dtype=None, out=None)
    return np.sum(_diagonal(a, offset, axis1, axis2), axis=-1)


FUNCTIONS[np.linalg.diagonal] = lambda x, /, *, offset=0: _diagonal(x, offset, -2, -1)
FUNCTIONS[np.linalg.trace] = lambda x, /, *, offset=0, dtype=None: _trace(x, offset, -2, -1, dtype)


# ---------------------------------------------------------------- selection, differences

@implements(np.select)
def _select(condlist, choicelist, default=0):
    if len(condlist) != len(choicelist):
        raise ValueError("list of cases must be same length as list of conditions")
    result = default
    for cond, choice in zip(reversed(condlist), reversed(choicelist)):
        result = np.where(primal(cond), choice, result)
    return result


@implements(np.diff)
def _diff(a, n=1, axis=-1, prepend=np._NoValue, append=np._NoValue):
    axis = _axis(axis, _ndim(a))
    parts = [p for p in (prepend, a, append) if p is not np._NoValue]
    if len(parts) > 1:
        shape = list(_shape(a))
        parts = [p if p is a or _ndim(p) else
                 np.broadcast_to(p, shape[:axis] + [1] + shape[axis + 1:]) for p in parts]
        a = apply("concatenate", tuple(parts), {"axis": axis})
    nd = _ndim(a)
    for _ in range(n):
        a = _getitem(a, _along(axis, nd, slice(1, None))) - _getitem(a, _along(axis, nd, slice(None, -1)))
    return a


def _axis_gradient(f, axis, h, edge_order):
    """numpy's second-order differences along one axis, as sums of shifted slices."""
    nd = _ndim(f)
    n = _shape(f)[axis]
    if n < edge_order + 1:
        raise ValueError("Shape of array too small to calculate a numerical gradient, "
                         "at least (edge_order + 1) elements are required.")

    def at(s):
        return _getitem(f, _along(axis, nd, s))

    dtype = primal(f).dtype if primal(f).dtype.kind in "fc" else np.dtype(float)

    def col(c):  # coefficients in f's precision, broadcast along ``axis``
        c = np.asarray(c, dtype=dtype)
        return c.reshape((-1,) + (1,) * (nd - axis - 1)) if c.ndim else c

    dx = np.diff(h) if np.ndim(h) else np.full(n - 1, float(h))
    d1, d2 = dx[:-1], dx[1:]
    interior = (at(slice(None, -2)) * col(-d2 / (d1 * (d1 + d2)))
                + at(slice(1, -1)) * col((d2 - d1) / (d1 * d2))
                + at(slice(2, None)) * col(d1 / (d2 * (d1 + d2))))
    if edge_order == 1:
        first = (at(slice(1, 2)) - at(slice(0, 1))) * col(1 / dx[0])
        last = (at(slice(-1, None)) - at(slice(-2, -1))) * col(1 / dx[-1])
    else:
        a, b = dx[0], dx[1]
        first = (at(slice(0, 1)) * col(-(2 * a + b) / (a * (a + b))) + at(slice(1, 2)) * col((a + b) / (a * b))
                 + at(slice(2, 3)) * col(-a / (b * (a + b))))
        a, b = dx[-2], dx[-1]
        last = (at(slice(-3, -2)) * col(b / (a * (a + b))) + at(slice(-2, -1)) * col(-(a + b) / (a * b))
                + at(slice(-1, None)) * col((2 * b + a) / (b * (a + b))))
    return apply("concatenate", (first, interior, last), {"axis": axis})


@implements(np.gradient)
def _gradient(f, *varargs, axis=None, edge_order=1):
    nd = _ndim(f)
    axes = tuple(range(nd)) if axis is None else (
        (_axis(axis, nd),) if isinstance(axis, (int, np.integer)) else tuple(_axis(a, nd) for a in axis))
    if edge_order not in (1, 2):
        raise ValueError("'edge_order' greater than 2 not supported")
    if not varargs:
        spacing = [1.0] * len(axes)
    elif len(varargs) == 1 and np.ndim(primal(varargs[0])) == 0:
        spacing = [primal(varargs[0])] * len(axes)
    elif len(varargs) == len(axes):
        spacing = [primal(v) for v in varargs]
    else:
        raise TypeError("invalid number of arguments")
    if any(type(v) is Tracked for v in varargs):
        raise UnsupportedError("numpy.gradient with tracked spacing")
    out = [_axis_gradient(f, ax, np.asarray(h, dtype=float), edge_order) for ax, h in zip(axes, spacing)]
    return out[0] if len(out) == 1 else tuple(out)
