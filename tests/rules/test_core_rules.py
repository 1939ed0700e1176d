"""Custom derivative rules, and the BLAS rules behind np.dot and @ inside kernels."""
import math
import warnings

import llvmlite.binding as llvm
import numba
import numpy as np
import pytest

import adcore
from adcore import ADError, Duplicated, Reverse, UnsupportedError
from fdcheck import check

warnings.filterwarnings("ignore", category=numba.NumbaPerformanceWarning)


# -- BLAS -----------------------------------------------------------------------------------
@numba.njit
def matmul_loss(A, B):
    C = A @ B
    return np.sum(C * C)


@numba.njit
def matvec_loss(A, x):
    return np.sum(np.tanh(A @ x))


@numba.njit
def vecmat_loss(x, A):
    return np.sum(np.sin(x @ A))


@numba.njit
def dot_loss(x, y):
    return np.dot(x, y) * np.dot(x, x)


@numba.njit
def transposed_products(A, B):
    return np.sum((A.T @ B) ** 2) + np.sum(A @ B.T)


@numba.njit
def chained(W1, W2, x):
    h = np.tanh(W1 @ x)
    return np.sum((W2 @ h) ** 2)


@pytest.mark.parametrize("kernel, make", [
    (matmul_loss, lambda r: (r.standard_normal((3, 4)), r.standard_normal((4, 2)))),
    (matvec_loss, lambda r: (r.standard_normal((3, 4)), r.standard_normal(4))),
    (vecmat_loss, lambda r: (r.standard_normal(3), r.standard_normal((3, 4)))),
    (dot_loss, lambda r: (r.standard_normal(5), r.standard_normal(5))),
    (transposed_products, lambda r: (r.standard_normal((3, 4)), r.standard_normal((3, 4)))),
    (chained, lambda r: (r.standard_normal((5, 3)), r.standard_normal((2, 5)), r.standard_normal(3))),
])
def test_blas_products_against_finite_differences(kernel, make):
    check(kernel, *make(np.random.default_rng(0)))


# -- BLAS results read only by other BLAS calls (the temporary carries the derivative) ----
@numba.njit
def product_squared(A, x):
    y = A @ x
    return y @ y


@numba.njit
def product_of_product(A, B, x):
    return (B @ (A @ x)).sum()


@numba.njit
def norm_of_product(A, x):
    return np.linalg.norm(A @ x)


@numba.njit
def quadratic_form(S, x):
    return np.dot(x, S @ x)


@numba.njit
def fourth_power(S):
    T = S @ S
    return (T @ T).sum()


@numba.njit
def product_into_rule(x, A, a):
    return weighted_square(A @ x, a)


@pytest.mark.parametrize("kernel, make", [
    (product_squared, lambda r: (r.standard_normal((4, 3)), r.standard_normal(3))),
    (product_of_product, lambda r: (r.standard_normal((4, 3)), r.standard_normal((2, 4)),
                                    r.standard_normal(3))),
    (norm_of_product, lambda r: (r.standard_normal((4, 3)), r.standard_normal(3))),
    (quadratic_form, lambda r: (r.standard_normal((3, 3)), r.standard_normal(3))),
    (fourth_power, lambda r: (r.standard_normal((3, 3)),)),
    (product_into_rule, lambda r: (r.standard_normal(3), r.standard_normal((4, 3)), 0.7)),
])
def test_blas_result_read_only_by_blas(kernel, make):
    check(kernel, *make(np.random.default_rng(3)))


def test_float32_matrix_product():
    r = np.random.default_rng(1)
    A, B = r.standard_normal((3, 4)).astype(np.float32), r.standard_normal((4, 2)).astype(np.float32)
    dA, dB = np.zeros_like(A), np.zeros_like(B)
    adcore.autodiff(Reverse, matmul_loss, Duplicated(A, dA), Duplicated(B, dB))
    C = A.astype(np.float64) @ B
    np.testing.assert_allclose(dA, 2 * C @ B.T, rtol=1e-4)
    np.testing.assert_allclose(dB, 2 * A.T @ C, rtol=1e-4)
    assert dA.dtype == np.float32


@numba.njit
def overwrites_operand(A, B):
    C = A @ B
    A[0, 0] = 0.0                  # the reverse of the product needs the old A: adcore copies it
    return np.sum(C * C) + np.sum(A)


@numba.njit
def dot_then_in_place(x, y):
    s = np.dot(x, y)
    x[:] = 0.5 * x
    return s * np.sum(x)


@numba.njit
def recurrent_products(A, x, steps):
    s = 0.0
    for _ in range(steps):
        x[:] = np.tanh(A @ x)      # x is overwritten every step after being read by BLAS
        s += np.sum(x)
    return s


@pytest.mark.parametrize("kernel, make", [
    (overwrites_operand, lambda r: (r.random((3, 4)), r.random((4, 2)))),
    (dot_then_in_place, lambda r: (r.random(5), r.random(5))),
    (recurrent_products, lambda r: (0.5 * r.random((3, 3)), r.random(3), 3)),
])
def test_blas_operands_overwritten_afterwards_are_copied(kernel, make):
    check(kernel, *make(np.random.default_rng(2)))


# -- rules on njit functions -----------------------------------------------------------------
@numba.njit
def bitwise_norm(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    bits = np.float64(s).view(np.int64)          # a bit-level first guess of sqrt(s):
    y = np.int64((bits >> 1) + (1023 << 51)).view(np.float64)   # not differentiable as such
    for _ in range(8):
        y = 0.5 * (y + s / y)                    # Newton steps to full precision
    return y


@adcore.rule(bitwise_norm)
@numba.njit
def bitwise_norm_reverse(x, dx, dret):
    # n = |x|                            dx += dn x / n
    n = bitwise_norm(x)
    for i in range(x.shape[0]):
        dx[i] += dret * x[i] / n


@numba.njit
def weighted_square(x, a):
    return a * x[0] ** 2


@adcore.rule(weighted_square)
@numba.njit
def weighted_square_reverse(x, a, dx, dret):
    # r = a x0^2                         dx0 += 2 a x0 dr,  da = x0^2 dr
    dx[0] += dret * 2.0 * a * x[0]
    return (dret * x[0] ** 2,)


@numba.njit
def uses_rules(x, a):
    return bitwise_norm(x) * 2.0 + weighted_square(x, a)


def test_rules_on_njit_functions():
    check(uses_rules, np.random.default_rng(2).random(4), 0.7)


def test_without_the_rule_the_callee_is_unsupported():
    with pytest.raises(UnsupportedError):
        adcore.gradient(Reverse, numba.njit(bitwise_norm.py_func), np.ones(2))


# -- rules on external symbols -----------------------------------------------------------------
@numba.cfunc("void(CPointer(float64), int64)")
def _c_square_inplace(x, n):
    for i in range(n):
        x[i] = x[i] * x[i]


llvm.add_symbol("adcore_test_square_inplace", _c_square_inplace.address)


@numba.njit
def square_inplace_forward(x, n, tx):
    # x_new = x_old^2                    t(x_new) = 2 x_old t(x_old)
    xs, ts = adcore.carray(x, n, np.float64), adcore.carray(tx, n, np.float64)
    for i in range(n):
        ts[i] = 2.0 * xs[i] * ts[i]


@numba.njit
def square_inplace_reverse_tangent(x, n, dx, tx, tdx):
    # dx_old = 2 sqrt(x) dx              t(dx_old) = 2 sqrt(x) t(dx) + dx t(x) / sqrt(x)
    if tdx == 0:
        return
    xs, ds, tds = adcore.carray(x, n, np.float64), adcore.carray(dx, n, np.float64), adcore.carray(tdx, n, np.float64)
    for i in range(n):
        tds[i] = 2.0 * math.sqrt(xs[i]) * tds[i]
        if tx != 0:
            tds[i] += ds[i] * adcore.carray(tx, n, np.float64)[i] / math.sqrt(xs[i])


@adcore.rule("adcore_test_square_inplace", forward=square_inplace_forward,
             reverse_tangent=square_inplace_reverse_tangent)
@numba.njit
def square_inplace_reverse(x, n, dx):
    # x_new = x_old^2                    dx_old = 2 x_old dx_new, with x_old = sqrt(x_new) (x >= 0)
    xs, ds = adcore.carray(x, n, np.float64), adcore.carray(dx, n, np.float64)
    for i in range(n):
        ds[i] = 2.0 * math.sqrt(xs[i]) * ds[i]


SQUARE_IR = """
declare void @adcore_test_square_inplace(ptr, i64)
define double @twice_squared(ptr %x, i64 %n) {
entry:
  call void @adcore_test_square_inplace(ptr %x, i64 %n)
  %v = load double, ptr %x
  ret double %v
}
"""


def test_rule_on_an_external_symbol():
    f = adcore.from_llvm(SQUARE_IR, "twice_squared")
    x = np.array([1.5, 2.0, 0.5])
    check(f, x, 3)


def test_hvp_through_a_rule_with_a_reverse_tangent():
    f = adcore.from_llvm(SQUARE_IR, "twice_squared")      # x0^2: H = diag(2, 0, 0)
    x, v = np.array([1.5, 2.0, 0.5]), np.array([0.3, -1.0, 2.0])
    np.testing.assert_allclose(adcore.hvp(f, x, v, 3), [0.6, 0.0, 0.0], rtol=1e-14)


llvm.add_symbol("adcore_test_square_inplace_plain", _c_square_inplace.address)
adcore.register_rule("adcore_test_square_inplace_plain", numba.njit(square_inplace_reverse.py_func),
                     forward=square_inplace_forward)


def test_hvp_through_a_rule_without_a_reverse_tangent_is_refused():
    f = adcore.from_llvm(SQUARE_IR.replace("square_inplace", "square_inplace_plain"), "twice_squared")
    with pytest.raises(UnsupportedError, match="custom rule that has no reverse_tangent"):
        adcore.hvp(f, np.array([1.5, 2.0]), np.ones(2), 2)


def test_a_reverse_tangent_needs_an_external_symbol():
    with pytest.raises(ADError, match="reverse_tangent is for the rule of an external symbol"):
        adcore.register_rule(weighted_square, weighted_square_reverse, reverse_tangent=square_inplace_forward)


def test_rule_operand_overwritten_afterwards_is_refused_without_extents():
    @numba.njit
    def overwrites_after_rule(x, a):
        r = weighted_square(x, a)
        x[0] = 0.0                 # the njit rule reads x[0] in the reverse pass
        return r
    with pytest.raises(UnsupportedError, match="overwritten after the call"):
        adcore.gradient(Reverse, overwrites_after_rule, np.ones(2), 0.5)


# -- a rule's reverse that allocates, on memory the kernel allocated ---------------------------------
@numba.njit
def product_into(out, a, b):
    out[:, :] = a @ b


@adcore.rule(product_into)
@numba.njit
def product_into_reverse(out, a, b, dout, da, db):
    da += dout @ b.T                 # temporaries: allocations inside the reverse
    db += a.T @ dout
    dout[:, :] = 0.0


@numba.njit
def squared_product(out, a, b):
    y = np.empty((a.shape[0], b.shape[1]), a.dtype)
    product_into(y, a, b)
    for i in range(y.shape[0]):
        for j in range(y.shape[1]):
            out[i, j] = y[i, j] ** 2


def test_rule_reverse_allocating_on_a_kernel_temporary():
    """The reverse receives the temporary's arrays as borrowed views: its own references
    must not free what the forward pass keeps (this crashed the process)."""
    r = np.random.default_rng(5)
    a, b = r.random((3, 4)), r.random((4, 3))
    da, db, dout = np.zeros((3, 4)), np.zeros((4, 3)), np.ones((3, 3))
    adcore.autodiff(Reverse, squared_product, Duplicated(np.zeros((3, 3)), dout),
                    Duplicated(a, da), Duplicated(b, db))
    y = a @ b
    np.testing.assert_allclose(da, (2 * y) @ b.T, rtol=1e-12)       # closed form
    np.testing.assert_allclose(db, a.T @ (2 * y), rtol=1e-12)


_carray = adcore.carray


@numba.njit
def _views(address, n):
    matrix = _carray(address, (n, 4), np.float64)
    column = _carray(address, (n * 2, np.int32(2)), np.float64)
    flat = _carray(address, n * 4, np.float64)
    return matrix[2, 1], matrix.strides, column[5, 1], column.strides, flat[9], flat.shape


def test_carray_views_an_address_with_a_shape():
    """A tuple shape gives a C-contiguous view of that shape (its strides follow from the
    shape and item size, whatever integer types the sizes have); an int, a 1-D view."""
    a = np.arange(12.0)
    assert _views(a.ctypes.data, 3) == (9.0, (32, 8), 11.0, (16, 8), 9.0, (12,))
