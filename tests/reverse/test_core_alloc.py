"""Kernels that allocate: temporaries, array expressions, reductions, copies and views."""
import numba
import numpy as np
import pytest

import adcore
from adcore import Active, ActivityError, Const, Duplicated, Reverse, ReverseWithPrimal, UnsupportedError
from fdcheck import check


@numba.njit
def temporary(x):
    t = np.empty(x.shape[0])
    for i in range(x.shape[0]):
        t[i] = x[i] * x[i]
    s = 0.0
    for i in range(x.shape[0]):
        s += t[i] * x[i]
    return s


@numba.njit
def array_expression(a, b, c):
    t = a * b + np.sin(c)
    return np.sum(t * t) + np.mean(t) + t.max()


@numba.njit
def constructors(a):
    z = np.zeros(3)
    z[0] = a[1] * 2.0
    o = np.ones_like(a)
    e = np.empty_like(a)
    e[:] = a * a
    return (o * a).sum() + z.sum() + e.sum()


@numba.njit
def copies_and_views(a):
    y = a.copy()
    y[0] = 5.0                 # overwriting the copy does not touch a
    return (y * y).sum() + a[1:].sum() + (a[::2] * 3.0).sum()


@numba.njit
def make_scaled(a, k):         # a helper returning a new array
    out = np.empty_like(a)
    for i in range(a.shape[0]):
        out[i] = a[i] * k
    return out


@numba.njit
def calls_helper(a, b):
    u = make_scaled(a, 2.0)
    v = make_scaled(np.exp(b), 0.5)
    return np.sum(u * v)


@numba.njit
def in_loop_allocation(x, steps):
    s = 0.0
    for t in range(steps):
        tmp = np.tanh(x * (t + 1.0))        # a new array every iteration
        s += tmp.sum() * x[t % x.shape[0]]
    return s


@numba.njit
def matrix_temporaries(A, x):
    y = np.zeros(A.shape[0])
    for i in range(A.shape[0]):
        for j in range(A.shape[1]):
            y[i] += A[i, j] * x[j]
    return np.sum(np.tanh(y) ** 2)


@pytest.mark.parametrize("kernel, make", [
    (temporary, lambda r: (r.random(5),)),
    (array_expression, lambda r: (r.random(4), r.random(4), r.random(4))),
    (constructors, lambda r: (r.random(4),)),
    (copies_and_views, lambda r: (r.random(5),)),
    (calls_helper, lambda r: (r.random(3), r.random(3))),
    (in_loop_allocation, lambda r: (r.random(3), 4)),
    (matrix_temporaries, lambda r: (r.standard_normal((3, 4)), r.standard_normal(4))),
])
def test_allocating_kernels_against_finite_differences(kernel, make):
    check(kernel, *make(np.random.default_rng(0)))


def test_repeated_calls_free_their_memory():
    from numba.core.runtime import _nrt_python as nrt
    x, dx = np.random.default_rng(1).random(50), np.zeros(50)
    adcore.autodiff(Reverse, in_loop_allocation, Duplicated(x, dx), 3)
    enabled = nrt.memsys_stats_enabled()
    nrt.memsys_enable_stats()
    try:
        alloc0, free0 = nrt.memsys_get_stats_mi_alloc(), nrt.memsys_get_stats_mi_free()
        for _ in range(200):
            adcore.autodiff(Reverse, in_loop_allocation, Duplicated(x, dx), 3)
        allocated = nrt.memsys_get_stats_mi_alloc() - alloc0
        freed = nrt.memsys_get_stats_mi_free() - free0
    finally:
        if not enabled:
            nrt.memsys_disable_stats()
    assert allocated >= 200 * 3 * 2          # primal and shadow temporaries each iteration
    assert allocated == freed


# -- kernels that return a new array: the caller seeds it with dret ------------------------
@numba.njit
def returns_array(x, a):
    y = np.empty_like(x)
    for i in range(x.shape[0]):
        y[i] = np.sin(x[i]) * a
    return y


@numba.njit
def returns_expression(x, W):
    return np.tanh(W @ x) * 2.0 + x[0]


def test_returned_array_is_seeded_by_dret():
    x, seed = np.random.default_rng(3).random(4), np.array([1.0, 2.0, 3.0, 4.0])
    dx = np.zeros(4)
    (_, da), y = adcore.autodiff(ReverseWithPrimal, returns_array, Duplicated(x, dx), Active(0.5),
                                 dret=seed)
    np.testing.assert_allclose(y, 0.5 * np.sin(x))
    np.testing.assert_allclose(dx, 0.5 * seed * np.cos(x))           # closed form
    assert da == pytest.approx(np.sum(seed * np.sin(x)))
    assert seed.tolist() == [1.0, 2.0, 3.0, 4.0]                     # the seed is not consumed


def test_returned_array_against_finite_differences():
    r = np.random.default_rng(4)
    x, W, seed = r.standard_normal(3), r.standard_normal((2, 3)), r.standard_normal(2)
    check(lambda x, W: float(seed @ returns_expression(x, W)), x, W, kernel=returns_expression,
          dret=seed)


def test_returned_array_needs_a_matching_seed():
    x, dx = np.ones(3), np.zeros(3)
    with pytest.raises(ActivityError, match="dret="):
        adcore.autodiff(Reverse, returns_array, Duplicated(x, dx), Active(0.5))
    with pytest.raises(ActivityError, match="shape"):
        adcore.autodiff(Reverse, returns_array, Duplicated(x, dx), Active(0.5), dret=np.ones(2))
    assert not dx.any()                                               # nothing was accumulated


@numba.njit
def logs_and_returns_matrix(x, log):
    log[0] += 1.0                          # a side effect on an argument
    return np.sin(x).reshape((3, 4)) * 2.0


@numba.njit
def returns_fortran_order(x):
    return np.sin(x).reshape((3, 4)).T.copy().T


def test_returned_array_seed_of_another_shape_undoes_side_effects():
    x, dx, log = np.arange(12.0), np.zeros(12), np.zeros(1)
    for dret in (np.ones((4, 3)), np.ones((12,)).reshape(12, 1), np.ones((2, 6))):
        with pytest.raises(ActivityError, match=r"dret has shape .* returned an array of shape \(3, 4\)"):
            adcore.autodiff(Reverse, logs_and_returns_matrix, Duplicated(x, dx), Const(log), dret=dret)
        assert log[0] == 0.0 and not dx.any()       # the kernel's write was undone
    adcore.autodiff(Reverse, logs_and_returns_matrix, Duplicated(x, dx), Const(log), dret=np.ones((3, 4)))
    assert log[0] == 1.0
    np.testing.assert_allclose(dx, 2.0 * np.cos(x))


def test_returned_array_in_another_layout_is_refused():
    with pytest.raises(UnsupportedError, match="not C-contiguous"):
        adcore.autodiff(Reverse, returns_fortran_order, Duplicated(np.arange(12.0), np.zeros(12)),
                        dret=np.ones((3, 4)))


@numba.njit
def views_inside(w, x):
    wt = w.reshape(-1)                     # a view through Numba's reshape helper
    s = 0.0
    for i in range(wt.shape[0]):
        s += wt[i] * wt[i] * x[i % x.shape[0]]
    return s + np.sum(w.T @ x[:2]) + np.sum(w.ravel() * 2.0)


def test_views_made_inside_the_kernel():
    r = np.random.default_rng(5)
    check(views_inside, r.random((2, 3)), r.random(3))


# -- numpy functions inside kernels -------------------------------------------------------------
@numba.njit
def iterate_elements(x):
    s = 0.0
    for v in x:
        s += v * v
    return s


@numba.njit
def broadcasting(A, x):
    return np.sum(np.tanh(A * x[None, :] + x))


@numba.njit
def vector_norm(x):
    return np.linalg.norm(x) * 2.0


@numba.njit
def running_sums(x):
    return np.sum(np.cumsum(x) ** 2)


@numba.njit
def choose(x):
    return np.sum(np.where(x > 0.5, x * x, np.sin(x)))


@numba.njit
def statistics(x):
    return np.max(x) + np.min(x) + np.mean(x ** 3) + np.std(x)


@numba.njit
def rebinding(x, n):
    y = x.copy()
    for _ in range(n):
        y = y * x + 0.1                 # a new array each iteration, the old one released
    return y.sum()


@numba.njit
def reshaped_product(A):
    return np.sum(A.reshape(3, 2) @ A)


@pytest.mark.parametrize("kernel, make", [
    (iterate_elements, lambda r: (r.random(5),)),
    (broadcasting, lambda r: (r.random((3, 4)), r.random(4))),
    (vector_norm, lambda r: (r.random(5),)),
    (running_sums, lambda r: (r.random(6),)),
    (choose, lambda r: (r.random(7),)),
    (statistics, lambda r: (r.random(5),)),
    (rebinding, lambda r: (r.random(4), 3)),
    (reshaped_product, lambda r: (r.random((2, 3)),)),
])
def test_numpy_functions_inside_kernels(kernel, make):
    check(kernel, *make(np.random.default_rng(6)))


@numba.njit
def contiguous_copy_of_a_view(x):
    B = np.ascontiguousarray(x[::2])       # the array struct flows through a phi of structs
    return np.sum(B * B) + np.sum(np.ascontiguousarray(x) * x)


def test_array_structs_merged_by_phis():
    check(contiguous_copy_of_a_view, np.random.default_rng(9).random(7))


@numba.njit
def contiguous_const(x, w):
    B = np.ascontiguousarray(x[::2])       # x is Const: itself or a copy, merged in one pointer
    return np.sum(B * w)


def test_constant_merged_with_a_copy_gets_a_scratch_shadow():
    x, w = np.random.default_rng(10).random(8), np.random.default_rng(11).random(4)
    gx, gw = adcore.gradient(Reverse, contiguous_const, adcore.Const(x), w)
    assert gx is None
    np.testing.assert_allclose(gw, x[::2])                            # closed form
