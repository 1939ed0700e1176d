"""Duplicated(model) speed paths keep gradients right: matrix products lowered to BLAS and to
loops agree with the tape engine and with finite differences; the driver passes the scratch
shadows adcore gives Const arrays in the order ``compile_gradient(...).shadowed`` reports;
the workspace's shadow, which the driver no longer zeroes, is zero after every call."""
import numba
import numpy as np
import pytest

from adcore import ActivityError, Const, Duplicated, ReverseWithPrimal, compile_gradient
from adcore.backend import vector_math
from layers import Chain, Dense, gradient, relu, sigmoid, softmax, tanh, withgradient
from adcore.calling.addresses import AddressTable
from layers.staging import drivers, products, program

RNG = np.random.default_rng(3)


def staged(loss, dup, *args):
    return program.lookup(loss, (dup,) + args)[0]


def close(a, b, rtol=1e-9):
    for (ka, va), (kb, vb) in zip(_leaves(a), _leaves(b)):
        assert ka == kb
        np.testing.assert_allclose(va, vb, rtol=rtol, atol=rtol * max(np.abs(vb).max(), 1.0))


def _leaves(tree, path=()):
    if isinstance(tree, np.ndarray):
        return [(path, tree)]
    items = tree.items() if isinstance(tree, dict) else enumerate(tree or ())
    return [leaf for k, v in items for leaf in _leaves(v, path + (k,))]


# (in, out, batch): products of 6 * 64 * 40 multiply-adds go to BLAS, 2 * 3 * 4 to loops
@pytest.mark.parametrize("n_in,n_out,batch,blas", [(64, 40, 6, True), (3, 4, 2, False)])
def test_products_agree_with_tape_and_finite_differences(n_in, n_out, batch, blas):
    assert products.uses_blas(batch, n_in, n_out) is blas
    model = Chain(Dense(n_in, n_out, tanh, dtype=np.float64, rng=1),
                  Dense(n_out, 3, dtype=np.float64, rng=2), softmax)
    x, y = RNG.standard_normal((batch, n_in)), RNG.uniform(size=(batch, 3))

    def loss(m, x, y):
        return np.sum((m(x) - y) ** 2)
    dup = Duplicated(model)
    g = gradient(loss, dup, x, y)[0]
    assert ("K.dot_into" in staged(loss, dup, x, y).source) is blas
    close(g, gradient(loss, model, x, y)[0])
    w = model.layers[0].weight
    for idx in [(0, 0), (n_out - 1, n_in - 1), (n_out // 2, 1)]:
        old = w[idx]
        w[idx] = old + 1e-6
        up = loss(model, x, y)
        w[idx] = old - 1e-6
        down = loss(model, x, y)
        w[idx] = old
        assert g["layers"][0]["weight"][idx] == pytest.approx((up - down) / 2e-6, rel=1e-5, abs=1e-8)


def test_product_operand_layouts():
    """Transposed, strided, broadcast batched, 1-D and mixed-dtype operands of BLAS-sized
    products (copied into the workspace where np.dot cannot take them) against the tape."""
    a = RNG.standard_normal((4, 40, 32)).astype(np.float32)
    v = RNG.standard_normal(64).astype(np.float32)

    def loss(m, a, v):
        w = m.layers[0].weight                        # (48, 32)
        p = a @ w.T                                   # batched, F-ordered right operand
        q = a[:, ::2, :] @ w[::2].T                   # strided operands: copied
        r = w[:, :].T @ w                             # (32, 48) @ (48, 32)
        s = v[:48] @ w.astype(np.float64)             # 1-D @ 2-D, small: loops
        t = a[0].astype(np.float64) @ w.T             # float64 @ float32: w copied
        return np.sum(p ** 2) + np.sum(q) + np.sum(r * r) + np.sum(np.sin(s)) + np.sum(t)
    model = Chain(Dense(32, 48, relu, rng=4))
    dup = Duplicated(model)
    gradient(loss, dup, a, v)
    assert staged(loss, dup, a, v).source.count("K.dot_into") == 4
    close(gradient(loss, dup, a, v)[0], gradient(loss, model, a, v)[0], rtol=2e-4)


@numba.njit
def _writes_const(p, c, w):
    """Writes differentiable values into the Const array ``c``: adcore gives it a scratch
    shadow, listed after the Duplicated arguments' shadows."""
    for i in range(p.size):
        c[i] = 2.0 * p[i]
    s = 0.0
    for i in range(p.size):
        w[i] = c[i] * c[i]
        s += w[i]
    return s


def test_driver_passes_scratch_shadows_in_shadowed_order():
    p, c, w = RNG.standard_normal(5), np.zeros(5), np.zeros(5)
    grad = compile_gradient(ReverseWithPrimal, _writes_const, Duplicated(p, np.zeros(5)),
                            Const(c), Duplicated(w, np.zeros(5)))
    assert grad.shadowed == [0, 2, 1]
    Z = drivers.Zeroing
    zeroing = [Z.ON_REQUEST, Z.NEVER, Z.ALWAYS]
    dp, dw, dc = np.zeros(5), np.zeros(5), np.full(5, 7.0)     # a stale scratch shadow
    fixed = {1: c, 2: w, 4: dw}                                # passed as addresses
    driver = drivers.njit_driver(grad.native, [False] * 3, [False] * 3, zeroing, fixed)
    call = AddressTable(driver, sorted(fixed), 6, drivers.refused)
    for _ in range(2):
        assert call.run(True, (p, c, w, dp, dw, dc)) == pytest.approx(np.sum(4 * p * p))
        np.testing.assert_allclose(dp, 8 * p)
    assert not dw.any() and not dc.any()
    w2 = np.zeros(5)                                           # another object: new address
    assert call.run(True, (p, c, w2, dp, dw, dc)) == pytest.approx(np.sum(4 * p * p))
    assert np.array_equal(w2, c * c) and call.objects[1] is w2


def test_python_driver_promoted_to_the_njit_driver_takes_the_same_arrays(monkeypatch):
    """A gradient from the disk cache runs a Python driver first, then (after
    ``DRIVER_AFTER`` calls) the njit driver with the fixed arrays as addresses: both give
    the same results, and an array replaced by another object after the promotion is
    followed."""
    monkeypatch.setattr(drivers, "DRIVER_AFTER", 3)
    p, c, w = RNG.standard_normal(5), np.zeros(5), np.zeros(5)
    grad = compile_gradient(ReverseWithPrimal, _writes_const, Duplicated(p, np.zeros(5)),
                            Const(c), Duplicated(w, np.zeros(5)))
    Z = drivers.Zeroing
    dp, dw, dc = np.zeros(5), np.zeros(5), np.zeros(5)
    driver = drivers.PythonDriver(grad, [False] * 3, [False] * 3,
                                    [Z.ON_REQUEST, Z.NEVER, Z.ALWAYS], {1: c, 2: w, 4: dw})
    for k in range(5):                                          # 3 in Python, then njit
        if k == 4:
            w = np.zeros(5)
        assert driver(True, p, c, w, dp, dw, dc) == pytest.approx(np.sum(4 * p * p))
        np.testing.assert_allclose(dp, 8 * p)
        np.testing.assert_allclose(w, c * c)
    with pytest.raises(ActivityError, match="C-contiguous"):
        driver(True, p, c, np.zeros(10)[::2], dp, dw, dc)


def test_workspace_shadow_stays_zero():
    """The driver does not zero the workspace's shadow: every call must leave it zero."""
    model = Chain(Dense(64, 40, sigmoid, rng=5), Dense(40, 6, rng=6), softmax)
    x, y = RNG.standard_normal((5, 64)).astype(np.float32), RNG.uniform(size=(5, 6))

    def loss(m, x, y):
        h = m(x)
        h2 = np.concatenate([h, h[:, :2]], axis=1)
        h2[:, 0] = 0.5 * h[:, 1]
        return np.sum((h2[:, :6] - y) ** 2) + np.sum(np.max(h2, axis=1))
    dup = Duplicated(model)
    first = gradient(loss, dup, x, y)[0]
    e, (dargs, _) = program.lookup(loss, (dup, x, y))
    for _ in range(3):
        again = gradient(loss, dup, x, y)[0]
        for z, d in zip(e.zeroing, dargs[len(e.flat):]):
            if z == drivers.Zeroing.NEVER:
                assert not d.any()
    close(again, first, rtol=1e-6)
    close(first, gradient(loss, model, x, y)[0], rtol=2e-4)


def test_elementwise_chains_are_fused_and_aux_values_kept():
    """A value used once is computed inline in the next elementwise op, unless that op
    calls a function the value does not (the bias add keeps its own SIMD loop before
    tanh); a sum reads its operand inline; a value read twice (``r * r``) or returned as
    an aux output stays in memory.  Gradients and the aux value agree with the tape."""
    model = Chain(Dense(3, 4, tanh, rng=7), Dense(4, 2, sigmoid, rng=8))
    x, y = RNG.standard_normal((5, 3)).astype(np.float32), RNG.uniform(size=(5, 2))

    def loss(m, x, y):
        r = m(x) - y
        return np.sum(np.exp(0.5 * r * r)), {"r": r}
    dup = Duplicated(model)
    (val, aux), g = program.stage(loss, (dup, x, y), True)
    source = staged(loss, dup, x, y).source
    if vector_math.ENABLED:                                   # in vectors, after the bias add
        assert "vector_tanh_float32(W_float32, " in source
    else:
        assert "= math.tanh(W_float32[" in source            # not fused with the bias add
    assert "= (np.float32(K.sigmoid_float32(W_float32[" in source   # sigmoid(.) - y: one loop
    assert "((0.5 * W_float64[" in source                     # 0.5 * r inline in (.) * r
    assert "math.exp" in source.split("+= ")[-1]              # sum(exp(.)): one loop
    assert source.count("for ") == 2 * 3 + 4 + (2 if vector_math.ENABLED else 4) + 2 + 2   # 2 gemm
    (ref_val, ref_aux), ref_g = withgradient(loss, model, x, y)
    np.testing.assert_allclose(aux["r"], ref_aux["r"], rtol=1e-5)
    assert float(val) == pytest.approx(float(ref_val), rel=1e-5)
    close(g[0], ref_g[0], rtol=2e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sigmoid_is_exact_and_finite_far_out(dtype):
    """The staged sigmoid (branch-free, in the value's precision) gives the closed form
    s (1 - s) and the value at pre-activations from -200 to 200, where exp(-x) overflows
    for either sign: no NaN, no flush of e**-100 to zero in float64."""
    model = Dense(1, 9, sigmoid, dtype=dtype, rng=4)
    model.weight[:] = 1
    model.bias[:] = 0
    x = np.array([[-200.0], [-100.0], [-30.0], [-1.0], [0.0], [0.5], [30.0], [100.0], [200.0]],
                 dtype)[:, 0]
    w = RNG.standard_normal(9).astype(dtype)

    def loss(m, x):
        return np.sum(m(x[:, None]) * w)
    val, g = withgradient(loss, Duplicated(model), x)
    z = x[:, None].astype(np.float64)                   # pre-activations: rows x, same
    s = np.where(z >= 0, 1, np.exp(z)) / (1 + np.exp(-np.abs(z)))    # in every column
    ds = (w * s * (1 - s)).astype(np.float64)
    assert np.all(np.isfinite(g[0]["weight"])) and np.all(np.isfinite(g[0]["bias"]))
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(g[0]["bias"], ds.sum(axis=0), rtol=rtol, atol=1e-30)
    np.testing.assert_allclose(g[0]["weight"][:, 0], (ds * z).sum(axis=0), rtol=rtol, atol=1e-30)
    assert float(val) == pytest.approx(float(np.sum(s * w)), rel=rtol)


def test_layer_kernels_are_inlined_into_the_program():
    """The staged program's loop kernels (line and small-product kernels) are written into
    its source, and its scalar helpers inlined by Numba where they are called (a callee
    compiled on its own costs a Numba compile per distinct set of the constant sizes it is
    passed): none is compiled by itself."""
    from layers import kernels, logitcrossentropy, softplus
    model = Chain(Dense(3, 4, sigmoid, dtype=np.float64, rng=1), Dense(4, 5, softplus, dtype=np.float64, rng=2))
    x, y = RNG.standard_normal((2, 3)), np.eye(5)[[0, 3]]

    def loss(m, x, y):
        return logitcrossentropy(m(x), y)
    dup = Duplicated(model)
    g = gradient(loss, dup, x, y)[0]
    close(g, gradient(loss, model, x, y)[0])
    source = staged(loss, dup, x, y).source
    for call in ("K.sigmoid_float64", "S.softplus", "math.isfinite", "math.log"):
        assert call in source, call
    assert "_line(" not in source and "gemm(" not in source
    for kernel in (kernels.sigmoid_float64, kernels.S.softplus):
        assert not kernel.overloads, kernel


def test_matrix_views_of_flat_buffers_are_the_reshaped_slices():
    """``kernels.matrix_c`` / ``matrix_f`` (the operands of staged BLAS products) view the
    same memory as ``flat[start:start + r * c].reshape((r, c))`` (``.reshape((c, r)).T``),
    and a write through the view lands in the flat buffer."""
    from layers import kernels

    @numba.njit
    def views(flat):
        c, f = kernels.matrix_c(flat, 3, 2, 5), kernels.matrix_f(flat, 4, 5, 2)
        c[1, 2] = -1.0
        return c.copy(), f.copy(), c.flags.c_contiguous, f.flags.f_contiguous
    flat = np.arange(20.0)
    want_c, want_f = flat[3:13].reshape((2, 5)).copy(), flat[4:14].reshape((2, 5)).T.copy()
    want_c[1, 2] = -1.0
    want_f[1, 1] = -1.0      # the same element (flat[10] = flat[4 + 1 + 5 * 1]) seen through the F view
    got_c, got_f, c_order, f_order = views(flat)
    np.testing.assert_array_equal(got_c, want_c)
    np.testing.assert_array_equal(got_f, want_f)
    assert c_order and f_order and flat[10] == -1.0
