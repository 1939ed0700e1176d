"""Rules of ``einsum`` and ``np.linalg`` (stacked matrices: the last two axes, batches broadcast).

Notation: ``A^T`` swaps the last two axes, ``<X, Y> = sum X * Y`` (no conjugate: see the
complex convention in ``rules``).  Holomorphic rules (einsum, inv, solve, det, slogdet
of a real matrix) are ``complex_ok``, and so are ``eigh``, ``svd`` and ``svdvals`` (Hermitian and
complex matrices, ``A^H = conj(A)^T``); the other decompositions are real only.  Ops with several
outputs (``eigh``, ``eig``, ``svd``) record one packed value, the outputs flattened over
their matrix axes and concatenated on the last axis; ``numpy_linalg`` unpacks it with
recorded indexing, so the rule receives the cotangent of the packed value.
"""
import numpy as np

from ..errors import UnsupportedError
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
    """Cotangent of A for f(S) with S the symmetric (Hermitian) matrix read from A's lower
    (upper) triangle, given a cotangent G of S:  dA_ij = G_ij + conj(G_ji) below (above) the
    diagonal, Re G_ii on it (S_ii = Re A_ii: LAPACK ignores the imaginary part there)."""
    sym = G + np.conj(_T(G))
    tri = np.tril(sym, -1) if lower else np.triu(sym, 1)
    diag = np.diagonal(G, axis1=-2, axis2=-1)
    return tri + _diag(np.real(diag).astype(G.dtype) if np.iscomplexobj(G) else diag)


def _refuse_degenerate(values, what):
    """Refuse a derivative through the vectors of ``values`` (eigenvalues, or squared singular
    values) that repeat: there the vectors are not unique and their derivative is undefined."""
    n = values.shape[-1]
    if n < 2:
        return
    v = np.sort(values, axis=-1)
    gap = np.min(np.diff(v, axis=-1))
    scale = np.max(np.abs(v))
    if not gap > 10 * n * np.finfo(v.dtype).eps * scale:
        raise UnsupportedError(
            f"the {what} at repeated values (a gap of {gap:.3g})",
            detail="the vectors of a repeated value are not unique, so their derivative is undefined; "
                   "a loss of the values alone, or of the projector onto the whole subspace written "
                   "without the decomposition, is differentiable")


def _refuse_phase_dependence(phase_cotangent, scale, what):
    """Complex vectors are defined up to a phase each (numpy's choice is arbitrary): a loss is
    differentiable only if it does not depend on them, i.e. when the cotangent of those phases,
    ``phase_cotangent`` (the imaginary parts of the relevant diagonal), is zero."""
    if np.any(np.abs(phase_cotangent) > 1e-8 * scale):
        raise UnsupportedError(
            f"a loss that depends on the phases of the {what}",
            detail="numpy picks each complex vector's phase arbitrarily, so the derivative would "
                   "depend on that choice; use quantities that do not (|v|, v v^H, the values), as "
                   "HIPS autograd's tests do")


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


@rule("eigh", eigh_forward, complex_ok=True)
def _eigh(g, r):
    """A = V diag(w) V^H (Hermitian, from one triangle; w real):  G = conj(V) (diag(gw) +
    F o (V^T gV)) V^T, F_ij = 1 / (w_j - w_i) (0 on the diagonal);  dA = triangle gradient of G.
    The eigenvector term needs distinct eigenvalues and, for complex A, a loss that does not
    depend on the eigenvectors' phases (Im diag(V^T gV) = 0); else ``UnsupportedError``."""
    n = r.args[0].shape[-1]
    w, V = r.value[..., :n], r.value[..., n:].reshape(r.value.shape[:-1] + (n, n))
    gw, gV = g[..., :n], g[..., n:].reshape(g.shape[:-1] + (n, n))
    K = _diag(np.real(gw).astype(V.dtype) if np.iscomplexobj(gw) else gw)
    if np.any(gV):  # as autograd: values alone stay differentiable at repeated eigenvalues
        w = np.real(w)
        _refuse_degenerate(w, "eigenvectors of numpy.linalg.eigh")
        VtgV = _T(V) @ gV
        if np.iscomplexobj(VtgV):
            _refuse_phase_dependence(np.imag(np.diagonal(VtgV, axis1=-2, axis2=-1)),
                                     np.max(np.abs(VtgV)), "eigenvectors of numpy.linalg.eigh")
        K = K + _off_diagonal_inverse(w) * VtgV
    G = np.conj(V) @ K @ _T(V)
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


@rule("svd", svd_forward, complex_ok=True)
def _svd(g, r):
    """A = U diag(s) V^H (reduced; s real, V = Vh^H), with Gu = U^T gU, Gv = V^T gV (gV = gVh^H):
    dA = conj(U) [(F o (Gu - Gu^H)) S + diag(gs) + S (F o (Gv - Gv^H)) + i diag(Im Gu) S^-1] V^T
    + (gU - conj(U) Gu) S^-1 V^T + conj(U) S^-1 gVh (I - Vh^T conj(Vh)),  F_ij = 1 / (s_j**2 -
    s_i**2) (0 on the diagonal); the last two terms for tall and wide A.  The singular-vector
    terms need distinct nonzero singular values and, for complex A, a loss that does not depend
    on the vectors' common phases (Im diag(Gu + Gv) = 0); else ``UnsupportedError``."""
    m, n = r.args[0].shape[-2:]
    k = min(m, n)
    batch = r.value.shape[:-1]

    def split(p):
        return (p[..., :m * k].reshape(batch + (m, k)), p[..., m * k:m * k + k],
                p[..., m * k + k:].reshape(batch + (k, n)))
    U, s, Vh = split(r.value)
    gU, gs, gVh = split(g)
    s = np.real(s)
    gA = np.conj(U) @ _diag(np.real(gs).astype(U.dtype)) @ np.conj(Vh)
    if not (np.any(gU) or np.any(gVh)):  # as autograd: values alone need no distinct values
        return (gA,)
    _refuse_degenerate(s * s, "singular vectors of numpy.linalg.svd")
    V, gV = np.conj(_T(Vh)), np.conj(_T(gVh))
    Gu, Gv = _T(U) @ gU, _T(V) @ gV
    complex_ = np.iscomplexobj(U)
    tall_or_wide = m > k or n > k
    if complex_ or tall_or_wide:
        if not np.min(s) > max(m, n) * np.finfo(s.dtype).eps * np.max(s):
            raise UnsupportedError("the singular vectors of numpy.linalg.svd at a zero singular value",
                                   detail="there they are not unique, so their derivative is undefined")
    F = _off_diagonal_inverse(s * s)
    S, Sinv = _diag(s), _diag(1 / s)
    core = (F * (Gu - np.conj(_T(Gu)))) @ S + S @ (F * (Gv - np.conj(_T(Gv))))
    if complex_:
        du, dv = np.diagonal(Gu, axis1=-2, axis2=-1), np.diagonal(Gv, axis1=-2, axis2=-1)
        _refuse_phase_dependence(np.imag(du + dv), np.max(np.abs(Gu)) + np.max(np.abs(Gv)),
                                 "singular vectors of numpy.linalg.svd")
        core = core + _diag(1j * np.imag(du) / s)
    gA = gA + np.conj(U) @ core @ _T(V)
    if m > k:
        gA = gA + (gU - np.conj(U) @ Gu) @ Sinv @ _T(V)
    if n > k:
        gA = gA + np.conj(U) @ Sinv @ (gVh - (gVh @ _T(Vh)) @ np.conj(Vh))
    return (gA,)


@rule("svdvals", lambda A: np.linalg.svd(A, compute_uv=False), complex_ok=True)
def _svdvals(g, r):
    """s = singular values of A = U diag(s) V^H:  dA = conj(U) diag(gs) conj(V^H)."""
    U, _, Vh = np.linalg.svd(r.args[0], full_matrices=False)
    return ((np.conj(U) * np.real(g)[..., None, :]) @ np.conj(Vh),)
