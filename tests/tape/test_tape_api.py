"""adcore.tape's user-facing behaviour: trees, Const, withgradient, dtypes, errors, in-place ops."""
import math
from collections import namedtuple

import numpy as np
import pytest

from adcore import ADError, Const, UnsupportedError, tape
from test_tape_rules import check_grad, numeric_grad

rng = np.random.default_rng(7)


class Dense:
    __tree_fields__ = ("weight", "bias")

    def __init__(self, n_in, n_out, act=np.tanh, dtype=np.float64):
        self.weight = rng.standard_normal((n_out, n_in)).astype(dtype)
        self.bias = rng.standard_normal(n_out).astype(dtype)
        self.act = act

    def __call__(self, x):
        return self.act(x @ self.weight.T + self.bias)


class Chain:
    __tree_fields__ = ("layers",)

    def __init__(self, *layers):
        self.layers = layers
        self.name = "chain"

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def mse(m, x, y):
    return np.mean((m(x) - y) ** 2)


def test_readme_example():
    w, x = rng.standard_normal((3, 2)), rng.standard_normal((4, 3))
    dw, dx = tape.gradient(lambda w, x: np.sum(np.tanh(x @ w) ** 2), w, x)
    t = np.tanh(x @ w)
    gz = 2 * t * (1 - t ** 2)
    np.testing.assert_allclose(dw, x.T @ gz)
    np.testing.assert_allclose(dx, gz @ w.T)


def test_model_gradient_mirrors_the_tree():
    model = Chain(Dense(3, 5), Dense(5, 2, act=tape.sigmoid))
    x, y = rng.standard_normal((4, 3)), rng.standard_normal((4, 2))
    gm, gx, gy = tape.gradient(mse, model, x, y)
    assert set(gm) == {"layers"} and isinstance(gm["layers"], tuple) and len(gm["layers"]) == 2
    assert set(gm["layers"][0]) == {"weight", "bias"}
    w = model.layers[1].weight

    def loss_w(w1):
        model.layers[1].weight = w1
        try:
            return mse(model, x, y)
        finally:
            model.layers[1].weight = w
    np.testing.assert_allclose(gm["layers"][1]["weight"], numeric_grad(loss_w, (w,), 0), rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(gx, numeric_grad(lambda x: mse(model, x, y), (x,), 0), rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(gy, numeric_grad(lambda y: mse(model, x, y), (y,), 0), rtol=1e-5, atol=1e-8)
    # the caller's model is untouched: same arrays, not tracked
    assert model.layers[1].weight is w and model.name == "chain"


def test_const_and_non_float_arguments_give_none():
    x = rng.standard_normal(3)
    g = tape.gradient(lambda x, c, n, idx, s: np.sum(x[idx] * c[idx]) * n + len(s), x, Const(x), 3, np.array([0, 2]), "ab")
    assert g[1:] == (None, None, None, None)
    np.testing.assert_allclose(g[0], [3 * x[0], 0, 3 * x[2]])


def test_nested_containers_and_scalars():
    Pair = namedtuple("Pair", "a b")
    args = {"w": rng.standard_normal(3), "k": 2, "p": Pair(rng.standard_normal(2), 0.5)}, [1.5, np.arange(2)]

    def f(d, lst):
        return np.sum(d["w"] ** 2) * lst[0] + np.sum(d["p"].a) * d["p"].b * d["k"]

    (gd, glst), = [tape.gradient(f, *args)]
    assert gd["k"] is None and glst[1] is None and isinstance(glst, tuple)
    assert isinstance(gd["p"], tuple) and isinstance(gd["p"][1], float) and isinstance(glst[0], float)
    np.testing.assert_allclose(gd["w"], 2 * args[0]["w"] * 1.5)
    np.testing.assert_allclose(gd["p"][0], 0.5 * 2 * np.ones(2))
    assert gd["p"][1] == pytest.approx(np.sum(args[0]["p"].a) * 2)
    assert glst[0] == pytest.approx(np.sum(args[0]["w"] ** 2))


def test_const_inside_a_tree():
    w = rng.standard_normal(3)
    g, = tape.gradient(lambda t: np.sum(t[0] * t[1]), (w, Const(2 * w)))
    np.testing.assert_allclose(g[0], 2 * w)
    assert g[1] is None


def test_unused_arguments_get_zeros_and_constant_loss_is_allowed():
    x, z = rng.standard_normal(3), rng.standard_normal((2, 2))
    gx, gz = tape.gradient(lambda x, z: np.sum(x), x, z)
    np.testing.assert_array_equal(gz, np.zeros((2, 2)))
    val, (gx,) = tape.withgradient(lambda x: 4.0, x)
    assert val == 4.0 and np.all(gx == 0)


def test_withgradient_tuple_and_dict_outputs():
    x = rng.standard_normal(4)
    val, (g,) = tape.withgradient(lambda x: (np.sum(x ** 2), np.tanh(x)), x)
    assert isinstance(val, tuple) and val[0] == pytest.approx(np.sum(x ** 2))
    assert type(val[1]) is np.ndarray
    np.testing.assert_allclose(g, 2 * x)
    res = tape.withgradient(lambda x: {"loss": np.sum(np.sin(x)), "aux": x.max()}, x)
    assert set(res.val) == {"loss", "aux"} and type(res.val["aux"]) is not tape.Tracked
    np.testing.assert_allclose(res.grad[0], np.cos(x))


def test_non_scalar_loss_is_an_error():
    with pytest.raises(ADError, match="scalar loss.*shape \\(3,\\)"):
        tape.gradient(lambda x: x * 2, rng.standard_normal(3))
    g, = tape.gradient(lambda x: x * 2, np.array([1.5]))  # one element is fine
    np.testing.assert_allclose(g, [2.0])


def test_float32_stays_float32():
    model = Chain(Dense(3, 4, dtype=np.float32), Dense(4, 1, act=tape.softplus, dtype=np.float32))
    x, y = rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal((5, 1)).astype(np.float32)
    val, (gm, gx, gy) = tape.withgradient(mse, model, x, y)
    assert val.dtype == np.float32
    for g in (gm["layers"][0]["weight"], gm["layers"][0]["bias"], gm["layers"][1]["weight"], gx, gy):
        assert g.dtype == np.float32
    # against the same model in float64
    m64 = Chain(*(Dense(1, 1) for _ in range(2)))
    for l64, l32 in zip(m64.layers, model.layers):
        l64.weight, l64.bias, l64.act = l32.weight.astype(np.float64), l32.bias.astype(np.float64), l32.act
    g64 = tape.gradient(mse, m64, x.astype(np.float64), y.astype(np.float64))[0]
    np.testing.assert_allclose(gm["layers"][0]["weight"], g64["layers"][0]["weight"], rtol=1e-4, atol=1e-6)


def test_mixed_precision_gradients_keep_each_dtype():
    a, b = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3)
    ga, gb = tape.gradient(lambda a, b: np.sum(np.exp(a) * b), a, b)
    assert ga.dtype == np.float32 and gb.dtype == np.float64
    np.testing.assert_allclose(ga, np.exp(a) * b, rtol=1e-6)
    g, = tape.gradient(lambda a: np.sum(a.astype(np.float64) ** 2), a)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, 2 * a, rtol=1e-6)
    g, = tape.gradient(lambda b: np.sum(b.astype(np.float32) * 3), b)
    assert g.dtype == np.float64 and np.allclose(g, 3)


def test_gradients_are_fresh_writable_arrays():
    x, y = rng.standard_normal(3), rng.standard_normal(3)
    gx, gy = tape.gradient(lambda x, y: np.sum(x + y), x, y)
    assert gx is not gy and not np.shares_memory(gx, gy)
    gx += 1
    np.testing.assert_allclose(gy, 1.0)
    assert gx.flags.writeable and gy.flags.writeable


def test_repeated_use_accumulates():
    x = rng.standard_normal(4)
    check_grad(lambda x: x * x + x * np.sin(x) - x[::-1] * x + np.sum(x) * x, x)


def test_comparisons_float_item_and_plain_helpers():
    seen = {}

    def f(x):
        mask = x > 0
        seen["mask"] = mask
        seen["float"] = np.sum(x).item()
        seen["item"] = x[0].item()
        seen["argmax"] = np.argmax(x)
        seen["shape"] = np.shape(x)
        seen["zeros"] = np.zeros_like(x)
        seen["sign"] = np.sign(x)
        return np.sum(x * mask)

    x = np.array([1.0, -2.0, 3.0])
    g, = tape.gradient(f, x)
    assert type(seen["mask"]) is np.ndarray and seen["mask"].dtype == bool
    assert type(seen["float"]) is float and seen["float"] == 2.0 and seen["item"] == 1.0
    assert seen["argmax"] == 2 and seen["shape"] == (3,)
    assert type(seen["zeros"]) is np.ndarray and type(seen["sign"]) is np.ndarray
    np.testing.assert_array_equal(g, [1.0, 0.0, 1.0])


@pytest.mark.parametrize("convert", [float, complex, lambda v: math.sin(v), lambda v: math.exp(v)])
def test_implicit_float_conversions_refuse(convert):
    """float(), complex() and math.* would drop the gradient: refused, never silent."""
    with pytest.raises(UnsupportedError, match="of a tracked value"):
        tape.gradient(lambda x: convert(x[0]) + np.sum(x), np.array([0.5, 1.0]))


def test_unsupported_numpy_functions_raise_naming_them():
    x = rng.standard_normal(4)
    with pytest.raises(UnsupportedError, match="numpy.nanmedian"):
        tape.gradient(lambda x: np.nanmedian(x), x)
    with pytest.raises(UnsupportedError, match="numpy.maximum.accumulate"):
        tape.gradient(lambda x: np.sum(np.maximum.accumulate(x)), x)
    with pytest.raises(UnsupportedError, match="numpy.sum with dtype"):
        tape.gradient(lambda x: np.sum(x, dtype=np.float32), x)


def test_in_place_updates_of_arguments_and_views_raise():
    x = rng.standard_normal((2, 3))

    def on_argument(x):
        x += 1
        return np.sum(x)

    def on_view(x):
        y = x * 2
        v = y[0]
        y += 1  # numpy would change v too
        return np.sum(v)

    def view_itself(x):
        y = x * 2
        v = y.T
        v[0] = 0.0
        return np.sum(y)

    def into_plain_array(x):
        a = np.zeros(3)
        a += x[0]
        return np.sum(a)

    for f in (on_argument, on_view, view_itself):
        with pytest.raises(UnsupportedError, match="in-place"):
            tape.gradient(f, x)
    with pytest.raises(UnsupportedError, match="out="):
        tape.gradient(into_plain_array, x)
    np.testing.assert_array_equal(x, x.copy())


def test_in_place_update_keeps_numpy_aliasing_and_dtype():
    x = rng.standard_normal(3).astype(np.float32)

    def f(x):
        y = x * 1
        alias = y
        y += np.ones(3)  # float64 operand: y stays float32, as in numpy
        assert y.dtype == np.float32
        return np.sum(alias * x)

    g, = tape.gradient(f, x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, 2 * x + 1, rtol=1e-6)


def test_recording_is_public_and_readable():
    w, x = rng.standard_normal((3, 2)), rng.standard_normal((4, 3))
    rec = tape.record(lambda w, x: np.sum(tape.softmax(x @ w, axis=1), axis=0).max(), w, Const(x))
    t = rec.tape
    assert [r.op for r in t.records] == ["input", "matmul", "softmax", "sum", "max"]
    assert t.inputs == [0] and rec.args[0].id == 0 and rec.args[1] is x
    mm = t.records[1]
    assert mm.inputs == (None, 0) and mm.args[0] is x and mm.out == 1
    np.testing.assert_allclose(mm.value, x @ w)
    assert t.records[2].attrs == {"axis": 1} and t.records[3].attrs == {"axis": (0,), "keepdims": False}
    assert "softmax(%1, axis=1)" in repr(t)
    adj = t.backward(rec.out.id)
    np.testing.assert_allclose(adj[0], tape.gradient(lambda w: np.sum(tape.softmax(x @ w, axis=1), axis=0).max(), w)[0])
    seeded = t.backward(t.records[3].out, seed=np.array([1.0, 0.0]))
    assert seeded[0].shape == w.shape


def test_nested_gradient_is_refused():
    x = rng.standard_normal(2)
    with pytest.raises(TypeError, match="nested"):
        tape.gradient(lambda x: np.sum(tape.gradient(lambda y: np.sum(y * y), x)[0]), x)


def test_bad_axes_raise_as_in_numpy():
    x = rng.standard_normal((2, 3))
    for f in (lambda x: np.sum(x, axis=2), lambda x: x.max(axis=-3), lambda x: np.sum(tape.softmax(x, axis=2)),
              lambda x: np.sum(np.swapaxes(x, 0, 2)), lambda x: np.sum(np.stack([x, x], axis=4))):
        with pytest.raises(np.exceptions.AxisError):
            tape.gradient(f, x)


def test_format_and_repr_of_tracked_values():
    seen = []

    def f(x):
        s = np.sum(x)
        seen.append(f"{s:.2f}")
        seen.append(repr(s))
        return s

    tape.gradient(f, np.array([1.0, 2.5]))
    assert seen[0] == "3.50" and seen[1].startswith("Tracked(")
