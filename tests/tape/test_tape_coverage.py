"""numpy coverage of adcore.tape: every function against numpy's own values and against central
finite differences (complex arguments: differences of their real and imaginary parts)."""
import numpy as np
import pytest

from adcore import tape

EPS = 1e-6


def _outputs(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def projection(f, *args, seed=0):
    """A real loss sum(Re f * W + Im f * V) with fixed random W, V over all of f's outputs."""
    rng = np.random.default_rng(seed)
    weights = [(rng.standard_normal(np.shape(o)), rng.standard_normal(np.shape(o)) if np.iscomplexobj(o) else None)
               for o in _outputs(f(*args))]

    def loss(*a):
        total = 0.0
        for o, (w, v) in zip(_outputs(f(*a)), weights):
            total = total + (np.sum(np.real(o) * w) + np.sum(np.imag(o) * v) if v is not None else np.sum(o * w))
        return total
    return loss


def fd_gradient(loss, args, k):
    """Central differences of the real ``loss`` w.r.t. ``args[k]``: dL/dx - i dL/dy for complex."""
    x = np.array(args[k])
    parts = (1.0, 1j) if np.iscomplexobj(x) else (1.0,)
    g = np.zeros(x.shape, x.dtype)
    for i in np.ndindex(x.shape):
        for unit in parts:
            old = x[i]
            x[i] = old + EPS * unit
            hi = float(loss(*args[:k], x.copy() if x.ndim else x[()], *args[k + 1:]))
            x[i] = old - EPS * unit
            lo = float(loss(*args[:k], x.copy() if x.ndim else x[()], *args[k + 1:]))
            x[i] = old
            g[i] += (hi - lo) / (2 * EPS) * np.conj(unit)
    return g if x.ndim else g[()]


def check(f, *args, rtol=1e-5, atol=1e-6, seed=0):
    """f on tracked arguments gives numpy's values, and tape.gradient of a random projection of
    f agrees with central differences for every float or complex argument."""
    expected = _outputs(f(*args))
    got = _outputs(tape.primal(tape.record(f, *args).out))
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert np.shape(g) == np.shape(e) and np.result_type(g) == np.result_type(e)
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)
    loss = projection(f, *args, seed=seed)
    grads = tape.gradient(loss, *args)
    for k, (a, g) in enumerate(zip(args, grads)):
        if np.result_type(a).kind in "fc" and not isinstance(a, (int, bool)):
            assert np.shape(g) == np.shape(a) and np.result_type(g) == np.result_type(a), k
            np.testing.assert_allclose(g, fd_gradient(loss, args, k), rtol=rtol, atol=atol,
                                       err_msg=f"argument {k}")
        else:
            assert g is None, k


rng = np.random.default_rng(3)


def R(*shape):
    """Standard normal values kept away from 0."""
    x = rng.standard_normal(shape)
    return np.where(np.abs(x) < 0.1, 0.37, x)


def U(*shape):
    return rng.uniform(-0.9, 0.9, shape)


def P(*shape):
    return rng.uniform(0.5, 2.0, shape)


def C(*shape):
    return R(*shape) + 1j * R(*shape)


def distinct(*shape):
    """Values with distinct gaps along every axis (sort, partition, max without ties)."""
    return rng.permutation(np.prod(shape, dtype=int)).reshape(shape) * 0.37 + R(*shape) * 0.05


def idx(a):
    return tape.primal(a)


CASES = {
    # elementwise
    "arcsin": (np.arcsin, U(5)),
    "arccos": (np.arccos, U(5)),
    "arcsinh": (np.arcsinh, R(5)),
    "arccosh": (np.arccosh, 1.5 + P(5)),
    "arctanh": (np.arctanh, U(5)),
    "arctan2": (np.arctan2, R(3, 4), R(4)),
    "arctan2_quadrants": (np.arctan2, np.array([1.0, 1.0, -1.0, -1.0]), np.array([1.0, -1.0, 1.0, -1.0])),
    "hypot": (np.hypot, R(3, 4), R(3, 1)),
    "deg2rad": (np.deg2rad, R(4)),
    "radians": (np.radians, R(4)),
    "rad2deg": (np.rad2deg, R(4)),
    "degrees": (np.degrees, R(4)),
    "remainder": (np.remainder, 5 * U(6), np.array([0.7, -0.9, 1.3, -1.1, 0.8, 2.1])),
    "mod_operator": (lambda a, b: a % b, 5 * U(6), 1.3),
    "rmod_operator": (lambda b: 2.5 % b, P(4)),
    "fmod": (np.fmod, 5 * U(6), np.array([0.7, -0.9, 1.3, -1.1, 0.8, 2.1])),
    "fmax": (np.fmax, R(3, 4), np.array([0.2, np.nan, -0.3, 0.1])),
    "fmin": (np.fmin, R(3, 4), R(4)),
    "fmax_nan_first": (np.fmax, np.array([np.nan, 1.0]), np.array([0.5, 0.25])),
    "logaddexp2": (np.logaddexp2, R(3, 4), R(4)),
    "sinc": (np.sinc, R(6)),
    "cbrt": (np.cbrt, R(5)),
    "float_power": (np.float_power, P(4), R(4)),
    "fabs": (np.fabs, R(5)),
    "nan_to_num": (lambda a: np.nan_to_num(a, posinf=3.0, neginf=-2.0), np.array([0.3, np.inf, np.nan, -np.inf])),
    "nan_to_num_default": (lambda a: np.nan_to_num(a) * 1e-300, np.array([0.3, np.inf, np.nan, -np.inf])),
    "floordiv_is_constant": (lambda a: a // 0.3 + a, R(5)),
    "divmod": (lambda a: divmod(a, 0.7)[1], 3 * R(5)),
    # reductions and running products
    "prod_all": (np.prod, R(3, 4)),
    "prod_axis": (lambda a: np.prod(a, axis=1), R(3, 4)),
    "prod_axes_keep": (lambda a: a.prod(axis=(0, 2), keepdims=True), R(2, 3, 2)),
    "prod_with_zero": (lambda a: np.prod(a * np.array([1.0, 0.0, 1.0])), R(3)),
    "prod_with_two_zeros": (lambda a: np.prod(a * np.array([[0.0], [0.0], [1.0]]), axis=0), R(3, 2)),
    "multiply_reduce": (lambda a: np.multiply.reduce(a, axis=0), R(3, 2)),
    "cumsum": (lambda a: np.cumsum(a, axis=1), R(3, 4)),
    "cumsum_flat": (np.cumsum, R(3, 4)),
    "cumsum_method": (lambda a: a.cumsum(axis=0), R(3, 4)),
    "add_accumulate": (lambda a: np.add.accumulate(a, axis=1), R(3, 4)),
    "cumprod": (lambda a: np.cumprod(a, axis=0), R(4, 3)),
    "cumprod_zero": (lambda a: np.cumprod(a * np.array([1.0, 1.0, 0.0, 1.0, 0.0])), R(5)),
    "multiply_accumulate": (lambda a: np.multiply.accumulate(a), R(4)),
    "nansum": (lambda a: np.nansum(a, axis=0), np.array([[1.0, np.nan], [0.5, 2.0], [np.nan, np.nan]])),
    "nanmean": (lambda a: np.nanmean(a, axis=1, keepdims=True), np.array([[1.0, np.nan, 3.0], [0.5, 2.0, -1.0]])),
    "std_keepdims": (lambda a: np.std(a, axis=0, keepdims=True), R(3, 4)),
    "add_outer": (lambda a, b: np.add.outer(a, b), R(3), R(2, 2)),
    "multiply_outer": (lambda a, b: np.multiply.outer(a, b), R(3), R(4)),
    # building arrays from tracked values
    "array_of_scalars": (lambda a: np.array([a[0], a[1] + 1, 2.0]), R(3)),
    "array_nested": (lambda a: np.array([[a[0], 1.0], [a[1] * a[2], a[0]]]), R(3)),
    "array_of_rows": (lambda a: np.array((a[0], a[1] * 2)), R(2, 3)),
    "array_copy": (lambda a: np.array(a) * 2, R(3)),
    "array_dtype_ndmin": (lambda a: np.array(a, dtype=np.complex128, ndmin=3), R(2)),
    "asarray": (lambda a: np.asarray(a) + np.asarray([a[0], a[1]]), R(2)),
    "asanyarray_list": (lambda a: np.asanyarray([a, a * a]), R(3)),
    "ascontiguousarray": (lambda a: np.ascontiguousarray(a.T), R(2, 3)),
    "r_": (lambda a: np.r_[a, 1.0, a[:2] * 3], R(3)),
    "r_directive": (lambda a: np.r_["0,2", a, a], R(3)),
    "c_": (lambda a: np.c_[a, np.ones(3), a * a], R(3)),
    "concatenate_mixed": (lambda a: np.concatenate([a, [1.0, 2.0], np.zeros(1)]), R(3)),
    # stacking, splitting
    "vstack": (lambda a, b: np.vstack([a, b, np.ones(3)]), R(3), R(2, 3)),
    "hstack": (lambda a, b: np.hstack((a, b)), R(2, 3), R(2, 1)),
    "hstack_1d": (lambda a: np.hstack([a, a[:1]]), R(3)),
    "dstack": (lambda a, b: np.dstack([a, b]), R(2, 3), R(2, 3)),
    "column_stack": (lambda a, b: np.column_stack([a, b]), R(3), R(3, 2)),
    "atleast_1d": (lambda a: np.atleast_1d(a), 0.7),
    "atleast_2d": (lambda a, b: np.atleast_2d(a, b)[0] + np.atleast_2d(a, b)[1][0], R(3), R(1, 3)),
    "atleast_3d": (lambda a, b: np.atleast_3d(a) * np.atleast_3d(b).sum(), R(3), R(2, 3)),
    "split": (lambda a: np.split(a, 2, axis=1)[1] * np.split(a, [1], axis=1)[0], R(3, 4)),
    "array_split": (lambda a: np.array_split(a, 3)[2], R(7)),
    "hsplit": (lambda a: np.hsplit(a, 2)[0], R(2, 4)),
    "vsplit": (lambda a: np.vsplit(a, [1])[1], R(3, 2)),
    "dsplit": (lambda a: np.dsplit(a, 2)[1], R(2, 2, 4)),
    "append": (lambda a, b: np.append(a, b), R(2, 2), R(3)),
    "append_axis": (lambda a, b: np.append(a, b, axis=0), R(2, 2), R(1, 2)),
    # order and shape
    "sort": (np.sort, distinct(3, 4)),
    "sort_axis0": (lambda a: np.sort(a, axis=0), distinct(3, 4)),
    "sort_flat": (lambda a: np.sort(a, axis=None), distinct(3, 4)),
    "partition": (lambda a: np.partition(a, 2, axis=1), distinct(3, 5)),
    "take_along_axis": (lambda a: np.take_along_axis(a, np.argsort(idx(a), axis=0), axis=0), distinct(3, 4)),
    "take_along_axis_bcast": (lambda a: np.take_along_axis(a, np.array([[2, 0]]), axis=1), R(3, 4)),
    "flip": (lambda a: np.flip(a, axis=(0, 2)), R(2, 3, 2)),
    "flip_all": (np.flip, R(2, 3)),
    "fliplr": (np.fliplr, R(2, 3)),
    "flipud": (np.flipud, R(2, 3)),
    "roll": (lambda a: np.roll(a, 2, axis=1), R(3, 4)),
    "roll_flat": (lambda a: np.roll(a, -5), R(3, 4)),
    "roll_axes": (lambda a: np.roll(a, (1, -1), axis=(0, 1)), R(3, 4)),
    "rollaxis": (lambda a: np.rollaxis(a, 2, 0), R(2, 3, 4)),
    "rollaxis_start": (lambda a: np.rollaxis(a, 0, 3), R(2, 3, 4)),
    "rot90": (np.rot90, R(2, 3)),
    "rot90_k2": (lambda a: np.rot90(a, 2), R(2, 3)),
    "rot90_k3_axes": (lambda a: np.rot90(a, -1, axes=(1, 2)), R(2, 3, 4)),
    "repeat": (lambda a: np.repeat(a, 2), R(2, 3)),
    "repeat_axis": (lambda a: np.repeat(a, [1, 0, 3], axis=1), R(2, 3)),
    "repeat_method": (lambda a: a.repeat(2, axis=0), R(2, 3)),
    "tile": (lambda a: np.tile(a, 2), R(2, 3)),
    "tile_more_dims": (lambda a: np.tile(a, (2, 1, 3)), R(2, 3)),
    "pad_constant": (lambda a: np.pad(a, ((1, 2), (0, 1)), constant_values=0.5), R(2, 3)),
    "pad_edge": (lambda a: np.pad(a, 2, mode="edge"), R(2, 3)),
    "pad_reflect": (lambda a: np.pad(a, (1, 2), mode="reflect"), R(3, 4)),
    "pad_symmetric": (lambda a: np.pad(a, 2, mode="symmetric"), R(3)),
    "pad_wrap": (lambda a: np.pad(a, ((0, 1), (3, 0)), mode="wrap"), R(2, 3)),
    "tril": (np.tril, R(3, 4)),
    "tril_k": (lambda a: np.tril(a, -1), R(2, 3, 3)),
    "triu": (lambda a: np.triu(a, 1), R(3, 4)),
    "diag_vector": (lambda a: np.diag(a, 1), R(3)),
    "diag_vector_neg": (lambda a: np.diag(a, -2), R(2)),
    "diag_matrix": (lambda a: np.diag(a, -1), R(3, 4)),
    "diagonal": (lambda a: np.diagonal(a, 1, 0, 2), R(3, 2, 4)),
    "diagonal_method": (lambda a: a.diagonal(), R(3, 4)),
    "trace": (np.trace, R(3, 4)),
    "trace_axes": (lambda a: np.trace(a, -1, axis1=1, axis2=2), R(2, 3, 3)),
    "select": (lambda a, b: np.select([idx(a) > 0.5, idx(b) < 0], [a, b * 2], default=a * b), R(3, 4), R(4)),
    "diff": (lambda a: np.diff(a), R(3, 5)),
    "diff_n_axis": (lambda a: np.diff(a, n=2, axis=0), R(4, 3)),
    "diff_prepend_append": (lambda a: np.diff(a, prepend=0.5, append=a[:, :1]), R(2, 3)),
    "gradient_1d": (np.gradient, R(5)),
    "gradient_2d": (lambda a: np.gradient(a, 0.5, 2.0), R(3, 4)),
    "gradient_coords": (lambda a: np.gradient(a, np.array([0.0, 0.3, 1.0, 1.2, 2.0]), edge_order=2), R(5)),
    "gradient_axis": (lambda a: np.gradient(a, axis=1, edge_order=2), R(2, 4)),
    # products
    "einsum_matmul": (lambda a, b: np.einsum("ij,jk->ik", a, b), R(2, 3), R(3, 4)),
    "einsum_implicit": (lambda a, b: np.einsum("ij,kj", a, b), R(2, 3), R(4, 3)),
    "einsum_trace": (lambda a: np.einsum("ii", a), R(3, 3)),
    "einsum_diag": (lambda a: np.einsum("ii->i", a), R(3, 3)),
    "einsum_diag3": (lambda a, b: np.einsum("iij,j->ij", a, b), R(3, 3, 2), R(2)),
    "einsum_sum_axis": (lambda a: np.einsum("ijk->j", a), R(2, 3, 4)),
    "einsum_outer_broadcast_letter": (lambda a, b: np.einsum("i,j->ij", a, b), R(3), R(4)),
    "einsum_ellipsis": (lambda a, b: np.einsum("...ij,...jk->...ik", a, b), R(2, 2, 3), R(3, 4)),
    "einsum_ellipsis_bcast": (lambda a, b: np.einsum("...i,...i->...", a, b), R(1, 3), R(2, 1, 3)),
    "einsum_ellipsis_implicit": (lambda a: np.einsum("i...->...", a), R(3, 2)),
    "einsum_three": (lambda a, b, c: np.einsum("ij,jk,kl->il", a, b, c, optimize=True), R(2, 3), R(3, 4), R(4, 2)),
    "einsum_letter_only_here": (lambda a, b: np.einsum("ij,k->ik", a, b), R(2, 3), R(4)),
    "einsum_interleaved": (lambda a, b: np.einsum(a, [0, 1], b, [1, 2], [0, 2]), R(2, 3), R(3, 4)),
    "einsum_interleaved_ellipsis": (lambda a, b: np.einsum(a, [Ellipsis, 0], b, [0]), R(2, 3), R(3)),
    "einsum_const_operand": (lambda a: np.einsum("ij,j->i", a, np.arange(3.0)), R(2, 3)),
    "tensordot": (lambda a, b: np.tensordot(a, b), R(2, 3, 4), R(3, 4, 2)),
    "tensordot_axes": (lambda a, b: np.tensordot(a, b, axes=([0, 2], [2, 0])), R(2, 3, 4), R(4, 5, 2)),
    "tensordot_int": (lambda a, b: np.tensordot(a, b, 1), R(2, 3), R(3, 2)),
    "dot_nd": (lambda a, b: np.dot(a, b), R(2, 3, 4), R(5, 4, 2)),
    "dot_nd_vec": (lambda a, b: np.dot(a, b), R(2, 3, 4), R(4)),
    "matmul_nd": (lambda a, b: a @ b, R(2, 1, 3, 4), R(3, 4, 2)),
    "inner": (np.inner, R(2, 3), R(4, 3)),
    "inner_scalar": (lambda a: np.inner(a, 2.0), R(3)),
    "outer_2d": (np.outer, R(2, 2), R(3)),
    "kron": (np.kron, R(2, 3), R(2, 2)),
    "kron_mixed_ndim": (np.kron, R(3), R(2, 2)),
    "cross": (np.cross, R(4, 3), R(3)),
    "cross_2d": (np.cross, R(4, 2), R(4, 2)),
    "cross_2_3": (np.cross, R(2), R(3)),
    "cross_axis": (lambda a, b: np.cross(a, b, axisa=0, axisb=0, axisc=0), R(3, 2), R(3, 2)),
    "vdot": (np.vdot, R(2, 3), R(6)),
    "vecdot": (lambda a, b: np.vecdot(a, b, axis=0), R(3, 2), R(3, 2)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_against_numpy_and_finite_differences(name):
    f, *args = CASES[name]
    check(f, *args)


def test_every_rule_is_covered_by_a_case():
    """Each rule of tape.RULES is exercised here or in test_tape_rules / test_tape_complex /
    test_tape_linalg (astype: the float32 tests of test_tape_api)."""
    import test_tape_complex
    import test_tape_linalg
    import test_tape_rules
    used = set()
    tables = [(CASES, projection), (test_tape_rules.CASES, test_tape_rules.projected),
              (test_tape_complex.CASES, projection), (test_tape_linalg.CASES, projection)]
    for table, project in tables:
        for f, *args in table.values():
            used.update(r.op for r in tape.record(project(f, *args), *args).tape.records)
    assert set(tape.RULES) - used - {"njit_kernel"} == set()


def _single(a):
    if isinstance(a, np.ndarray) and a.dtype.kind in "fc":
        return a.astype(np.complex64 if a.dtype.kind == "c" else np.float32)
    return a


def test_single_precision_stays_single(monkeypatch):
    """On float32/complex64 arguments every case gives numpy's dtypes, and where the recording
    holds no double-precision value, no rule computes a cotangent in double precision."""
    import test_tape_complex
    import test_tape_linalg
    upcasts = []
    for name, r in tape.RULES.items():
        def vjp(g, rec, _old=r.vjp, _name=name):
            out = _old(g, rec)
            for c, i in zip(out, rec.inputs):
                if c is not None and i is not None and np.result_type(c) in (np.float64, np.complex128):
                    upcasts.append(_name)
            return out
        monkeypatch.setattr(r, "vjp", vjp)
    for table in (CASES, test_tape_complex.CASES, test_tape_linalg.CASES):
        for name, (f, *args) in sorted(table.items()):
            if any(isinstance(a, (float, complex)) for a in args):
                continue  # a tracked Python float is a float64 scalar, not numpy's weak scalar
            args = [_single(a) for a in args]
            for got, want in zip(_outputs(tape.primal(tape.record(f, *args).out)), _outputs(f(*args))):
                assert np.result_type(got) == np.result_type(want), name
            rec = tape.record(lambda *a: np.sum(np.real(sum(np.sum(o) for o in _outputs(f(*a))))), *args)
            if type(rec.out) is tape.Tracked and all(
                    np.result_type(r.value) in (np.float32, np.complex64) for r in rec.tape.records):
                upcasts.clear()
                rec.tape.backward(rec.out.id)
                assert upcasts == [], name
