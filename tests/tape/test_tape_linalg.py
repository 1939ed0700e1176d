"""np.linalg on adcore.tape against numpy's values and central finite differences.

Decompositions are checked through losses that do not depend on the free choices of the
decomposition (signs or phases of singular vectors and eigenvectors: their squares or moduli);
eigh and cholesky read one triangle of their argument, so their exact derivative is zero on
the other one, and the finite differences see that too."""
import numpy as np
import pytest

from adcore import UnsupportedError, tape
from test_tape_coverage import C, R, check

rng = np.random.default_rng(11)


def spd(n, *batch):
    a = rng.standard_normal(batch + (n, n))
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


def sym(n):
    a = rng.standard_normal((n, n))
    return a + a.T


def eigh_parts(a, **kw):
    w, v = np.linalg.eigh(a, **kw)
    return w, v ** 2


def eig_parts(a):
    w, v = np.linalg.eig(a)
    return w, np.abs(v) ** 2


def svd_parts(a):
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return u ** 2, s, vh ** 2


CASES = {
    "inv": (np.linalg.inv, R(3, 3)),
    "inv_batched": (np.linalg.inv, R(2, 3, 3)),
    "solve_matrix": (np.linalg.solve, R(3, 3), R(3, 2)),
    "solve_vector": (np.linalg.solve, R(3, 3), R(3)),
    "solve_batched": (np.linalg.solve, R(2, 3, 3), R(2, 3, 1)),
    "solve_const_matrix": (lambda b: np.linalg.solve(np.diag([1.0, 2.0, 3.0]) + 0.1, b), R(3, 2)),
    "det": (np.linalg.det, R(3, 3)),
    "det_batched": (np.linalg.det, R(2, 2, 2)),
    "det_singular": (lambda a: np.linalg.det(a * np.array([1.0, 1.0, 0.0])), R(3, 3)),
    "det_rank_one": (lambda u: np.linalg.det(np.outer(u, u) + np.diag([0.0, 0.0, 1.0])), R(3)),
    "slogdet": (lambda a: np.linalg.slogdet(a)[1], R(3, 3)),
    "slogdet_batched_sign_times": (lambda a: np.linalg.slogdet(a).logabsdet * np.linalg.slogdet(a).sign, R(2, 3, 3)),
    "pinv_tall": (np.linalg.pinv, R(4, 2)),
    "pinv_wide": (np.linalg.pinv, R(2, 3)),
    "pinv_square_batched": (np.linalg.pinv, R(2, 3, 3)),
    "cholesky": (np.linalg.cholesky, spd(3)),
    "cholesky_batched_upper": (lambda a: np.linalg.cholesky(a, upper=True), spd(3, 2)),
    "eigh": (eigh_parts, sym(4)),
    "eigh_upper": (lambda a: eigh_parts(a, UPLO="U"), sym(3)),
    "eigvalsh": (np.linalg.eigvalsh, sym(3)),
    "eig_complex_spectrum": (eig_parts, R(4, 4)),
    "eig_real_spectrum": (eig_parts, sym(3) + 0.1 * np.triu(R(3, 3))),
    "eig_complex_matrix": (eig_parts, C(3, 3)),
    "eigvals": (np.linalg.eigvals, R(3, 3)),
    "svd_square": (svd_parts, R(3, 3)),
    "svd_tall": (svd_parts, R(4, 2)),
    "svd_wide_batched": (svd_parts, R(2, 2, 3)),
    "svd_values": (lambda a: np.linalg.svd(a, compute_uv=False), R(3, 4)),
    "svdvals": (np.linalg.svdvals, R(4, 3)),
    "svd_reconstruction": (lambda a: np.linalg.svd(a, full_matrices=False)[0] @ np.diag(np.linalg.svd(a)[1]), R(3, 3)),
    "matrix_power": (lambda a: np.linalg.matrix_power(a, 3), R(3, 3)),
    "matrix_power_negative": (lambda a: np.linalg.matrix_power(a, -2), R(2, 2) + 2 * np.eye(2)),
    "matrix_power_zero": (lambda a: np.linalg.matrix_power(a, 0) + a, R(2, 2)),
    "multi_dot": (lambda a, b, c: np.linalg.multi_dot([a, b, c]), R(3), R(3, 4), R(4, 2)),
    "linalg_aliases": (lambda a, b: np.linalg.matmul(a, b) + np.linalg.outer(a[0], b[:, 0])
                       + np.linalg.matrix_transpose(a) + np.linalg.trace(a) + np.linalg.diagonal(a)[:, None], R(3, 3), R(3, 3)),
    "linalg_cross_vecdot_tensordot": (lambda a, b: np.linalg.cross(a, b) * np.linalg.vecdot(a, b)[:, None]
                                      + np.linalg.tensordot(a, b, axes=1), R(3, 3), R(3, 3)),
    "vector_norm": (lambda x: np.linalg.vector_norm(x, ord=3, axis=0, keepdims=True), R(3, 2)),
    "vector_norm_all": (lambda x: np.linalg.vector_norm(x, keepdims=True), R(3, 2)),
    "matrix_norm": (lambda x: np.linalg.matrix_norm(x, ord="nuc"), R(2, 3, 3)),
}
VECTOR_ORDS = [None, 2, 1, -1, np.inf, -np.inf, 0, 3, 0.5, -2]
MATRIX_ORDS = [None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf]
for _o in VECTOR_ORDS:
    CASES[f"norm_vector_{_o}"] = (lambda x, o=_o: np.linalg.norm(x, o), R(5))
    CASES[f"norm_vector_axis_{_o}"] = (lambda x, o=_o: np.linalg.norm(x, o, axis=0, keepdims=True), R(4, 3))
for _o in MATRIX_ORDS:
    CASES[f"norm_matrix_{_o}"] = (lambda x, o=_o: np.linalg.norm(x, o), R(3, 4))
    CASES[f"norm_matrix_axes_{_o}"] = (lambda x, o=_o: np.linalg.norm(x, o, axis=(2, 0), keepdims=True), R(3, 2, 4))


@pytest.mark.parametrize("name", sorted(CASES))
def test_linalg_against_finite_differences(name):
    f, *args = CASES[name]
    check(f, *args, rtol=1e-4, atol=1e-6)


def test_norms_at_zero_have_derivative_zero():
    """The kink of every norm at 0: the minimum-norm subgradient, 0, never nan."""
    for o in VECTOR_ORDS:
        if o is None or o > 0:
            g, = tape.gradient(lambda x: np.linalg.norm(x, o), np.zeros(3))
            np.testing.assert_array_equal(g, 0.0)
    for o in ("fro", None, 1, np.inf):
        g, = tape.gradient(lambda x: np.linalg.norm(x, o), np.zeros((2, 2)))
        np.testing.assert_array_equal(g, 0.0)


def test_det_of_a_singular_matrix_is_the_adjugate():
    a = np.array([[1.0, 2.0], [2.0, 4.0]])
    g, = tape.gradient(np.linalg.det, a)
    np.testing.assert_allclose(g, [[4.0, -2.0], [-2.0, 1.0]], atol=1e-12)


def test_decompositions_refuse_what_they_cannot_differentiate():
    with pytest.raises(UnsupportedError, match="full_matrices=True"):
        tape.gradient(lambda a: np.sum(np.linalg.svd(a)[0]), R(3, 2))
    with pytest.raises(UnsupportedError, match="complex"):
        tape.gradient(lambda a: np.real(np.sum(np.linalg.pinv(a))), C(2, 2))  # eigh/svd: test_tape_complex_linalg
    with pytest.raises(UnsupportedError, match="hermitian"):
        tape.gradient(lambda a: np.sum(np.linalg.pinv(a, hermitian=True)), sym(2))
