"""The tape's fast paths give the general paths' values, dtypes and derivatives.

Each path below is taken by the docs MLP (bench/mlp.py) and the Flux seed model: BLAS
products with ones for a bias's cotangent and softmax's row sums (``adcore.tape.sums``),
``ndarray.dot`` for products of two matrices, ``np.square`` for ``x ** 2``, a written-out
cotangent for a small full reduction, and the calls that skip numpy's dispatch.
Derivatives are checked against central differences in float64 (``test_tape_rules``).
"""
import numpy as np
import pytest

from adcore import Const, tape
from adcore.tape.recording import unbroadcast
from adcore.tape.rules import SMALL

from test_tape_rules import check_grad

rng = np.random.default_rng(7)


def dense(x, w, b):
    return 1 / (1 + np.exp(-(x @ w.T + b)))


def ops(f, *args):
    return [r.op for r in tape.record(f, *args).tape.records if r.op != "input"]


@pytest.mark.parametrize("batch", [3, 40])
def test_a_dense_layer_against_finite_differences(batch):
    x, w, b = rng.standard_normal((batch, 5)), rng.standard_normal((4, 5)), rng.standard_normal(4)
    check_grad(dense, x, w, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_bias_cotangent_is_the_column_sum_in_its_dtype(dtype):
    g = rng.standard_normal((128, 32)).astype(dtype)
    g64 = g.astype(np.float64)
    want = {(32,): g64.sum(axis=0), (1,): g64.sum(keepdims=True)[0], (1, 32): g64.sum(axis=0, keepdims=True)}
    for shape, w in want.items():
        got = unbroadcast(g, shape)
        assert got.shape == shape and got.dtype == dtype
        np.testing.assert_allclose(got, w, rtol=1e-5 if dtype == np.float32 else 1e-12)


def test_softmax_of_short_rows_against_finite_differences():
    z = rng.standard_normal((20, 6))  # at least 16 rows of at most 64: the BLAS row sums
    check_grad(lambda z: tape.softmax(z, axis=1), z)
    check_grad(lambda z: tape.softmax(z, axis=-1) * z, z)


def test_float32_mlp_gradients_stay_float32():
    x = rng.standard_normal((128, 12)).astype(np.float32)
    w, b = rng.standard_normal((8, 12)).astype(np.float32), np.zeros(8, np.float32)
    y = np.eye(8, dtype=np.float32)[np.arange(128) % 8]

    def loss(w, b, x, y):
        return np.sum((tape.softmax(x @ w.T + b, axis=1) - y) ** 2)
    val, (gw, gb, gx, gy) = tape.withgradient(loss, w, b, Const(x), Const(y))
    assert val.dtype == gw.dtype == gb.dtype == np.float32 and gx is None and gy is None
    val64, (gw64, gb64, _, _) = tape.withgradient(loss, w.astype(np.float64), b.astype(np.float64),
                                                    Const(x.astype(np.float64)), Const(y.astype(np.float64)))
    np.testing.assert_allclose(gw, gw64, rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(gb, gb64, rtol=1e-3, atol=1e-5)


def test_square_records_power_with_numpys_values():
    x = rng.standard_normal((6, 5)).astype(np.float32)
    out = tape.record(lambda x: x ** 2, x).out
    assert ops(lambda x: x ** 2, x) == ["power"]
    assert out.dtype == np.float32 and np.array_equal(out.value, np.power(x, 2))
    check_grad(lambda x: x ** 2, x.astype(np.float64))
    z = rng.standard_normal(4) + 1j * rng.standard_normal(4)   # complex: np.power itself
    assert np.array_equal(tape.record(lambda z: z ** 2, z).out.value, np.power(z, 2))


def test_products_of_matrices_give_matmuls_values_and_derivatives():
    a, b = rng.standard_normal((7, 5)), rng.standard_normal((3, 5))
    for f in (lambda a, b: a @ b.T, lambda a, b: np.matmul(a, b.T), lambda a, b: a.T @ (a @ b.T)):
        assert np.array_equal(tape.record(f, a, b).out.value, f(a, b))
        check_grad(f, a, b)
    assert ops(lambda b: a @ b.T, b) == ["transpose", "matmul"]
    rec = tape.record(lambda b: np.matmul(a, b.T), b)
    assert rec.tape.records[-1].inputs == (None, 1)   # the plain operand first, as recorded


@pytest.mark.parametrize("n", [SMALL, SMALL + 1])
def test_a_full_reductions_cotangent_small_or_large(n):
    x = rng.standard_normal(n)
    g = tape.gradient(lambda x: np.sum(x * x), x)[0]
    np.testing.assert_allclose(g, 2 * x)
    g32 = tape.gradient(lambda x: np.sum(x ** 2), x.astype(np.float32))[0]
    assert g32.dtype == np.float32 and g32.flags.writeable


def test_np_sum_of_a_tracked_array_takes_numpys_arguments():
    x = rng.standard_normal((4, 3))
    assert ops(lambda x: np.sum(x, axis=1), x) == ["sum"]
    check_grad(lambda x: np.sum(x, 0, keepdims=True) * x, x)
    with pytest.raises(Exception, match="where"):
        tape.gradient(lambda x: np.sum(x, where=x > 0), x)
