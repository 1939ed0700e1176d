"""Rules for the BLAS calls Numba makes for ``np.dot``, ``@`` and ``np.linalg.norm`` (its
helpers ``numba_xxdot``, ``numba_xxgemv``, ``numba_xxgemm``, ``numba_xxnrm2``): the
reverse pass (and forward mode's tangents, computed just before the call) call the same
BLAS helpers again, so derivatives of matrix products run at BLAS speed.

The helpers take Fortran (column-major) matrices with leading dimensions; ``kind`` is
``'d'`` (float64) or ``'s'`` (float32); ``alpha`` and ``beta`` come by pointer and are
treated as constants.  Each reverse receives the C arguments (pointers as int64
addresses) followed by the shadow address of each pointer argument (0 when none).
The reverses and extents are compiled once per argument types and kept in Numba's own
cache (``cache=True``): a new process loads them instead of compiling them.
"""
import numba
import numpy as np
from numba.core import types

from .custom import carray, register_rule

DOUBLE = 100                       # 'd'
N, T = 110, 116                    # 'n', 't'

# Numba's C helper, called by its symbol (no address of this process in compiled code)
_gemm = types.ExternalFunction("numba_xxgemm", types.int32(types.int8, types.int8, types.int8,
                                                            *[types.int64] * 11))


@numba.njit
def _flip(t):
    return N if t == T else T


@numba.njit
def _scale(kind, address, rows, cols, ld, factor):
    """Column-major ``rows x cols`` matrix at ``address`` (leading dimension ``ld``) *= factor."""
    for j in range(cols):
        if kind == DOUBLE:
            col = carray(address + 8 * j * ld, rows, np.float64)
            for i in range(rows):
                col[i] *= factor
        else:
            col32 = carray(address + 4 * j * ld, rows, np.float32)
            for i in range(rows):
                col32[i] *= np.float32(factor)


@numba.njit
def _scalar(kind, address):
    if kind == DOUBLE:
        return carray(address, 1, np.float64)[0]
    return np.float64(carray(address, 1, np.float32)[0])


@numba.njit
def _gemm_update(kind, ta, tb, m, n, k, alpha, a, lda, b, ldb, c, ldc):
    """C += alpha op(A) op(B) (column-major) through BLAS."""
    if m == 0 or n == 0 or k == 0:
        return
    one = np.ones(1, np.float64)
    one32 = np.ones(1, np.float32)
    al64 = np.full(1, alpha)
    al32 = np.full(1, np.float32(alpha))
    if kind == DOUBLE:
        _gemm(kind, ta, tb, m, n, k, al64.ctypes.data, a, lda, b, ldb, one.ctypes.data, c, ldc)
    else:
        _gemm(kind, ta, tb, m, n, k, al32.ctypes.data, a, lda, b, ldb, one32.ctypes.data, c, ldc)


@numba.njit
def _gemm_adjoints(kind, ta, tb, m, n, k, al, a, b, dc, ldc, da, lda, db, ldb):
    """d op(A) += alpha dC op(B)^T (when da and b), d op(B) += alpha op(A)^T dC (when db and a)."""
    if da != 0 and b != 0:
        if ta == N:      # dA (m x k) += alpha dC op(B)^T
            _gemm_update(kind, N, _flip(tb), m, k, n, al, dc, ldc, b, ldb, da, lda)
        else:            # dA (k x m) += alpha op(B) dC^T
            _gemm_update(kind, tb, T, k, m, n, al, b, ldb, dc, ldc, da, lda)
    if db != 0 and a != 0:
        if tb == N:      # dB (k x n) += alpha op(A)^T dC
            _gemm_update(kind, _flip(ta), N, k, n, m, al, a, lda, dc, ldc, db, ldb)
        else:            # dB (n x k) += alpha dC^T op(A)
            _gemm_update(kind, T, ta, n, k, m, al, dc, ldc, a, lda, db, ldb)


@numba.njit(cache=True)
def xxgemm_reverse(kind, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                   dalpha, da, db, dbeta, dc):
    # C = alpha op(A) op(B) + beta C      d op(A) = alpha dC op(B)^T,  d op(B) = alpha op(A)^T dC,
    #                                     dC_old = beta dC
    if dc == 0:
        return
    _gemm_adjoints(kind, ta, tb, m, n, k, _scalar(kind, alpha), a, b, dc, ldc, da, lda, db, ldb)
    _scale(kind, dc, m, n, ldc, _scalar(kind, beta))


@numba.njit
def _gemv_adjoints(kind, trans, m, n, al, a, lda, x, dy, da, dx):
    """dx += alpha op(A)^T dy (when dx and a), dA += alpha dy x^T or x dy^T (when da and x)."""
    rows_out, rows_in = (m, n) if trans == N else (n, m)
    if dx != 0 and a != 0:          # as a matrix product with one column
        _gemm_update(kind, _flip(trans), N, rows_in, 1, rows_out, al, a, lda, dy, rows_out, dx, rows_in)
    if da != 0 and x != 0:
        if trans == N:   # dA += alpha dy x^T
            _gemm_update(kind, N, T, m, n, 1, al, dy, m, x, n, da, lda)
        else:            # dA += alpha x dy^T
            _gemm_update(kind, N, T, m, n, 1, al, x, m, dy, n, da, lda)


@numba.njit(cache=True)
def xxgemv_reverse(kind, trans, m, n, alpha, a, lda, x, beta, y, dalpha, da, dx, dbeta, dy):
    # y = alpha op(A) x + beta y          dx += alpha op(A)^T dy,  dA += alpha dy x^T (or x dy^T),
    #                                     dy_old = beta dy          (A is m x n)
    if dy == 0:
        return
    _gemv_adjoints(kind, trans, m, n, _scalar(kind, alpha), a, lda, x, dy, da, dx)
    rows_out = m if trans == N else n
    _scale(kind, dy, rows_out, 1, rows_out, _scalar(kind, beta))


@numba.njit
def _axpy(kind, n, factor, x, y, stride):
    """y += factor x, over n elements ``stride`` apart."""
    if kind == DOUBLE:
        xs, ys = carray(x, n * stride, np.float64), carray(y, n * stride, np.float64)
        for i in range(0, n * stride, stride):
            ys[i] += factor * xs[i]
    else:
        xs32, ys32 = carray(x, n * stride, np.float32), carray(y, n * stride, np.float32)
        for i in range(0, n * stride, stride):
            ys32[i] += np.float32(factor) * xs32[i]


@numba.njit
def _dot_adjoints(kind, n, g, x, y, dx, dy):
    """dx += g y (when dx and y), dy += g x (when dy and x)."""
    if dx != 0 and y != 0:
        _axpy(kind, n, g, y, dx, 1)
    if dy != 0 and x != 0:
        _axpy(kind, n, g, x, dy, 1)


@numba.njit(cache=True)
def xxdot_reverse(kind, conj, n, x, y, res, dx, dy, dres):
    # r = x . y                           dx += dr y,  dy += dr x
    if dres == 0:
        return
    g = _scalar(kind, dres)
    _scale(kind, dres, 1, 1, 1, 0.0)
    _dot_adjoints(kind, n, g, x, y, dx, dy)


@numba.njit(cache=True)
def xxnrm2_reverse(kind, n, x, incx, res, dx, dres):
    # r = |x|  (stride incx)              dx += dr x / r
    if dres == 0 or dx == 0:
        return
    g, r = _scalar(kind, dres), _scalar(kind, res)
    _scale(kind, dres, 1, 1, 1, 0.0)
    if r != 0.0:
        _axpy(kind, n, g / r, x, dx, incx)


# forward rules: called before the call with its arguments and the shadow addresses; they
# write the tangent of the output from the inputs' tangents
@numba.njit
def xxgemm_forward(kind, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                   dalpha, da, db, dbeta, dc):
    # C = alpha op(A) op(B) + beta C      dC = beta dC + alpha (op(dA) op(B) + op(A) op(dB))
    if dc == 0:
        return
    al = _scalar(kind, alpha)
    _scale(kind, dc, m, n, ldc, _scalar(kind, beta))
    if da != 0:
        _gemm_update(kind, ta, tb, m, n, k, al, da, lda, b, ldb, dc, ldc)
    if db != 0:
        _gemm_update(kind, ta, tb, m, n, k, al, a, lda, db, ldb, dc, ldc)


@numba.njit
def xxgemv_forward(kind, trans, m, n, alpha, a, lda, x, beta, y, dalpha, da, dx, dbeta, dy):
    # y = alpha op(A) x + beta y          dy = beta dy + alpha (op(dA) x + op(A) dx)
    if dy == 0:
        return
    rows_out, rows_in = (m, n) if trans == N else (n, m)
    al = _scalar(kind, alpha)
    _scale(kind, dy, rows_out, 1, rows_out, _scalar(kind, beta))
    if da != 0:          # as matrix products with one column
        _gemm_update(kind, trans, N, rows_out, 1, rows_in, al, da, lda, x, rows_in, dy, rows_out)
    if dx != 0:
        _gemm_update(kind, trans, N, rows_out, 1, rows_in, al, a, lda, dx, rows_in, dy, rows_out)


@numba.njit
def _inner(kind, n, x, y, stride):
    """sum_i x[i s] y[i s] in float64."""
    total = 0.0
    if kind == DOUBLE:
        xs, ys = carray(x, n * stride, np.float64), carray(y, n * stride, np.float64)
        for i in range(n):
            total += xs[i * stride] * ys[i * stride]
    else:
        xs32, ys32 = carray(x, n * stride, np.float32), carray(y, n * stride, np.float32)
        for i in range(n):
            total += np.float64(xs32[i * stride]) * np.float64(ys32[i * stride])
    return total


@numba.njit
def _store(kind, address, value):
    if kind == DOUBLE:
        carray(address, 1, np.float64)[0] = value
    else:
        carray(address, 1, np.float32)[0] = np.float32(value)


@numba.njit
def xxdot_forward(kind, conj, n, x, y, res, dx, dy, dres):
    # r = x . y                           dr = dx . y + x . dy
    if dres == 0:
        return
    total = 0.0
    if dx != 0:
        total += _inner(kind, n, dx, y, 1)
    if dy != 0:
        total += _inner(kind, n, x, dy, 1)
    _store(kind, dres, total)


@numba.njit
def xxnrm2_forward(kind, n, x, incx, res, dx, dres):
    # r = |x|  (stride incx)              dr = x . dx / r   (0 where r = 0)
    if dres == 0:
        return
    r = np.sqrt(_inner(kind, n, x, x, incx)) if n > 0 else 0.0
    _store(kind, dres, 0.0 if dx == 0 or r == 0.0 else _inner(kind, n, x, dx, incx) / r)


# tangents of the reverses (hvp: forward mode over a gradient), called just before the
# reverse with its arguments, then the tangent address of each pointer argument and of
# each shadow; alpha and beta are constants.  The reverses are bilinear in (primal operand,
# shadow), so each tangent is the reverse's own update applied twice: once to the shadow's
# tangent, once to the operands' tangents.
@numba.njit
def xxgemm_reverse_tangent(kind, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                           dalpha, da, db, dbeta, dc, talpha, t_a, t_b, tbeta, tc,
                           tdalpha, tda, tdb, tdbeta, tdc):
    # t(d op(A)) += alpha (t(dC) op(B)^T + dC op(tB)^T),  t(d op(B)) += alpha (op(tA)^T dC + op(A)^T t(dC)),
    # t(dC_old) = beta t(dC)
    if dc == 0:
        return
    al = _scalar(kind, alpha)
    if tdc != 0:
        _gemm_adjoints(kind, ta, tb, m, n, k, al, a, b, tdc, ldc, tda, lda, tdb, ldb)
    _gemm_adjoints(kind, ta, tb, m, n, k, al, t_a, t_b, dc, ldc, tda, lda, tdb, ldb)
    if tdc != 0:
        _scale(kind, tdc, m, n, ldc, _scalar(kind, beta))


@numba.njit
def xxgemv_reverse_tangent(kind, trans, m, n, alpha, a, lda, x, beta, y, dalpha, da, dx, dbeta, dy,
                           talpha, t_a, t_x, tbeta, ty, tdalpha, tda, tdx, tdbeta, tdy):
    # t(dx) += alpha (op(tA)^T dy + op(A)^T t(dy)),  t(dA) += alpha (t(dy) x^T + dy tx^T),  t(dy_old) = beta t(dy)
    if dy == 0:
        return
    al = _scalar(kind, alpha)
    if tdy != 0:
        _gemv_adjoints(kind, trans, m, n, al, a, lda, x, tdy, tda, tdx)
    _gemv_adjoints(kind, trans, m, n, al, t_a, lda, t_x, dy, tda, tdx)
    if tdy != 0:
        rows_out = m if trans == N else n
        _scale(kind, tdy, rows_out, 1, rows_out, _scalar(kind, beta))


@numba.njit
def xxdot_reverse_tangent(kind, conj, n, x, y, res, dx, dy, dres, tx, ty, tres, tdx, tdy, tdres):
    # t(dx) += t(dr) y + dr ty,  t(dy) += t(dr) x + dr tx,  t(dr) = 0
    if dres == 0:
        return
    if tdres != 0:
        tg = _scalar(kind, tdres)
        _scale(kind, tdres, 1, 1, 1, 0.0)
        _dot_adjoints(kind, n, tg, x, y, tdx, tdy)
    _dot_adjoints(kind, n, _scalar(kind, dres), tx, ty, tdx, tdy)


@numba.njit
def xxnrm2_reverse_tangent(kind, n, x, incx, res, dx, dres, tx, tres, tdx, tdres):
    # dx += dr x / r:  t(dx) += (t(dr) x + dr tx) / r - dr x (x . tx) / r^3,  t(dr) = 0
    if dres == 0 or dx == 0:
        return
    g, r = _scalar(kind, dres), _scalar(kind, res)
    tg = 0.0
    if tdres != 0:
        tg = _scalar(kind, tdres)
        _scale(kind, tdres, 1, 1, 1, 0.0)
    if r == 0.0 or tdx == 0:
        return
    rdot = _inner(kind, n, x, tx, incx) / r if tx != 0 else 0.0
    _axpy(kind, n, tg / r - g * rdot / (r * r), x, tdx, incx)
    if tx != 0:
        _axpy(kind, n, g / r, tx, tdx, incx)


# extents(*C arguments): the bytes each pointer argument's operand spans (0: not read
# back), so that an operand the kernel overwrites after the call can be copied first
@numba.njit
def _size(kind):
    return 8 if kind == DOUBLE else 4


@numba.njit
def _span(rows, cols, ld):
    """Elements a column-major rows x cols matrix with leading dimension ld spans."""
    return 0 if rows == 0 or cols == 0 else (cols - 1) * ld + rows


@numba.njit(cache=True)
def xxdot_extents(kind, conj, n, x, y, res):
    return n * _size(kind), n * _size(kind), 0


@numba.njit(cache=True)
def xxnrm2_extents(kind, n, x, incx, res):
    return ((n - 1) * incx + 1) * _size(kind) if n > 0 else 0, 0


@numba.njit(cache=True)
def xxgemv_extents(kind, trans, m, n, alpha, a, lda, x, beta, y):
    rows_in = n if trans == N else m
    return 0, _span(m, n, lda) * _size(kind), rows_in * _size(kind), 0, 0


@numba.njit(cache=True)
def xxgemm_extents(kind, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
    span_a = _span(m, k, lda) if ta == N else _span(k, m, lda)
    span_b = _span(k, n, ldb) if tb == N else _span(n, k, ldb)
    return 0, span_a * _size(kind), span_b * _size(kind), 0, 0


register_rule("numba_xxdot", xxdot_reverse, outputs=(5,), extents=xxdot_extents,        # writes *res
              forward=xxdot_forward, reverse_tangent=xxdot_reverse_tangent)
register_rule("numba_xxnrm2", xxnrm2_reverse, outputs=(4,), extents=xxnrm2_extents,     # writes *res
              forward=xxnrm2_forward, reverse_tangent=xxnrm2_reverse_tangent)
register_rule("numba_xxgemv", xxgemv_reverse, outputs=(9,), extents=xxgemv_extents,     # writes y
              forward=xxgemv_forward, reverse_tangent=xxgemv_reverse_tangent)
register_rule("numba_xxgemm", xxgemm_reverse, outputs=(12,), extents=xxgemm_extents,    # writes c
              forward=xxgemm_forward, reverse_tangent=xxgemm_reverse_tangent)
