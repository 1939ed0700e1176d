"""Complex values on adcore.tape: autograd's and JAX's convention (the gradient of a real loss
for z = x + iy is dL/dx - i dL/dy), checked against finite differences of both parts."""
import numpy as np
import pytest

from adcore import tape
from test_tape_coverage import C, P, R, check, distinct

CASES = {
    "issue_real_of_shifted": (lambda a: np.sin(np.real(a + 1.0j)), R(3)),
    "imag_of_complex_product": (lambda a: np.imag(a * (2 - 1j)), R(3)),
    "add_mul_div": (lambda z, w: (z + w) * z / (w + 3), C(3, 2), C(2)),
    "real_imag_conj": (lambda z: np.real(z) * np.imag(z) + np.conj(z) * z.conj(), C(4)),
    "real_imag_attributes": (lambda z: z.real ** 2 - 3 * z.imag, C(4)),
    "abs": (np.abs, C(5)),
    "abs_squared": (lambda z: np.abs(z) ** 2, C(4)),
    "angle": (np.angle, C(5)),
    "angle_deg": (lambda z: np.angle(z, deg=True), C(3)),
    "angle_of_real": (lambda x: np.angle(x) + x, R(3)),
    "exp_log": (lambda z: np.exp(z) + np.log(z), C(4)),
    "sqrt_square_reciprocal": (lambda z: np.sqrt(z) + np.square(z) + np.reciprocal(z), C(4)),
    "trig": (lambda z: np.sin(z) * np.cos(z) + np.tan(z / 3), C(3)),
    "hyperbolic": (lambda z: np.sinh(z) + np.cosh(z) * np.tanh(z), C(3)),
    "inverse_trig": (lambda z: np.arcsin(z / 3) + np.arccos(z / 3) + np.arctan(z / 3), C(3)),
    "inverse_hyperbolic": (lambda z: np.arcsinh(z) + np.arccosh(z + 2) + np.arctanh(z / 3), C(3)),
    "log_family": (lambda z: np.log1p(z) + np.log2(z) + np.log10(z) + np.expm1(z) + np.exp2(z), C(3)),
    "power_real_exponent": (lambda z: z ** 2.5, C(4)),
    "power_complex_exponent": (lambda z, w: z ** w, C(3), C(3) / 3),
    "power_of_real_base": (lambda x, w: x ** w, P(3), C(3)),
    "matmul": (lambda a, b: a @ b, C(2, 3), C(3, 2)),
    "einsum": (lambda a, b: np.einsum("ij,jk->ki", a, b), C(2, 3), R(3, 2)),
    "sum_mean": (lambda z: np.sum(z, axis=0) * np.mean(z), C(3, 2)),
    "prod_cumsum_cumprod": (lambda z: np.prod(z) + np.cumsum(z) * np.cumprod(z), C(4)),
    "var_std": (lambda z: np.var(z, axis=0) + np.std(z), C(3, 2)),
    "norm": (lambda z: np.linalg.norm(z) + np.linalg.norm(z, 1) + np.linalg.norm(z, np.inf), C(4)),
    "vdot": (np.vdot, C(3), C(3)),
    "indexing_and_joining": (lambda z: np.concatenate([z[::-1], np.stack([z, z * 1j])[1]]), C(3)),
    "where": (lambda z, w: np.where(np.abs(z) > 1, z, w), C(4), C(4)),
    "astype_complex": (lambda x: x.astype(np.complex128) * (1 + 2j), R(3)),
    "astype_real": (lambda z: z.astype(np.float64), C(3)),
    "array_from_complex_values": (lambda z: np.array([z[0], z[1] * 1j]), C(2)),
    "complex_scalar_argument": (lambda z: z * z + 1, 1.5 - 0.5j),
    "inv_solve_det": (lambda a, b: np.linalg.inv(a) @ np.linalg.solve(a, b) * np.linalg.det(a), C(3, 3), C(3, 2)),
    "max_min_lexicographic": (lambda z: np.max(z) * np.min(z, axis=0), distinct(3, 2) + 1j * R(3, 2)),
    "real_if_close_not_close": (np.real_if_close, C(3)),
    "real_if_close_close": (lambda z: np.real_if_close(z * 0 + np.real(z)) * z, C(3)),
    "fft_free_dft": (lambda x: np.abs(np.exp(-2j * np.pi * np.outer(np.arange(4), np.arange(4)) / 4) @ x), R(4)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_complex_against_finite_differences(name):
    f, *args = CASES[name]
    check(f, *args)


def test_convention_matches_autograd_and_jax():
    """|z|^2 at 3 + 4i: dL/dx - i dL/dy = 6 - 8i; a holomorphic f (complex loss) gives f'(z)."""
    assert tape.gradient(lambda z: np.abs(z) ** 2, 3 + 4j)[0] == pytest.approx(6 - 8j)
    assert tape.gradient(lambda z: z ** 2, 1 + 2j)[0] == pytest.approx(2 + 4j)
    g, = tape.gradient(lambda z: np.sum(np.exp(z)), np.array([0.5j, 1 - 1j]))
    np.testing.assert_allclose(g, np.exp([0.5j, 1 - 1j]))
    assert type(tape.gradient(lambda z: np.abs(z), 1j)[0]) is complex


def test_gradient_of_a_complex_array_keeps_its_dtype():
    z = C(3).astype(np.complex64)
    g, = tape.gradient(lambda z: np.sum(np.abs(z)), z)
    assert g.dtype == np.complex64
    np.testing.assert_allclose(g, np.conj(z) / np.abs(z), rtol=1e-6)


def test_singular_points_of_complex_functions_give_zero():
    z = np.array([0j, 1 + 1j])
    g, = tape.gradient(lambda z: np.sum(np.abs(z) + np.angle(z)), z)
    assert g[0] == 0 and np.all(np.isfinite(g))
