"""The cases of HIPS autograd's first-order tests that adcore.tape used to refuse, against
numpy's values and central finite differences (tests/test_tape_coverage.check: complex
arguments by differences of their real and imaginary parts):

(a) arrays built from tracked values (autograd's test_numpy: test_1d_array ... test_min_3_way_equality;
    test_linalg/test_numpy: norm, mean, std, var of lists of boxes) and assignment into plain arrays
    (refused, as autograd's test_graphs.test_assignment_raises_error);
(b) svd, eigh and norms of complex matrices (test_linalg: losses of |U|, s, |V|, of w and |v|: the
    phases of complex singular vectors and eigenvectors are arbitrary, so a loss depending on them
    is refused, as are eigenvector derivatives at repeated eigenvalues);
(c) max/min of complex values (numpy's lexicographic order; test_systematic's stat_check);
(d) np.real_if_close (test_systematic.test_real_ic).
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from adcore import UnsupportedError, tape
from test_tape_coverage import C, R, check

SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
rng = np.random.default_rng(23)


def CM(*shape):
    """A complex matrix as autograd's tests draw it: randn + 1j randn."""
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


# ---------------------------------------------------------------- (a) arrays from tracked values

ARRAYS = {
    "1d_array": (lambda x: np.array([x, x * 1.0, x + 2.5]), 3.0),
    "2d_array": (lambda x: np.array([[x, x * 1.0, x + 2.5], [x ** 2, x, x / 2.0]]), 3.0),
    "1d_array_fanout": (lambda x: (lambda a: a + a)(np.array([x, x * 1.0, x + 2.5])), 3.0),
    "array_from_scalar": (lambda x: np.array(x), 3.0),
    "array_from_arrays": (lambda x: np.array([x, x]), R(3, 2)),
    "array_from_arrays_2": (lambda x: np.array([[2 * x, x + 1], [x, x]]), R(3, 2)),
    "asarray_of_scalars": (lambda x: np.asarray([x, x * x, 1.5]), 0.7),
    "asarray_complex": (lambda z: np.asarray([z, z * z, 1.5]), 0.7 - 0.2j),
    "array_dtype_complex": (lambda x: np.array([x, 2 * x], dtype=np.complex128) * (1 - 1j), 0.7),
    "max_equal_values": (lambda x: np.max(np.array([x, x])), 1.0),
    "max_equal_values_2d": (lambda x: np.max(np.array([[x, x], [x, 0.5]]), axis=1), 1.0),
    "max_equal_values_2d_negative": (lambda x: np.max(np.array([[x, x], [x, 0.5]]), axis=1), -1.0),
    "min_3_way_equality": (lambda x: np.min(np.array([[x, x, x], [x, 0.5, 0.5], [0.5, 0.5, 0.5],
                                                      [x, x, 0.5]]), axis=0), 1.0),
    "maximum_equal_values_2d": (lambda x: np.maximum(np.array([x, x, 0.5]),
                                                     np.array([[x, 0.5, x], [x, x, 0.5]])), 2.0),
    "mean_list": (lambda x: np.mean([x, x + 2]), 0.3),
    "mean_tuple": (lambda x: np.mean((x, x + 2)), 0.3),
    "std_list": (lambda x: np.std([x, 3 * x + 2]), 0.3),
    "var_tuple": (lambda x: np.var((x, 3 * x + 2)), 0.3),
    "norm_list": (lambda x: np.linalg.norm([x, x + 2]), 0.3),
    "norm_tuple_of_arrays": (lambda x: np.linalg.norm((x, 2 * x), axis=1), R(3)),
    "sum_prod_max_min_of_lists": (lambda x: np.sum([x, x * x]) + np.prod((x, 3.0)) + np.max([x, 1.0])
                                  + np.min([x, -1.0]) + np.amax((x, 0.1)) + np.amin([x, 2.0]), 0.4),
    "setitem_on_a_tracked_buffer": (lambda x: (lambda a: (a.__setitem__(0, x), a)[1])(np.zeros(3) * x), 0.8),
}


@pytest.mark.parametrize("name", sorted(ARRAYS))
def test_arrays_from_tracked_values(name):
    f, *args = ARRAYS[name]
    check(f, *args, rtol=1e-5, atol=1e-6)


def test_list_of_boxes_values_as_autograd():
    """autograd's test_norm_list_of_boxes, test_mean/std/var_list_of_boxes."""
    assert tape.gradient(lambda x: np.linalg.norm([x, x + 2]), 0.0) == (1.0,)
    assert tape.gradient(lambda x: np.linalg.norm((x, x + 2)), 0.0) == (1.0,)
    assert tape.gradient(lambda x: np.mean([x, x + 2]), 0.0) == (1.0,)
    for f in ("std", "var"):
        assert tape.gradient(lambda x: getattr(np, f)([x, x + 2]), 0.0) == (0.0,)
        assert tape.gradient(lambda x: getattr(np, f)((x, x + 2)), 0.0) == (0.0,)


def test_wrapped_functions_are_put_back():
    originals = (np.sum, np.mean, np.linalg.norm, np.array)
    tape.gradient(lambda x: np.sum([x, x]) + np.linalg.norm(np.array([x])), 1.0)
    assert (np.sum, np.mean, np.linalg.norm, np.array) == originals


def test_assignment_into_a_plain_array_is_refused():
    """autograd raises too (test_assignment_raises_error); the tape names the reason."""
    def scalar_into_plain(x):
        a = np.zeros(3)
        a[0] = x
        return np.sum(a)

    def array_into_plain(x):
        a = np.zeros((2, 2))
        a[0] = x
        return np.sum(a)

    def into_argument(a, b):
        a[1] = b
        return np.sum(a)

    with pytest.raises((UnsupportedError, ValueError)) as err:  # numpy raises ValueError for a scalar
        tape.gradient(scalar_into_plain, 1.5)
    cause = err.value if isinstance(err.value, UnsupportedError) else err.value.__cause__
    assert isinstance(cause, UnsupportedError) and "a[i] = x" in str(cause)
    with pytest.raises(UnsupportedError, match="assignment into a plain array"):
        tape.gradient(array_into_plain, np.ones(2))
    with pytest.raises(UnsupportedError, match="in-place update"):
        tape.gradient(into_argument, R(5), 3.0)


def test_object_arrays_and_unsupported_lists_are_refused():
    with pytest.raises(UnsupportedError, match="dtype=object"):
        tape.gradient(lambda x: np.sum(np.array([x, x], dtype=object)), 1.5)
    with pytest.raises(UnsupportedError, match="a list holding tracked values"):
        tape.gradient(lambda x: np.sum(np.exp([x, 1.0])), 1.5)


# ---------------------------------------------------------------- (b) complex svd, eigh, norms

def svd_moduli(a):
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return np.abs(u), s, np.abs(vh)


def eigh_moduli(a, uplo="L"):
    w, v = np.linalg.eigh(a, uplo)
    return w, np.abs(v)


def hermitian_product(a):
    """A loss of the eigenvectors that no phase changes: the matrix V diag(w**2) V^H."""
    w, v = np.linalg.eigh(a)
    return (v * w ** 2) @ np.conj(v).T


LINALG = {
    "svd_wide_2d_complex": (svd_moduli, CM(3, 5)),
    "svd_wide_3d_complex": (svd_moduli, CM(2, 3, 4)),
    "svd_square_2d_complex": (svd_moduli, CM(4, 4)),
    "svd_square_3d_complex": (svd_moduli, CM(2, 3, 3)),
    "svd_tall_2d_complex": (svd_moduli, CM(5, 3)),
    "svd_tall_3d_complex": (svd_moduli, CM(2, 4, 2)),
    "svd_only_s_complex": (lambda a: np.linalg.svd(a, full_matrices=False, compute_uv=False), CM(5, 3)),
    "svd_only_s_3d_complex": (lambda a: np.linalg.svd(a, compute_uv=False), CM(2, 4, 3)),
    "svdvals_complex": (np.linalg.svdvals, CM(3, 4)),
    "svd_reconstruction_complex": (lambda a: (lambda u, s, vh: (u * s) @ vh)(*np.linalg.svd(a, full_matrices=False)),
                                   CM(3, 2)),
    "svd_projector_complex": (lambda a: (lambda u: u @ np.conj(u).T)(np.linalg.svd(a, full_matrices=False)[0]),
                              CM(4, 2)),
    "eigh_lower_complex": (eigh_moduli, CM(4, 4)),
    "eigh_upper_complex": (lambda a: eigh_moduli(a, "U"), CM(4, 4)),
    "eigh_batched_complex": (eigh_moduli, CM(2, 3, 3)),
    "eigvalsh_complex": (np.linalg.eigvalsh, CM(3, 3)),
    "eigh_hermitian_product": (hermitian_product, CM(3, 3)),
    "eigh_real_still": (eigh_moduli, R(3, 3)),
    "vector_2norm_complex": (np.linalg.norm, CM(6)),
    "frobenius_norm_complex": (np.linalg.norm, CM(4, 3)),
    "norm_axis_complex": (lambda x: np.linalg.norm(x, axis=1), CM(3, 4, 2)),
    "norm_nuclear_complex": (lambda x: np.linalg.norm(x, ord="nuc"), CM(4, 3)),
    "norm_nuclear_axis_complex": (lambda x: np.linalg.norm(x, ord="nuc", axis=(0, 1)), CM(4, 3, 2)),
    "norm_2_and_minus_2_complex": (lambda x: np.linalg.norm(x, 2) * np.linalg.norm(x, -2), CM(3, 4)),
    "matrix_norm_complex": (lambda x: np.linalg.matrix_norm(x, ord=2), CM(2, 3, 3)),
}


@pytest.mark.parametrize("name", sorted(LINALG))
def test_complex_linalg_against_finite_differences(name):
    f, *args = LINALG[name]
    check(f, *args, rtol=1e-4, atol=1e-6)


def test_complex_decompositions_keep_numpy_types():
    a = CM(3, 2)
    u, s, vh = tape.primal(tape.record(lambda a: np.linalg.svd(a, full_matrices=False), a).out)
    assert s.dtype == np.float64 and u.dtype == vh.dtype == np.complex128
    w, v = tape.primal(tape.record(np.linalg.eigh, a[:2] @ np.conj(a[:2]).T).out)
    assert w.dtype == np.float64 and v.dtype == np.complex128


def test_phase_dependent_losses_are_refused():
    """The phase of a complex singular vector or eigenvector is numpy's arbitrary choice."""
    with pytest.raises(UnsupportedError, match="phases of the singular vectors"):
        tape.gradient(lambda a: np.sum(np.real(np.linalg.svd(a, full_matrices=False)[0])), CM(3, 3))
    with pytest.raises(UnsupportedError, match="phases of the singular vectors"):
        tape.gradient(lambda a: np.sum(np.imag(np.linalg.svd(a, full_matrices=False)[2])), CM(2, 3))
    with pytest.raises(UnsupportedError, match="phases of the eigenvectors"):
        tape.gradient(lambda a: np.sum(np.real(np.linalg.eigh(a)[1])), CM(3, 3))


def test_repeated_values_are_refused_only_for_the_vectors():
    eye = np.eye(3)
    with pytest.raises(UnsupportedError, match="repeated values"):
        tape.gradient(lambda a: np.sum(np.linalg.eigh(a)[1] ** 2 * np.arange(3.0)), eye)
    with pytest.raises(UnsupportedError, match="repeated values"):
        tape.gradient(lambda a: np.sum(np.abs(np.linalg.eigh(a)[1]) * np.arange(3.0)), eye + 0j)
    with pytest.raises(UnsupportedError, match="repeated values"):
        tape.gradient(lambda a: np.sum(np.linalg.svd(a)[0] ** 2 * np.arange(2.0)), 2 * np.eye(2))
    # the values alone are differentiable there (autograd's convention)
    g, = tape.gradient(lambda a: np.sum(np.linalg.eigh(a)[0] * np.arange(3.0)), eye)
    assert np.all(np.isfinite(g)) and np.isclose(np.trace(g), 3.0)
    g, = tape.gradient(lambda a: np.sum(np.linalg.svd(a)[1]), 2 * np.eye(2) + 0j)
    np.testing.assert_allclose(g, np.eye(2), atol=1e-12)


def test_zero_singular_value_of_a_tall_matrix_is_refused():
    a = CM(3, 1) @ CM(1, 2)  # rank 1: one singular value is 0
    with pytest.raises(UnsupportedError, match="zero singular value"):
        tape.gradient(lambda a: np.sum(np.abs(np.linalg.svd(a, full_matrices=False)[0])), a)


@st.composite
def complex_matrices(draw, square=False):
    m = draw(st.integers(1, 3))
    n = m if square else draw(st.integers(1, 3))
    batch = tuple(draw(st.lists(st.integers(1, 2), max_size=1)))
    r = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    return r.standard_normal(batch + (m, n)) + 1j * r.standard_normal(batch + (m, n))


@SETTINGS
@given(complex_matrices())
def test_svd_of_random_complex_matrices(a):
    s = np.linalg.svd(a, compute_uv=False)
    k = s.shape[-1]
    assume(np.min(s) > 0.2 and (k < 2 or np.min(np.abs(np.diff(s ** 2, axis=-1))) > 0.2))
    check(svd_moduli, a, rtol=1e-4, atol=1e-6)


@SETTINGS
@given(complex_matrices(square=True), st.sampled_from(["L", "U"]))
def test_eigh_of_random_complex_matrices(a, uplo):
    w = np.linalg.eigvalsh(a, uplo)
    assume(w.shape[-1] < 2 or np.min(np.diff(w, axis=-1)) > 0.2)
    check(lambda a: eigh_moduli(a, uplo), a, rtol=1e-4, atol=1e-6)


@SETTINGS
@given(complex_matrices(), st.sampled_from([None, "fro", "nuc", 2, -2, 1, np.inf]))
def test_matrix_norms_of_random_complex_matrices(a, order):
    s = np.linalg.svd(a, compute_uv=False)
    assume(order not in (2, -2) or s.shape[-1] < 2 or np.min(np.abs(np.diff(s, axis=-1))) > 0.2)
    assume(order not in ("nuc", -2) or np.min(s) > 0.2)
    check(lambda a: np.linalg.norm(a, order, axis=(-2, -1)), a, rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------- (c) complex max and min

def Z(*shape):
    """Complex values without ties of real parts (test_tape_coverage.R repeats 0.37)."""
    return rng.uniform(-2, 2, shape) + 1j * rng.uniform(-2, 2, shape)


def stat(name, axis=None, keepdims=False):
    return lambda z: getattr(np, name)(z, axis=axis, keepdims=keepdims)


EXTREMA = {
    "max_complex": (stat("max"), Z(2, 3)),
    "min_complex": (stat("min"), Z(2, 3)),
    "amax_axis_complex": (stat("amax", 0), Z(2, 3)),
    "amin_axis_keepdims_complex": (stat("amin", 1, True), Z(2, 3)),
    "max_complex_scalar": (stat("max"), 0.3 + 0.1j),
    "methods_complex": (lambda z: z.max(axis=0) + z.min(), Z(3, 2)),
    "real_parts_tie_elsewhere": (stat("max"), np.array([1 + 2j, 1 - 1j, 3 + 0.5j, -2 + 0j])),
    "equal_values_share_the_cotangent": (stat("min", 0), np.array([[1 - 1j, 2j], [1 - 1j, 3 + 0j]])),
    "maximum_minimum_complex": (lambda z, w: np.maximum(z, w) * np.minimum(z, 0.5 + 0j), Z(4), Z(4)),
    "maximum_reduce_complex": (lambda z: np.maximum.reduce(z, axis=1), Z(2, 3)),
}


@pytest.mark.parametrize("name", sorted(EXTREMA))
def test_complex_extrema_against_finite_differences(name):
    f, *args = EXTREMA[name]
    check(f, *args)


def test_complex_ties_of_real_parts_are_refused():
    """Equal real parts, different imaginary parts: numpy's choice jumps (no derivative)."""
    z = np.array([1 + 2j, 3 - 1j, 3 + 0.5j])
    for f in (np.max, lambda z: np.amin(-z), lambda z: np.max(z, axis=0, keepdims=True)):
        with pytest.raises(UnsupportedError, match="tie of their real parts"):
            tape.gradient(lambda z: np.sum(np.real(f(z))), z)
    with pytest.raises(UnsupportedError, match="tie of their real parts"):
        tape.gradient(lambda z, w: np.sum(np.real(np.maximum(z, w))), z, z + 1j)
    with pytest.raises(UnsupportedError, match="tie of their real parts"):
        tape.gradient(lambda z: np.sum(np.real(np.minimum(z, 3 + 0j))), z)


def test_complex_max_picks_numpy_s_element():
    z = np.array([1 + 5j, 2 - 1j, 2.5 + 1j])
    g, = tape.gradient(lambda z: np.real(np.max(z) * (1 - 2j)), z)
    np.testing.assert_array_equal(g, [0, 0, 1 - 2j])


@SETTINGS
@given(st.data())
def test_complex_extrema_with_random_axes(data):
    shape = tuple(data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))
    r = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    z = r.uniform(-2, 2, shape) + 1j * r.uniform(-2, 2, shape)
    name = data.draw(st.sampled_from(["max", "min", "amax", "amin"]))
    axis = data.draw(st.sampled_from([None] + list(range(-len(shape), len(shape)))))
    check(stat(name, axis, data.draw(st.booleans())), z)


# ---------------------------------------------------------------- (d) real_if_close

def test_real_if_close_branches():
    check(np.real_if_close, R(3, 2))                          # real: the identity
    check(np.real_if_close, C(3, 2))                          # not close: the identity
    # close: the real part (finite differences of the imaginary part leave that branch, so the
    # cotangent is checked directly: autograd's convention, the cotangent passed to z)
    z = R(3) + 1e-17j
    out = tape.primal(tape.record(np.real_if_close, z).out)
    assert out.dtype == np.float64
    g, = tape.gradient(lambda z: np.sum(np.real_if_close(z) * np.arange(3.0)), z)
    assert g.dtype == np.complex128
    np.testing.assert_array_equal(g, np.arange(3.0) + 0j)   # dz = g: the real part's cotangent


@SETTINGS
@given(st.data())
def test_real_if_close_random(data):
    shape = tuple(data.draw(st.lists(st.integers(1, 3), max_size=2)))
    r = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    x = r.uniform(-2, 2, shape)
    kind = data.draw(st.sampled_from(["real", "complex"]))
    z = x if kind == "real" else x + 1j * r.uniform(0.1, 1.0, shape)
    check(lambda a: np.real_if_close(a) ** 2, z)
