"""Every rule of adcore.tape against central finite differences (float64)."""
import numpy as np
import pytest

from adcore import tape

EPS = 1e-6


def numeric_grad(f, args, k):
    """Central finite differences of scalar f with respect to the float array args[k]."""
    x = np.array(args[k], dtype=np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + EPS
        hi = float(f(*args[:k], x.copy(), *args[k + 1:]))
        x[i] = old - EPS
        lo = float(f(*args[:k], x.copy(), *args[k + 1:]))
        x[i] = old
        g[i] = (hi - lo) / (2 * EPS)
    return g


def projected(f, *args, seed=0):
    """sum(f(*args) * R) for a fixed random R: the FD check then sees the full Jacobian."""
    out = np.asarray(f(*args))
    r = np.random.default_rng(seed).standard_normal(out.shape)
    return lambda *a: np.sum(f(*a) * r)


def check_grad(f, *args, rtol=1e-5, atol=1e-6):
    """Assert that tape.gradient of f agrees with finite differences for every float array arg."""
    loss = projected(f, *args)
    grads = tape.gradient(loss, *args)
    assert len(grads) == len(args)
    for k, (a, g) in enumerate(zip(args, grads)):
        if isinstance(a, np.ndarray) and a.dtype.kind == "f":
            assert isinstance(g, np.ndarray) and g.shape == a.shape and g.dtype == a.dtype
            np.testing.assert_allclose(g, numeric_grad(loss, args, k), rtol=rtol, atol=atol,
                                       err_msg=f"argument {k}")
        elif isinstance(a, float):
            assert isinstance(g, float)
            fd = (float(loss(*args[:k], a + EPS, *args[k + 1:])) -
                  float(loss(*args[:k], a - EPS, *args[k + 1:]))) / (2 * EPS)
            assert g == pytest.approx(fd, rel=rtol, abs=atol)
        else:
            assert g is None


rng = np.random.default_rng(1)


def R(*shape):
    """Standard normal values, kept away from 0 (kinks of abs, relu, sign)."""
    x = rng.standard_normal(shape)
    return np.where(np.abs(x) < 0.1, 0.37, x)


def P(*shape):
    """Positive values (domains of log, sqrt, fractional powers)."""
    return rng.uniform(0.5, 2.0, shape)


def U(*shape):
    """Values in (-0.9, 0.9) (domain of log1p, arctan-ish ranges)."""
    return rng.uniform(-0.9, 0.9, shape)


CASES = {
    # arithmetic with broadcasting, reflected operators and scalars
    "add": (lambda a, b: a + b, R(3, 4), R(4)),
    "add_col_row": (lambda a, b: a + b, R(3, 1), R(1, 4)),
    "radd_scalar": (lambda a: 2.5 + a, R(3)),
    "sub": (lambda a, b: a - b, R(3, 4), R(3, 1)),
    "rsub": (lambda a: 1.0 - a, R(2, 3)),
    "mul": (lambda a, b: a * b, R(2, 3, 4), R(3, 1)),
    "rmul_array": (lambda a: np.arange(4.0) * a, R(3, 4)),
    "div": (lambda a, b: a / b, R(3, 4), P(4)),
    "rdiv": (lambda a: 2.0 / a, P(5)),
    "pow_scalar": (lambda a: a ** 3, R(4)),
    "pow_frac": (lambda a: a ** 1.5, P(4)),
    "pow_both": (lambda a, b: a ** b, P(3, 2), R(2)),
    "rpow": (lambda a: 2.0 ** a, R(4)),
    "neg": (lambda a: -a, R(3)),
    "pos": (lambda a: +a, R(3)),
    "abs": (lambda a: abs(a), R(5)),
    "np_abs": (lambda a: np.abs(a), R(5)),
    "float_scalar_arg": (lambda a, s: a * s + s ** 2, R(3), 0.7),
    "int_arg": (lambda a, n: a * n, R(3), 3),
    "int_array_arg": (lambda a, n: a * n, R(3), np.arange(3)),
    # matmul / dot
    "matmul_2d": (lambda a, b: a @ b, R(3, 4), R(4, 5)),
    "matmul_vec_mat": (lambda a, b: a @ b, R(4), R(4, 5)),
    "matmul_mat_vec": (lambda a, b: a @ b, R(3, 4), R(4)),
    "matmul_vec_vec": (lambda a, b: a @ b, R(4), R(4)),
    "matmul_batched": (lambda a, b: a @ b, R(2, 3, 4), R(2, 4, 5)),
    "matmul_batch_bcast": (lambda a, b: a @ b, R(2, 3, 4), R(4, 5)),
    "matmul_batch_bcast2": (lambda a, b: np.matmul(a, b), R(3, 4), R(2, 4, 5)),
    "matmul_batch_vec": (lambda a, b: a @ b, R(4), R(2, 4, 5)),
    "rmatmul_const": (lambda b: np.ones((2, 3)) @ b, R(3, 4)),
    "dot_2d": (lambda a, b: np.dot(a, b), R(3, 4), R(4, 2)),
    "dot_1d": (lambda a, b: np.dot(a, b), R(4), R(4)),
    "dot_method": (lambda a, b: a.dot(b), R(3, 4), R(4)),
    "dot_scalar": (lambda a: np.dot(a, 2.0), R(3)),
    "outer": (lambda a, b: np.outer(a, b), R(3), R(4)),
    # reductions
    "sum_all": (lambda a: np.sum(a), R(3, 4)),
    "sum_axis0": (lambda a: np.sum(a, axis=0), R(3, 4)),
    "sum_axis_neg_keep": (lambda a: a.sum(axis=-1, keepdims=True), R(3, 4)),
    "sum_axes_tuple": (lambda a: np.sum(a, axis=(0, 2)), R(2, 3, 4)),
    "add_reduce": (lambda a: np.add.reduce(a, axis=1), R(2, 3)),
    "mean_all": (lambda a: a.mean(), R(3, 4)),
    "mean_axis": (lambda a: np.mean(a, axis=1), R(3, 4)),
    "mean_keep": (lambda a: np.mean(a, axis=(0, 1), keepdims=True), R(2, 3, 2)),
    "max_all": (lambda a: np.max(a), R(3, 4)),
    "max_axis": (lambda a: a.max(axis=0), R(3, 4)),
    "amax_keep": (lambda a: np.amax(a, axis=-1, keepdims=True), R(3, 4)),
    "min_axis": (lambda a: np.min(a, axis=1), R(3, 4)),
    "min_method_keep": (lambda a: a.min(axis=0, keepdims=True), R(3, 4)),
    "var": (lambda a: np.var(a, axis=0), R(4, 3)),
    "norm": (lambda a: np.linalg.norm(a), R(3, 4)),
    "norm_axis": (lambda a: np.linalg.norm(a, axis=1, keepdims=True), R(3, 4)),
    "std_ddof": (lambda a: a.std(axis=1, ddof=1), R(3, 4)),
    # shapes
    "reshape": (lambda a: a.reshape(4, 3), R(3, 4)),
    "reshape_tuple_neg": (lambda a: np.reshape(a, (2, -1)), R(3, 4)),
    "ravel": (lambda a: np.ravel(a) * np.arange(12.0), R(3, 4)),
    "flatten": (lambda a: a.flatten(), R(3, 4)),
    "T": (lambda a: a.T, R(3, 4)),
    "transpose_axes": (lambda a: np.transpose(a, (1, 2, 0)), R(2, 3, 4)),
    "transpose_method": (lambda a: a.transpose(2, 0, 1), R(2, 3, 4)),
    "swapaxes": (lambda a: np.swapaxes(a, 0, 2), R(2, 3, 4)),
    "moveaxis": (lambda a: np.moveaxis(a, 0, -1), R(2, 3, 4)),
    "squeeze": (lambda a: np.squeeze(a), R(3, 1, 4, 1)),
    "squeeze_axis": (lambda a: a.squeeze(axis=1), R(3, 1, 4, 1)),
    "expand_dims": (lambda a: np.expand_dims(a, 1), R(3, 4)),
    "broadcast_to": (lambda a: np.broadcast_to(a, (2, 3, 4)), R(3, 1)),
    "copy": (lambda a: np.copy(a) * a.copy(), R(3)),
    # indexing
    "getitem_int": (lambda a: a[1], R(3, 4)),
    "getitem_slice": (lambda a: a[1:, ::-2], R(3, 4)),
    "getitem_newaxis_ellipsis": (lambda a: a[None, ..., 0], R(3, 4)),
    "getitem_int_array_repeats": (lambda a: a[np.array([0, 2, 0, 0])], R(3, 4)),
    "getitem_list": (lambda a: a[[1, 1], [0, 3]], R(3, 4)),
    "getitem_bool_mask": (lambda a: a[np.array([True, False, True])], R(3, 4)),
    "getitem_mixed": (lambda a: a[1:, np.array([3, 3, 1])], R(3, 4)),
    "iterate": (lambda a: sum(row * i for i, row in enumerate(a)), R(3, 4)),
    "take_axis0": (lambda a: np.take(a, np.array([2, 0, 2]), axis=0), R(3, 4)),
    "take_axis1": (lambda a: a.take([1, 1, 3], axis=1), R(3, 4)),
    "take_flat": (lambda a: np.take(a, [5, 0, 5]), R(3, 4)),
    # joining and selection
    "concatenate0": (lambda a, b: np.concatenate([a, b]), R(2, 3), R(4, 3)),
    "concatenate1_const": (lambda a, b: np.concatenate((a, np.ones((2, 1)), b), axis=1), R(2, 3), R(2, 2)),
    "concatenate_none": (lambda a, b: np.concatenate([a, b], axis=None), R(2, 3), R(4)),
    "stack0": (lambda a, b: np.stack([a, b]), R(2, 3), R(2, 3)),
    "stack_last": (lambda a, b: np.stack([a, b, a], axis=-1), R(2, 3), R(2, 3)),
    "where": (lambda a, b: np.where(a > 0, a, b), R(3, 4), R(4)),
    "where_scalar": (lambda a: np.where(a > 0, a, 0.0), R(3, 4)),
    "clip": (lambda a: np.clip(a, -0.5, 0.5), R(10)),
    "clip_method": (lambda a: a.clip(-0.5), R(10)),
    "clip_tracked_bounds": (lambda a, lo, hi: np.clip(a, lo, hi), R(10), np.full(10, -0.3), np.full(10, 0.4)),
    "maximum": (lambda a, b: np.maximum(a, b), R(3, 4), R(4)),
    "maximum_scalar": (lambda a: np.maximum(a, 0), R(3, 4)),
    "minimum": (lambda a, b: np.minimum(a, b), R(3, 4), R(3, 1)),
    "logaddexp": (lambda a, b: np.logaddexp(a, b), R(3, 4), R(4)),
    # elementwise functions
    "exp": (np.exp, R(5)),
    "expm1": (np.expm1, R(5)),
    "exp2": (np.exp2, R(5)),
    "log": (np.log, P(5)),
    "log1p": (np.log1p, U(5)),
    "log2": (np.log2, P(5)),
    "log10": (np.log10, P(5)),
    "sqrt": (np.sqrt, P(5)),
    "square": (np.square, R(5)),
    "reciprocal": (np.reciprocal, P(5)),
    "sin": (np.sin, R(5)),
    "cos": (np.cos, R(5)),
    "tan": (np.tan, U(5)),
    "arctan": (np.arctan, R(5)),
    "sinh": (np.sinh, R(5)),
    "cosh": (np.cosh, R(5)),
    "tanh": (np.tanh, R(5)),
    # building blocks
    "sigmoid": (tape.sigmoid, 4 * R(6)),
    "softplus": (tape.softplus, 4 * R(6)),
    "relu": (tape.relu, R(6)),
    "softmax": (tape.softmax, R(3, 4)),
    "softmax_axis0": (lambda a: tape.softmax(a, axis=0), R(3, 4)),
    "logsoftmax": (tape.logsoftmax, R(3, 4)),
    "logsoftmax_axis0": (lambda a: tape.logsoftmax(a, axis=0), R(3, 4)),
    "logsumexp_all": (tape.logsumexp, R(3, 4)),
    "logsumexp_axis": (lambda a: tape.logsumexp(a, axis=1), R(3, 4)),
    "logsumexp_keep": (lambda a: tape.logsumexp(a, axis=0, keepdims=True), R(3, 4)),
    # in-place updates of intermediates
    "iadd": (lambda a, b: _iadd(a, b), R(3, 4), R(4)),
    "setitem": (lambda a, b: _setitem(a, b), R(3, 4), R(2)),
    "setitem_scalar": (lambda a: _setitem_scalar(a), R(3, 4)),
}


def _iadd(a, b):
    y = a * 2.0
    y += b
    y *= b
    y -= 1.0
    y /= 2.0
    return y


def _setitem(a, b):
    y = a * 1.0
    y[1, 1:3] = b * b
    y[0] = 0.0
    return y * a


def _setitem_scalar(a):
    y = np.exp(a)
    y[2, 3] = 7.0
    return y


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_against_finite_differences(name):
    f, *args = CASES[name]
    check_grad(f, *args)


def test_plain_arrays_give_plain_results():
    x = R(3, 4)
    for f in (tape.sigmoid, tape.softplus, tape.relu, tape.softmax, tape.logsoftmax, tape.logsumexp):
        assert type(f(x)) in (np.ndarray, np.float64)
    np.testing.assert_allclose(tape.softmax(x).sum(axis=-1), 1.0)
    np.testing.assert_allclose(tape.logsumexp(x, axis=1), np.log(np.exp(x).sum(axis=1)))
    np.testing.assert_allclose(tape.sigmoid(x), 1 / (1 + np.exp(-x)))
    np.testing.assert_allclose(tape.softplus(x), np.log1p(np.exp(x)))
    np.testing.assert_allclose(tape.logsoftmax(x), np.log(tape.softmax(x)))


def test_stable_building_blocks_at_extremes():
    big = np.array([-1000.0, 0.0, 1000.0])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        np.testing.assert_allclose(tape.sigmoid(big), [0.0, 0.5, 1.0])
        np.testing.assert_allclose(tape.softplus(big), [0.0, np.log(2), 1000.0])
        np.testing.assert_allclose(tape.logsumexp(big), 1000.0)
        np.testing.assert_allclose(tape.softmax(big), [0.0, 0.0, 1.0])
        np.testing.assert_allclose(tape.logsoftmax(big), [-2000.0, -1000.0, 0.0])
        g, = tape.gradient(lambda x: np.sum(tape.logsoftmax(x) * np.array([1.0, 2.0, 3.0])), big)
    np.testing.assert_allclose(g, [1.0, 2.0, 3.0 - 6.0])
    assert np.all(np.isfinite(g))


def test_sigmoid_paths_agree_at_extremes():
    """Arrays whose entries are all above -SAFE_EXP take 1 / (1 + e**-x) in place, others
    the overflow-free formula: both give sigmoid and its gradient to rounding (against
    long double), without floating-point warnings, in float32 and float64."""
    from adcore.tape.rules import SAFE_EXP
    for dtype in (np.float32, np.float64):
        edge = SAFE_EXP[dtype]
        fast = np.array([-edge * 0.999, -50, -20, -1, 0, 1, 20, 50, 1e4], dtype)
        slow = np.concatenate([fast, np.array([-edge * 1.001, -1e4], dtype)])
        for x in (fast, slow):
            exact = 1 / (1 + np.exp(-x.astype(np.longdouble)))
            with np.errstate(over="raise", invalid="raise", divide="raise"):
                s = tape.sigmoid(x)
                g, = tape.gradient(lambda v: np.sum(tape.sigmoid(v)), x)
            assert s.dtype == g.dtype == dtype
            normal = exact > np.finfo(dtype).tiny
            eps = np.finfo(dtype).eps
            np.testing.assert_allclose(s[normal], exact[normal], rtol=4 * eps)
            left = normal & (x <= 1)          # out (1 - out): relative accuracy left of 0
            np.testing.assert_allclose(g[left], (exact * (1 - exact))[left], rtol=8 * eps)
            np.testing.assert_allclose(g, exact * (1 - exact), rtol=0, atol=eps)
            assert np.all(s[~normal] <= np.finfo(dtype).tiny) and np.all(g[~normal] >= 0)


def test_softmax_of_short_rows_is_the_plain_formula():
    """2-D softmax along short rows (reduced through a transposed copy) against the
    shifted formula, and its gradient against central differences."""
    x = R(40, 7) * 20
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(tape.softmax(x, axis=1), e / e.sum(axis=1, keepdims=True), rtol=1e-14)
    np.testing.assert_array_equal(tape.softmax(x), tape.softmax(x, axis=1))
    w = R(40, 7)
    check_grad(lambda v: np.sum(tape.softmax(v) * w), R(40, 7))


def test_max_splits_ties():
    g, = tape.gradient(lambda x: np.max(x), np.array([1.0, 3.0, 3.0]))
    np.testing.assert_allclose(g, [0.0, 0.5, 0.5])


def test_float32_stays_float32_through_every_rule(monkeypatch):
    """With float32 inputs (and no float64 constants), every recorded value and every cotangent a
    rule produces is float32: nothing is silently computed in float64 and cast back."""
    upcasts = []
    for name, r in tape.RULES.items():
        def vjp(g, rec, _old=r.vjp, _name=name):
            out = _old(g, rec)
            for c, i in zip(out, rec.inputs):
                if c is not None and i is not None and np.result_type(c) != np.float32:
                    upcasts.append(_name)
            return out
        monkeypatch.setattr(r, "vjp", vjp)
    float64_consts = {"concatenate1_const", "dot_scalar", "float_scalar_arg", "int_array_arg", "ravel",
                      "rmatmul_const", "rmul_array"}
    for name, (f, *args) in sorted(CASES.items()):
        if name in float64_consts:
            continue
        args32 = [a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a for a in args]
        rec = tape.record(lambda *a: np.sum(f(*a)), *args32)
        assert all(np.result_type(r.value) == np.float32 for r in rec.tape.records), name
        rec.tape.backward(rec.out.id)
    assert upcasts == []
