"""Rules for the BLAS calls Numba makes for ``np.dot`` and ``@`` (its helpers
``numba_xxdot``, ``numba_xxgemv``, ``numba_xxgemm``): the reverse pass calls BLAS again.

The helpers take Fortran (column-major) matrices: an ``R x C`` matrix with leading
dimension ``L`` is viewed here as the transpose of a row-major ``C x L`` array.
The scalars ``alpha`` and ``beta`` (passed by pointer) are treated as constants.
"""
import numba
import numpy as np

from .custom_rules import carray, register_rule

DOUBLE, SINGLE, NO_TRANSPOSE = 100, 115, 110          # 'd', 's', 'n'


@numba.njit
def _vector(address, n, z):
    """A view of ``n`` elements of z's type at ``address`` (empty when 0)."""
    return carray(address, n if address else 0, z)


@numba.njit
def _matrix(address, rows, cols, ld, z):
    """The column-major ``rows x cols`` matrix with leading dimension ``ld`` at ``address``."""
    return carray(address, cols * ld, z).reshape((cols, ld))[:, :rows].T


@numba.njit
def _dot_reverse(x, y, dx, dy, dres):
    # r = x . y                          dx += dr y,  dy += dr x
    if dres.size == 0:
        return
    g = dres[0]
    dres[0] = 0.0
    if dx.size:
        dx += g * y
    if dy.size:
        dy += g * x


def _with_kind(body):
    """Run ``body`` for float64 (kind 'd') or float32 (kind 's') data."""
    @numba.njit
    def dispatch(kind, *args):
        if kind == DOUBLE:
            body(np.float64(0.0), *args)
        elif kind == SINGLE:
            body(np.float32(0.0), *args)
    return dispatch


@numba.njit
def _dot_body(z, n, x, y, res, dx, dy, dres):
    _dot_reverse(_vector(x, n, z), _vector(y, n, z), _vector(dx, n, z), _vector(dy, n, z),
                 _vector(dres, 1, z))


@numba.njit
def _gemv_body(z, trans, m, n, alpha, a, lda, x, beta, y, da, dx, dy):
    # y = alpha op(A) x + beta y         dx += alpha op(A)^T dy,  dA += alpha dy x^T (or x dy^T),
    #                                    dy_old = beta dy
    if dy == 0:
        return
    rows_out, rows_in = (m, n) if trans == NO_TRANSPOSE else (n, m)
    A = _matrix(a, m, n, lda, z)
    al, be = _vector(alpha, 1, z)[0], _vector(beta, 1, z)[0]
    xv, g = _vector(x, rows_in, z), _vector(dy, rows_out, z)
    opA = A if trans == NO_TRANSPOSE else A.T
    if dx:
        dxv = _vector(dx, rows_in, z)
        dxv += al * np.dot(opA.T, np.ascontiguousarray(g))
    if da:
        dA = _matrix(da, m, n, lda, z)
        if trans == NO_TRANSPOSE:
            dA += al * np.outer(g, xv)
        else:
            dA += al * np.outer(xv, g)
    g *= be


@numba.njit
def _gemm_body(z, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, da, db, dc):
    # C = alpha op(A) op(B) + beta C     d op(A) = alpha dC op(B)^T,  d op(B) = alpha op(A)^T dC,
    #                                    dC_old = beta dC
    if dc == 0:
        return
    A = _matrix(a, m, k, lda, z) if ta == NO_TRANSPOSE else _matrix(a, k, m, lda, z).T
    B = _matrix(b, k, n, ldb, z) if tb == NO_TRANSPOSE else _matrix(b, n, k, ldb, z).T
    al, be = _vector(alpha, 1, z)[0], _vector(beta, 1, z)[0]
    dC = _matrix(dc, m, n, ldc, z)
    G = np.ascontiguousarray(dC)
    if da:
        dA = _matrix(da, m, k, lda, z) if ta == NO_TRANSPOSE else _matrix(da, k, m, lda, z).T
        dA += al * np.dot(G, np.ascontiguousarray(B.T))
    if db:
        dB = _matrix(db, k, n, ldb, z) if tb == NO_TRANSPOSE else _matrix(db, n, k, ldb, z).T
        dB += al * np.dot(np.ascontiguousarray(A.T), G)
    dC *= be


_dot = _with_kind(_dot_body)
_gemv = _with_kind(_gemv_body)
_gemm = _with_kind(_gemm_body)


# reverse(*C arguments, *shadow address of each pointer argument)
@numba.njit
def xxdot_reverse(kind, conj, n, x, y, res, dx, dy, dres):
    _dot(kind, n, x, y, res, dx, dy, dres)


@numba.njit
def xxgemv_reverse(kind, trans, m, n, alpha, a, lda, x, beta, y, dalpha, da, dx, dbeta, dy):
    _gemv(kind, trans, m, n, alpha, a, lda, x, beta, y, da, dx, dy)


@numba.njit
def xxgemm_reverse(kind, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                   dalpha, da, db, dbeta, dc):
    _gemm(kind, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, da, db, dc)


register_rule("numba_xxdot", xxdot_reverse, outputs=(5,))        # writes *res
register_rule("numba_xxgemv", xxgemv_reverse, outputs=(9,))       # writes y
register_rule("numba_xxgemm", xxgemm_reverse, outputs=(12,))      # writes c
