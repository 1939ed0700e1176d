"""Rules of ``einsum`` and ``np.linalg`` (stacked matrices: the last two axes, batches broadcast).

Notation: ``A^T`` swaps the last two axes, ``<X, Y> = sum X * Y`` (no conjugate: see the
complex convention in ``rules``).  Holomorphic rules (einsum, inv, solve, det, slogdet
of a real matrix) are ``complex_ok``; the decompositions are real only.  Ops with several
outputs (``eigh``, ``eig``, ``svd``) record one packed value, the outputs flattened over
their matrix axes and concatenated on the last axis; ``numpy_linalg`` unpacks it with
recorded indexing, so the rule receives the cotangent of the packed value.
"""
import numpy as np

from .recording import unbroadcast
from .rules import rule
from .rules_scan import _products_of_others


def _T(x):
    return np.swapaxes(x, -1, -2)


def _diag(v):
    """A stack of diagonal matrices from a stack of vectors."""
    return v[..., :, None] * np.eye(v.shape[-1], dtype=v.dtype)


def _off_diagonal_inverse(d):
    """F_ij = 1 / (d_j - d_i) off the diagonal, 0 on it (d: a stack of vectors)."""
    diff = d[..., None, :] - d[..., :, None]
    eye = np.eye(d.shape[-1], dtype=bool)
    return np.where(eye, 0, 1 / np.where(eye, 1, diff))


def _tril_gradient(G, lower):
    """Cotangent of A for f(S) with S the symmetric matrix read from A's lower (upper) triangle,
    given a cotangent G of S:  dA_ij = G_ij + G_ji below (above) the diagonal, G_ii on it."""
    sym = G + _T(G)
    tri = np.tril(sym, -1) if lower else np.triu(sym, 1)
    return tri + _diag(np.diagonal(G, axis1=-2, axis2=-1))


# ---------------------------------------------------------------- einsum

def einsum_forward(*operands, subscripts, optimize=False):
    return np.einsum(subscripts, *operands, optimize=optimize)


@rule("einsum", einsum_forward, complex_ok=True)
def _einsum(g, r):
    """out = einsum(s_1,...,s_n -> o):  dx_k = einsum(o, s_j (j != k) -> s_k) with g in place of
    x_k; letters only in s_k are broadcast, repeated letters of s_k fill its diagonal."""
    ins, out = r.attrs["subscripts"].split("->")
    ins = ins.split(",")
    optimize = r.attrs.get("optimize", False)
    grads = []
    for k, (sub, x) in enumerate(zip(ins, r.args)):
        if r.inputs[k] is None:
            grads.append(None)
            continue
        others = [(s, o) for j, (s, o) in enumerate(zip(ins, r.args)) if j != k]
        letters = "".join(dict.fromkeys(sub))
        reached = set(out).union(*(s for s, _ in others))
        target = "".join(c for c in letters if c in reached)
        spec = ",".join([out] + [s for s, _ in others]) + "->" + target
        gk = np.einsum(spec, g, *(o for _, o in others), optimize=optimize)
        size = dict(zip(sub, np.shape(x)))
        gk = gk.reshape([gk.shape[target.index(c)] if c in target else 1 for c in letters])
        gk = np.broadcast_to(gk, [max(n, size[c]) for n, c in zip(gk.shape, letters)])
        gk = unbroadcast(gk, tuple(size[c] for c in letters))
        if len(letters) < len(sub):
            full = np.zeros(np.shape(x), gk.dtype)
            full[tuple(np.arange(size[c]).reshape([-1 if c == d else 1 for d in letters]) for c in sub)] = gk
            gk = full
        grads.append(gk)
    return tuple(grads)


# ---------------------------------------------------------------- inverse, solve, determinants

@rule("inv", np.linalg.inv, complex_ok=True)
def _inv(g, r):
    """X = A^-1:  dA = -X^T g X^T."""
    X = r.value
    return (-_T(X) @ g @ _T(X),)


@rule("solve", np.linalg.solve, complex_ok=True)
def _solve(g, r):
    """X = A^-1 B (B a stack of matrices):  dB = A^-T g,  dA = -dB X^T."""
    A = r.args[0]
    gB = np.linalg.solve(_T(A), g)
    gA = -gB @ _T(r.value) if r.inputs[0] is not None else None
    return gA, gB


def _adjugate_T(A):
    """adj(A)^T = det(A) A^-T, also for singular A (from the SVD A = U S V^T:
    adj(A)^T = det(U) det(V) U diag(prod_{j != i} s_j) V^T)."""
    U, s, Vh = np.linalg.svd(A)
    others = _products_of_others(s, (s.ndim - 1,))
    sign = np.linalg.det(U) * np.linalg.det(Vh)
    return sign[..., None, None] * (U * others[..., None, :]) @ Vh


@rule("det", np.linalg.det, complex_ok=True)
def _det(g, r):
    """d = det A:  dA = g adj(A)^T  (= g d A^-T when d != 0)."""
    A, d = r.args[0], r.value
    if np.all(d != 0):
        return (np.asarray(g * d)[..., None, None] * _T(np.linalg.inv(A)),)
    return (np.asarray(g)[..., None, None] * _adjugate_T(A),)


def logabsdet_forward(A):
    return np.linalg.slogdet(A)[1]


@rule("slogdet", logabsdet_forward)
def _slogdet(g, r):
    """l = log |det A|:  dA = g A^-T."""
    return (np.asarray(g)[..., None, None] * _T(np.linalg.inv(r.args[0])),)


@rule("pinv", lambda A, rcond=None: np.linalg.pinv(A) if rcond is None else np.linalg.pinv(A, rcond))
def _pinv(g, r):
    """X = A^+ (constant rank):  dA = -X^T g X^T + (I - A X) g^T X X^T + X^T X g^T (I - X A)."""
    A, X = r.args[0], r.value
    gT = _T(g)
    eye_m, eye_n = np.eye(A.shape[-2], dtype=X.dtype), np.eye(A.shape[-1], dtype=X.dtype)
    return (-_T(X) @ g @ _T(X) + (eye_m - A @ X) @ gT @ X @ _T(X)
            + _T(X) @ X @ gT @ (eye_n - X @ A),)


# ---------------------------------------------------------------- decompositions (real)

@rule("cholesky", np.linalg.cholesky)
def _cholesky(g, r):
    """A = L L^T (L read from A's lower triangle):  P = L^-T Phi(L^T g) L^-1 with Phi the lower
    triangle and half the diagonal;  dA = lower-triangle gradient of P."""
    L = r.value
    M = _T(L) @ g
    phi = np.tril(M, -1) + 0.5 * _diag(np.diagonal(M, axis1=-2, axis2=-1))
    Linv = np.linalg.inv(L)
    return (_tril_gradient(_T(Linv) @ phi @ Linv, lower=True),)


def eigh_forward(A, UPLO="L"):
    w, V = np.linalg.eigh(A, UPLO=UPLO)
    return np.concatenate([w, V.reshape(V.shape[:-2] + (-1,))], axis=-1)


@rule("eigh", eigh_forward)
def _eigh(g, r):
    """A = V diag(w) V^T (symmetric, from one triangle):  G = V (diag(gw) + F o (V^T gV)) V^T,
    F_ij = 1 / (w_j - w_i) (0 on the diagonal);  dA = triangle gradient of G."""
    n = r.args[0].shape[-1]
    w, V = r.value[..., :n], r.value[..., n:].reshape(r.value.shape[:-1] + (n, n))
    gw, gV = g[..., :n], g[..., n:].reshape(g.shape[:-1] + (n, n))
    G = V @ (_diag(gw) + _off_diagonal_inverse(w) * (_T(V) @ gV)) @ _T(V)
    return (_tril_gradient(G, lower=r.attrs.get("UPLO", "L") == "L"),)


def eig_forward(A):
    w, V = np.linalg.eig(A)
    return np.concatenate([w, V.reshape(V.shape[:-2] + (-1,))], axis=-1)


@rule("eig", eig_forward, complex_ok=True)
def _eig(g, r):
    """A V = V diag(w), columns of V of unit 2-norm (phase as numpy gives it):
    dA = V^-T (diag(gw) + F o (V^T gV - (V^H V)^T diag(Re(V^T gV)))) V^T,  F as in eigh.
    Right for losses that do not depend on the eigenvectors' phases."""
    n = r.args[0].shape[-1]
    w, V = r.value[..., :n], r.value[..., n:].reshape(r.value.shape[:-1] + (n, n))
    gw, gV = g[..., :n], g[..., n:].reshape(g.shape[:-1] + (n, n))
    VtgV = _T(V) @ gV
    norm_fix = _T(np.conj(_T(V)) @ V) * np.real(np.diagonal(VtgV, axis1=-2, axis2=-1))[..., None, :]
    G = _diag(gw) + _off_diagonal_inverse(w) * (VtgV - norm_fix)
    return (np.linalg.solve(_T(V), G @ _T(V)),)


def svd_forward(A):
    U, s, Vh = np.linalg.svd(A, full_matrices=False)
    flat = U.shape[:-2] + (-1,)
    return np.concatenate([U.reshape(flat), s, Vh.reshape(flat)], axis=-1)


@rule("svd", svd_forward)
def _svd(g, r):
    """A = U diag(s) V^T (reduced):  dA = U [(F o (U^T gU - gU^T U)) S + diag(gs)
    + S (F o (V^T gV - gV^T V))] V^T + (I - U U^T) gU S^-1 V^T + U S^-1 gV^T (I - V V^T),
    F_ij = 1 / (s_j**2 - s_i**2) (0 on the diagonal); distinct nonzero singular values."""
    m, n = r.args[0].shape[-2:]
    k = min(m, n)
    batch = r.value.shape[:-1]

    def split(p):
        return (p[..., :m * k].reshape(batch + (m, k)), p[..., m * k:m * k + k],
                _T(p[..., m * k + k:].reshape(batch + (k, n))))
    U, s, V = split(r.value)
    gU, gs, gV = split(g)
    F = _off_diagonal_inverse(s * s)
    S, Sinv = _diag(s), _diag(1 / s)
    core = ((F * (_T(U) @ gU - _T(gU) @ U)) @ S + _diag(gs) + S @ (F * (_T(V) @ gV - _T(gV) @ V)))
    gA = U @ core @ _T(V)
    if m > k:
        gA = gA + (gU - U @ (_T(U) @ gU)) @ Sinv @ _T(V)
    if n > k:
        gA = gA + U @ Sinv @ (_T(gV) - (_T(gV) @ V) @ _T(V))
    return (gA,)


@rule("svdvals", lambda A: np.linalg.svd(A, compute_uv=False))
def _svdvals(g, r):
    """s = singular values of A:  dA = U diag(gs) V^T."""
    U, _, Vh = np.linalg.svd(r.args[0], full_matrices=False)
    return ((U * g[..., None, :]) @ Vh,)
