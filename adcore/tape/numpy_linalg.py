"""numpy dispatch of products (einsum, dot, tensordot, inner, outer, kron, cross, vdot) and
``np.linalg``: each maps to a rule of ``rules_linalg`` or is composed from recorded ops."""
import string

import numpy as np

from ..errors import UnsupportedError
from .numpy_api import COMPOSED_UFUNCS, FUNCTIONS, _only, implements, safe_sqrt
from .tracked import Tracked, apply, primal, _axis, _norm_axis

_LETTERS = string.ascii_letters


def _shape(x):
    return np.shape(primal(x))


def _arrays(*xs):
    """Plain operands as numpy arrays (numpy's products do not treat Python scalars as weak)."""
    return tuple(x if type(x) is Tracked else np.asarray(x) for x in xs)


def _real_only(name, *xs):
    if any(np.iscomplexobj(primal(x)) for x in xs):
        raise UnsupportedError(f"numpy.linalg.{name} of a complex tracked matrix",
                               detail="adcore.tape differentiates it for real matrices only")


# ---------------------------------------------------------------- einsum and products

def _interleaved(args):
    """(op0, sublist0, op1, sublist1, ..., [out]) -> (subscripts, operands)."""
    def letters(sub):
        return "".join("..." if s is Ellipsis else _LETTERS[s] for s in sub)
    has_out = len(args) % 2
    spec = ",".join(letters(s) for s in args[1::2])
    return spec + ("->" + letters(args[-1]) if has_out else ""), list(args[0:len(args) - has_out:2])


def einsum_subscripts(subscripts, shapes):
    """numpy's einsum subscripts (``...``, implicit output) as explicit letters: ``'ij,jk->ik'``."""
    subscripts = subscripts.replace(" ", "")
    ins, arrow, out = subscripts.partition("->")
    ins = ins.split(",")
    if len(ins) != len(shapes):
        raise ValueError(f"einsum subscripts {subscripts!r} name {len(ins)} operands, got {len(shapes)}")
    free = [c for c in _LETTERS if c not in subscripts]
    ranks = [len(shp) - (len(s) - 3) for s, shp in zip(ins, shapes) if "..." in s]
    ell = "".join(free[:max(ranks, default=0)])
    ins = [s.replace("...", ell[len(ell) - (len(shp) - len(s) + 3):]) if "..." in s else s
           for s, shp in zip(ins, shapes)]
    if arrow:
        out = out.replace("...", ell)
    else:
        named = "".join(ins)
        out = ell + "".join(sorted(c for c in set(named) if c not in ell and named.count(c) == 1))
    return ",".join(ins) + "->" + out


@implements(np.einsum)
def _einsum(*operands, optimize=False, **options):
    _only(np.einsum, options, out=None, dtype=None, order="K", casting="safe")
    if isinstance(operands[0], str):
        spec, ops = operands[0], list(operands[1:])
    else:
        spec, ops = _interleaved(operands)
    spec = einsum_subscripts(spec, [_shape(o) for o in ops])
    return apply("einsum", tuple(ops), {"subscripts": spec, "optimize": optimize})


def _einsum_of(a, b, sa, sb, out):
    return apply("einsum", (a, b), {"subscripts": f"{sa},{sb}->{out}", "optimize": False})


@implements(np.tensordot)
def _tensordot(a, b, axes=2):
    na, nb = len(_shape(a)), len(_shape(b))
    if isinstance(axes, (int, np.integer)):
        ax_a, ax_b = list(range(na - axes, na)), list(range(axes))
    else:
        ax_a, ax_b = axes
        ax_a = [ax_a] if isinstance(ax_a, (int, np.integer)) else list(ax_a)
        ax_b = [ax_b] if isinstance(ax_b, (int, np.integer)) else list(ax_b)
    ax_a, ax_b = [_axis(x, na) for x in ax_a], [_axis(x, nb) for x in ax_b]
    sa, sb = list(_LETTERS[:na]), list(_LETTERS[na:na + nb])
    for i, j in zip(ax_a, ax_b):
        sb[j] = sa[i]
    out = [c for i, c in enumerate(sa) if i not in ax_a] + [c for j, c in enumerate(sb) if j not in ax_b]
    return _einsum_of(a, b, "".join(sa), "".join(sb), "".join(out))


@implements(np.dot)
def _dot(a, b, out=None):
    _only(np.dot, {"out": out}, out=None)
    na, nb = len(_shape(a)), len(_shape(b))
    if na == 0 or nb == 0:
        return apply("multiply", _arrays(a, b))
    if na <= 2 and nb <= 2:
        return apply("matmul", (a, b))
    return _tensordot(a, b, ([na - 1], [max(nb - 2, 0)]))


@implements(np.inner)
def _inner(a, b):
    na, nb = len(_shape(a)), len(_shape(b))
    if na == 0 or nb == 0:
        return apply("multiply", _arrays(a, b))
    return _tensordot(a, b, ([na - 1], [nb - 1]))


@implements(np.vdot)
def _vdot(a, b):
    return np.sum(np.conj(np.reshape(a, -1)) * np.reshape(b, -1))


@implements(np.outer)
def _outer(a, b, out=None):
    _only(np.outer, {"out": out}, out=None)
    return np.multiply(np.reshape(a, (-1, 1)), np.reshape(b, (1, -1)))


@implements(np.kron)
def _kron(a, b):
    """kron(a, b)[i*nb + k, ...] = a[i, ...] b[k, ...]: interleaved axes, one product, a reshape."""
    sa, sb = _shape(a), _shape(b)
    nd = max(len(sa), len(sb))
    sa, sb = (1,) * (nd - len(sa)) + sa, (1,) * (nd - len(sb)) + sb
    pa = np.reshape(a, tuple(x for n in sa for x in (n, 1)))
    pb = np.reshape(b, tuple(x for n in sb for x in (1, n)))
    return np.reshape(pa * pb, tuple(m * n for m, n in zip(sa, sb)))


@implements(np.cross)
def _cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """Components of 2- or 3-vectors (a 2-vector has z = 0; two 2-vectors give the z component)."""
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = np.moveaxis(a, axisa, -1), np.moveaxis(b, axisb, -1)
    na, nb = _shape(a)[-1], _shape(b)[-1]
    if na not in (2, 3) or nb not in (2, 3):
        raise ValueError("incompatible dimensions for cross product (dimension must be 2 or 3)")
    ax, ay, bx, by = a[..., 0], a[..., 1], b[..., 0], b[..., 1]
    z = ax * by - ay * bx
    if na == 2 and nb == 2:
        return z
    az = a[..., 2] if na == 3 else 0.0
    bz = b[..., 2] if nb == 3 else 0.0
    c = np.stack([ay * bz - az * by, az * bx - ax * bz, z], axis=-1)
    return np.moveaxis(c, -1, axisc)


def _vecdot(x1, x2, axis=-1, **options):
    _only(np.vecdot, options, out=None, dtype=None)
    return np.sum(np.conj(x1) * x2, axis=axis)


COMPOSED_UFUNCS[np.vecdot] = _vecdot


# ---------------------------------------------------------------- np.linalg

_RESULTS = {"eigh": type(np.linalg.eigh(np.eye(1))), "eig": type(np.linalg.eig(np.eye(1))),
            "svd": type(np.linalg.svd(np.eye(1))), "slogdet": type(np.linalg.slogdet(np.eye(1)))}


@implements(np.linalg.inv)
def _inv(a):
    return apply("inv", (a,))


@implements(np.linalg.solve)
def _solve(a, b):
    if len(_shape(b)) == 1:  # a vector: one column
        return apply("solve", (a, np.reshape(b, (-1, 1))))[..., 0]
    return apply("solve", (a, b))


@implements(np.linalg.det)
def _det(a):
    return apply("det", (a,))


@implements(np.linalg.slogdet)
def _slogdet(a):
    _real_only("slogdet", a)
    sign = np.linalg.slogdet(primal(a))[0]  # piecewise constant for real matrices
    return _RESULTS["slogdet"](sign, apply("slogdet", (a,)))


@implements(np.linalg.pinv)
def _pinv(a, rcond=None, hermitian=False, **options):
    _real_only("pinv", a)
    if hermitian or options.get("rtol") is not None:
        raise UnsupportedError("numpy.linalg.pinv with hermitian=True or rtol",
                               detail="adcore.tape records the default algorithm only")
    return apply("pinv", (a,), {} if rcond is None else {"rcond": rcond})


@implements(np.linalg.cholesky)
def _cholesky(a, upper=False):
    _real_only("cholesky", a)
    if upper:  # numpy reads the upper triangle: the lower one of a^T
        return np.swapaxes(apply("cholesky", (np.swapaxes(a, -1, -2),)), -1, -2)
    return apply("cholesky", (a,))


def _unpack(packed, sizes, shapes):
    """Split a packed multi-output value on its last axis and reshape each part."""
    parts, at = [], 0
    for size, shape in zip(sizes, shapes):
        parts.append(np.reshape(packed[..., at:at + size], _shape(packed)[:-1] + shape))
        at += size
    return parts


@implements(np.linalg.eigh)
def _eigh(a, UPLO="L"):
    n = _shape(a)[-1]
    packed = apply("eigh", (a,), {"UPLO": UPLO})
    w, v = _unpack(packed, (n, n * n), ((n,), (n, n)))
    return _RESULTS["eigh"](_real_part(w), v)


def _real_part(x):
    """The real values (eigenvalues, singular values) packed beside complex vectors."""
    return np.real(x) if np.iscomplexobj(primal(x)) else x


@implements(np.linalg.eigvalsh)
def _eigvalsh(a, UPLO="L"):
    return _eigh(a, UPLO)[0]


@implements(np.linalg.eig)
def _eig(a):
    n = _shape(a)[-1]
    packed = apply("eig", (a,))
    return _RESULTS["eig"](*_unpack(packed, (n, n * n), ((n,), (n, n))))


@implements(np.linalg.eigvals)
def _eigvals(a):
    return _eig(a)[0]


@implements(np.linalg.svd)
def _svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    if hermitian:
        raise UnsupportedError("numpy.linalg.svd with hermitian=True")
    m, n = _shape(a)[-2:]
    if not compute_uv:
        return apply("svdvals", (a,))
    if full_matrices and m != n:
        raise UnsupportedError("numpy.linalg.svd with full_matrices=True of a non-square matrix",
                               detail="the extra singular vectors are not unique; pass full_matrices=False")
    k = min(m, n)
    packed = apply("svd", (a,))
    u, s, vh = _unpack(packed, (m * k, k, k * n), ((m, k), (k,), (k, n)))
    return _RESULTS["svd"](u, _real_part(s), vh)


@implements(np.linalg.svdvals)
def _svdvals(x):
    return apply("svdvals", (x,))


@implements(np.linalg.matrix_power)
def _matrix_power(a, n):
    if n == 0:
        return np.broadcast_to(np.eye(_shape(a)[-1], dtype=primal(a).dtype), _shape(a)).copy()
    if n < 0:
        a, n = np.linalg.inv(a), -n
    result, square = None, a
    while n:
        if n & 1:
            result = square if result is None else result @ square
        n >>= 1
        if n:
            square = square @ square
    return result


@implements(np.linalg.multi_dot)
def _multi_dot(arrays, *, out=None):
    _only(np.linalg.multi_dot, {"out": out}, out=None)
    result = arrays[0]
    for x in arrays[1:]:
        result = result @ x
    return result


def _vector_norm(x, ord, axis, keepdims):
    """Norms along ``axis`` (a tuple); 0 at x = 0 gets derivative 0 (see ``safe_sqrt``)."""
    if ord is None or ord == 2:
        sq = np.real(x * np.conj(x)) if np.iscomplexobj(primal(x)) else x * x
        return safe_sqrt(np.sum(sq, axis=axis, keepdims=keepdims))
    if ord == np.inf:
        return np.max(np.abs(x), axis=axis, keepdims=keepdims)
    if ord == -np.inf:
        return np.min(np.abs(x), axis=axis, keepdims=keepdims)
    if ord == 0:  # a count: piecewise constant
        return np.sum(primal(x) != 0, axis=axis, keepdims=keepdims).astype(np.result_type(primal(x).real, 1.0))
    if ord == 1:
        return np.sum(np.abs(x), axis=axis, keepdims=keepdims)
    if ord < 0:
        return np.sum(np.abs(x) ** ord, axis=axis, keepdims=keepdims) ** (1.0 / ord)
    ax = np.abs(x)
    nonzero = ax > 0  # |x|**p for p < 1 has an infinite slope at 0: mask it where the norm is 0
    total = np.sum(np.where(nonzero, np.where(nonzero, ax, 1) ** ord, 0), axis=axis, keepdims=keepdims)
    pos = total > 0
    return np.where(pos, np.where(pos, total, 1) ** (1.0 / ord), 0)


def _matrix_norm(x, ord, axes, keepdims):
    """Matrix norms over the two ``axes`` (row axis, column axis)."""
    row, col = axes
    if ord in (None, "fro"):
        return _vector_norm(x, None, axes, keepdims)
    if ord in (1, -1, np.inf, -np.inf):
        summed, over = (row, col) if ord in (1, -1) else (col, row)
        s = np.sum(np.abs(x), axis=summed, keepdims=True)
        pick = np.max if ord > 0 else np.min
        out = pick(s, axis=over, keepdims=True)
    elif ord in (2, -2, "nuc"):
        s = apply("svdvals", (np.moveaxis(x, (row, col), (-2, -1)),))
        out = np.sum(s, axis=-1) if ord == "nuc" else (np.max if ord == 2 else np.min)(s, axis=-1)
        out = np.expand_dims(out, (-2, -1))
        out = np.moveaxis(out, (-2, -1), (row, col))
    else:
        raise ValueError(f"invalid norm order {ord!r} for matrices")
    return out if keepdims else np.squeeze(out, axis=(row, col))


@implements(np.linalg.norm)
def _norm(x, ord=None, axis=None, keepdims=False):
    """``np.linalg.norm`` with every ``ord`` of numpy, composed from recorded ops."""
    nd = len(_shape(x))
    if axis is None:
        if ord is None:
            return _vector_norm(x, None, None, keepdims)
        axis = tuple(range(nd))
        if nd not in (1, 2):
            raise ValueError("improper number of dimensions to norm")
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = tuple(_axis(a, nd) for a in axes)
    if len(axes) == 1:
        if isinstance(ord, str):
            raise ValueError(f"invalid norm order {ord!r} for vectors")
        return _vector_norm(x, ord, axes, keepdims)
    if len(axes) == 2:
        return _matrix_norm(x, ord, axes, keepdims)
    raise ValueError("improper number of dimensions to norm")


@implements(np.linalg.vector_norm)
def _vector_norm_fn(x, /, *, axis=None, keepdims=False, ord=2):
    if axis is None:
        out = _vector_norm(np.reshape(x, -1), ord, (0,), False)
        return np.reshape(out, (1,) * len(_shape(x))) if keepdims else out
    axes = _norm_axis(axis, len(_shape(x)))
    return _vector_norm(x, ord, axes, keepdims)


@implements(np.linalg.matrix_norm)
def _matrix_norm_fn(x, /, *, keepdims=False, ord="fro"):
    nd = len(_shape(x))
    return _matrix_norm(x, ord, (nd - 2, nd - 1), keepdims)


FUNCTIONS[np.linalg.outer] = _outer
FUNCTIONS[np.linalg.tensordot] = lambda x1, x2, /, *, axes=2: _tensordot(x1, x2, axes)
FUNCTIONS[np.linalg.vecdot] = _vecdot
FUNCTIONS[np.linalg.cross] = lambda x1, x2, /, *, axis=-1: _cross(x1, x2, axis=axis)
FUNCTIONS[np.linalg.matmul] = lambda x1, x2, /: apply("matmul", (x1, x2))
FUNCTIONS[np.linalg.matrix_transpose] = lambda x, /: np.swapaxes(x, -1, -2)
FUNCTIONS[np.matrix_transpose] = lambda x, /: np.swapaxes(x, -1, -2)
