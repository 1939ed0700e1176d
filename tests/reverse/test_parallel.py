"""Kernels compiled with ``numba.njit(parallel=True)``: ``prange`` loops, reductions and the
array expressions Numba parallelises differentiate through every entry point.

The oracle is the same Python function compiled with ``parallel=False`` (its gradient
must agree to rounding) and central finite differences (``tests/fdcheck.py``).  Each
kernel's source is defined once and compiled both ways at module level, so the
compiles are shared by the tests.
"""
import math
import os

import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from numba import prange

import adcore
from adcore import BatchDuplicated, Const, Duplicated, Forward, Reverse, ReverseWithPrimal
from adcore.reverse import parallel_loops
from bench.parallel import flat_stencil, lennard_jones, stencil as stencil_rows   # writes v[i, j]: in its row
from fdcheck import check, fd_gradient


def independent(a, x, out):
    for i in prange(x.shape[0]):
        out[i] = math.sin(a * x[i]) * x[i]
    return out.sum()


def nested_serial(x, w, out):
    for i in prange(x.shape[0]):
        s = 0.0
        for j in range(w.shape[0]):
            s += math.tanh(w[j] * x[i] + 0.1 * j)
        out[i] = s
    return np.sum(out ** 2)


def rows(X, w):
    total = 0.0
    for i in prange(X.shape[0]):
        r = 0.0
        for j in range(X.shape[1]):
            r += X[i, j] * w[j]
        total += math.exp(-r * r)
    return total


def cached_inner(x, c):
    """An inner loop whose values the reverse pass needs (a running product)."""
    total = 0.0
    for i in prange(x.shape[0]):
        p = 1.0
        for j in range(c.shape[0]):
            p = p * math.cos(c[j] * x[i]) + 0.5
        total += p
    return total


def array_expression(x, y):
    return np.sum(np.exp(-x * y) + x ** 2)


def pairwise(X):
    """``D[i] = ...``: Numba compares the addresses of ``D`` and the row's value before it
    copies one into the other (no memory is touched); the row is written whole."""
    n = X.shape[0]
    D = np.zeros((n, n))
    for i in prange(n):
        D[i] = np.sqrt(np.sum((X[i] - X) ** 2, axis=1) + 1e-3)
    return np.sum(D)


def scatter(x, idx, out):
    for i in prange(x.shape[0]):
        out[idx[i]] += x[i] ** 2
    return out.sum()


def stencil(u, steps):
    n = u.shape[0]
    v = np.empty_like(u)
    for _ in range(steps):
        for i in prange(1, n - 1):
            v[i] = u[i] + 0.1 * (u[i - 1] - 2.0 * u[i] + u[i + 1]) + 0.01 * math.sin(u[i])
        v[0] = u[0]
        v[n - 1] = u[n - 1]
        u[:] = v
    return np.sum(u ** 2)


def rows_overlap(u, v):
    """``v[i, j]`` for ``j`` up to ``u``'s width: given a narrower ``v``, iteration ``i``
    writes into the rows after its own, which other iterations write too (Numba's parallel
    primal races there, so its oracle is the serial build's gradient, not differences)."""
    m, p = u.shape
    for i in prange(m - 2):
        for j in range(p):
            v[i, j] = math.sin(u[i, j]) * (i + 1.0)
    return np.sum(v * v)


def wide_band(u, v):
    """Reads ``u`` four rows before and after the loop index's: pieces of the loop two
    apart read disjoint rows only when pieces are 8 rows or more (checked at each call)."""
    m, p = u.shape
    for i in prange(4, m - 4):
        for j in range(p):
            v[i, j] = u[i - 4, j] * u[i + 4, j] + math.sin(u[i, j])
    return np.sum(v * v)


def float32_sum(x):
    s = np.float32(0.0)
    for i in prange(x.shape[0]):
        s += x[i] * x[i]
    return s


def gather(w, x, idx):
    """Every iteration reads a shared parameter at a data-dependent index."""
    s = 0.0
    for i in prange(x.shape[0]):
        s += math.tanh(w[idx[i]] * x[i])
    return s


def in_place(x):
    for i in prange(x.shape[0]):
        x[i] = math.sin(x[i]) * 2.0
    return np.sum(x * x)


def overwritten_after(x, out):
    for i in prange(x.shape[0]):
        out[i] = x[i] ** 2
    for i in range(x.shape[0]):
        x[i] = 0.0
    return out.sum()


def expression_2d(A, B):
    """A parallel array expression over 2-D arrays: one parfor over both dimensions, its
    arrays read at each element (shared shadows, pieces of rows)."""
    C = np.exp(A) * B
    return np.sum(C * C)


def read_in_row(x, w):
    """``x[i, j]`` and ``w[i, j]`` read only in the loop index's row: shared shadows."""
    s = 0.0
    for i in prange(x.shape[0]):
        for j in range(x.shape[1]):
            s += math.exp(x[i, j]) * w[i, j]
    return s


def time_steps(u, v, steps):
    """A loop reads ``u``, the next overwrites it: the pieces keep what they read of it."""
    n = u.shape[0]
    for _ in range(steps):
        for i in prange(1, n):
            v[i] = math.sin(u[i]) + 0.5 * u[i - 1]
        v[0] = 0.5 * u[0]
        for i in prange(n):
            u[i] = v[i]
    return np.sum(u * u)


def two_inputs(x, y, out):
    for i in prange(x.shape[0]):
        out[i] = x[i] * math.exp(y[i])
    return out.sum()


def moving_range(x, out):
    """A parallel loop whose range changes from step to step (its bounds are refilled each
    time it runs)."""
    n = x.shape[0]
    t = 0.0
    for s in range(3):
        for i in prange(s, n):
            out[i] = math.sin(x[i]) * (s + 1.0)
        for i in range(n):
            t += out[i] * out[i]
    return t


def copy_range(x, out):
    """A copy at the loop index: Numba's chunk function is one memcpy of the piece's range."""
    for i in prange(x.shape[0]):
        out[i] = x[i]
    return np.sum(out * out * x)


def shifted_copy(x, out):
    """A copy from one element along: not the piece's own range of ``x``."""
    for i in prange(x.shape[0] - 1):
        out[i] = x[i + 1]
    return np.sum(out * out * x)


SOURCES = [copy_range, shifted_copy, moving_range, independent, nested_serial, rows, cached_inner, array_expression, lennard_jones,
           pairwise, scatter, stencil, rows_overlap, wide_band, float32_sum, gather, in_place, overwritten_after, two_inputs,
           expression_2d, read_in_row, time_steps]
PARALLEL = {f.__name__: numba.njit(parallel=True)(f) for f in SOURCES}
SERIAL = {f.__name__: numba.njit(f) for f in SOURCES}
PARALLEL["stencil_rows"], SERIAL["stencil_rows"] = numba.njit(parallel=True)(stencil_rows), numba.njit(stencil_rows)
PARALLEL["flat_stencil"], SERIAL["flat_stencil"] = numba.njit(parallel=True)(flat_stencil), numba.njit(flat_stencil)
for alias, name in [("stencil_band", "stencil_rows"), ("wide_band_long", "wide_band")]:
    PARALLEL[alias], SERIAL[alias] = PARALLEL[name], SERIAL[name]
PARALLEL["overwritten_after_strided"] = PARALLEL["overwritten_after"]
SERIAL["overwritten_after_strided"] = SERIAL["overwritten_after"]

rng = np.random.default_rng(0)
X = rng.random((9, 4))
POS = np.array([[i % 3, (i // 3) % 3, i // 9] for i in range(10)], float) * 1.3 + rng.random((10, 3)) * 0.2
IDX = rng.integers(0, 4, 12)
ARGUMENTS = {
    "independent": lambda: (0.7, rng.random(13), Const(np.zeros(13))),
    "nested_serial": lambda: (rng.random(11), rng.random(5), Const(np.zeros(11))),
    "rows": lambda: (X.copy(), rng.random(4)),
    "cached_inner": lambda: (rng.random(10), rng.random(6)),
    "array_expression": lambda: (rng.random(17), rng.random(17)),
    "lennard_jones": lambda: (POS.copy(),),
    "pairwise": lambda: (X[:6, :3].copy(),),
    "scatter": lambda: (rng.random(12), Const(IDX), Const(np.zeros(4))),
    "stencil": lambda: (rng.random(20), Const(4)),
    "stencil_rows": lambda: (rng.random((9, 7)), Const(np.zeros((9, 7))), Const(3)),
    "rows_overlap": lambda: (rng.random((12, 6)), Const(np.zeros((12, 3)))),
    "stencil_band": lambda: (rng.random((70, 5)), Const(np.zeros((70, 5))), Const(2)),
    "wide_band": lambda: (rng.random((40, 3)), Const(np.zeros((40, 3)))),
    "wide_band_long": lambda: (rng.random((300, 3)), Const(np.zeros((300, 3)))),
    "float32_sum": lambda: (rng.random(15).astype(np.float32),),
    "gather": lambda: (rng.random(4), rng.random(12), Const(IDX)),
    "in_place": lambda: (rng.random(11),),
    "overwritten_after": lambda: (rng.random(11), Const(np.zeros(11))),
    "overwritten_after_strided": lambda: (rng.random(22)[::2], Const(np.zeros(11))),
    "two_inputs": lambda: (rng.random(9), rng.random(9), Const(np.zeros(9))),
    "moving_range": lambda: (rng.random(8), Const(np.zeros(8))),
    "expression_2d": lambda: (rng.random((70, 5)), rng.random((70, 5))),
    "read_in_row": lambda: (rng.random((70, 5)), rng.random((70, 5))),
    "time_steps": lambda: (rng.random(300) - 0.5, Const(np.zeros(300)), Const(3)),
    "flat_stencil": lambda: (rng.random(320), Const(np.zeros(320)), Const(4), Const(2)),
    "copy_range": lambda: (rng.random(40), Const(np.zeros(40))),
    "shifted_copy": lambda: (rng.random(40), Const(np.zeros(40))),
}

# where the reverse pass of every parallel loop runs on Numba's threads, and where (and
# why) the kernel's loops are differentiated serially
ON_THREADS = ["independent", "rows", "cached_inner", "array_expression", "lennard_jones",
              "float32_sum", "gather", "two_inputs", "stencil", "overwritten_after", "moving_range",
              "stencil_rows", "rows_overlap", "stencil_band", "wide_band", "wide_band_long", "pairwise",
              "overwritten_after_strided", "copy_range", "flat_stencil"]
RUN_AGAIN = {"pairwise"}    # its reverse needs the addresses of the temporaries it allocates: no tape
SERIALLY = {"scatter": "read and written", "in_place": "read and written"}


def _copied(args):
    return [Const(a.val.copy()) if isinstance(a, Const) and isinstance(a.val, np.ndarray)
            else a.copy() if isinstance(a, np.ndarray) else a for a in args]


def _assert_same(got, expected, rtol):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        if e is None:
            assert g is None
        else:
            np.testing.assert_allclose(g, e, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("name", sorted(ARGUMENTS))
def test_parallel_gradient_equals_serial_gradient(name):
    args = ARGUMENTS[name]()
    rtol = 1e-5 if name == "float32_sum" else 1e-12
    got = adcore.gradient(Reverse, PARALLEL[name], *_copied(args))
    expected = adcore.gradient(Reverse, SERIAL[name], *_copied(args))
    _assert_same(got, expected, rtol)


@pytest.mark.parametrize("name", ["independent", "nested_serial", "rows", "cached_inner",
                                  "lennard_jones", "pairwise", "stencil", "gather", "in_place",
                                  "overwritten_after", "moving_range", "stencil_rows", "stencil_band",
                                  "wide_band", "copy_range", "shifted_copy", "flat_stencil"])
def test_parallel_gradient_matches_finite_differences(name):
    values = [a.val if isinstance(a, Const) else a for a in ARGUMENTS[name]()]
    check(PARALLEL[name], *values, rtol=1e-5, atol=1e-6)


def test_primal_value_and_side_effects_as_a_call():
    x = rng.random(13)
    out, expected_out = np.zeros(13), np.zeros(13)
    (da, dx, _), value = adcore.autodiff(ReverseWithPrimal, PARALLEL["independent"], adcore.Active(0.4),
                                         Duplicated(x, np.zeros(13)), Duplicated(out, np.zeros(13)))
    expected = PARALLEL["independent"](0.4, x, expected_out)
    np.testing.assert_allclose(value, expected, rtol=1e-14)
    np.testing.assert_allclose(out, expected_out, rtol=1e-14)
    np.testing.assert_allclose(da, np.sum(x * x * np.cos(0.4 * x)), rtol=1e-12)


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_count_does_not_change_the_gradient(threads):
    before = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        x = POS.copy()
        got = adcore.gradient(Reverse, PARALLEL["lennard_jones"], x)
        expected = adcore.gradient(Reverse, SERIAL["lennard_jones"], x)
        _assert_same(got, expected, 1e-12)
    finally:
        numba.set_num_threads(before)


def test_kernel_still_runs_in_parallel_after_differentiation():
    """Differentiating compiles the kernel's loops serially for adcore only: the user's
    dispatcher keeps its parallel loops (Numba's parfor diagnostics list them)."""
    x = rng.random(30)
    adcore.gradient(Reverse, PARALLEL["float32_sum"], x.astype(np.float32))
    PARALLEL["array_expression"](x, x)
    adcore.gradient(Reverse, PARALLEL["array_expression"], x, x)
    signature = PARALLEL["array_expression"].signatures[0]
    overload = PARALLEL["array_expression"].overloads[signature]
    assert "numba_parallel_for" in overload.library.get_llvm_str()


@pytest.mark.parametrize("name", ["rows", "pairwise", "cached_inner"])
def test_forward_mode_agrees_with_reverse(name):
    args = [a for a in ARGUMENTS[name]()]
    k = 0                                  # direction in the first argument
    v = rng.standard_normal(args[k].shape)
    grad = adcore.gradient(Reverse, PARALLEL[name], *_copied(args))[k]
    anns = [Duplicated(args[k].copy(), v)] + [Const(a) for a in args[1:]]
    tangent = adcore.autodiff(Forward, PARALLEL[name], *anns)
    np.testing.assert_allclose(tangent, np.sum(grad * v), rtol=1e-10)
    vs = (v, rng.standard_normal(args[k].shape))
    anns = [BatchDuplicated(args[k].copy(), tuple(w.copy() for w in vs))] + [Const(a) for a in args[1:]]
    tangents = adcore.autodiff(Forward, PARALLEL[name], *anns)
    np.testing.assert_allclose(tangents, [np.sum(grad * w) for w in vs], rtol=1e-10)


def test_hessian_vector_product_through_a_parallel_loop():
    x, c = rng.random(10), rng.random(6)
    v = rng.standard_normal(10)
    got = adcore.hvp(PARALLEL["cached_inner"], x, v, c)
    expected = adcore.hvp(SERIAL["cached_inner"], x, v, c)
    np.testing.assert_allclose(got, expected, rtol=1e-10)
    eps = 1e-6
    fd = (adcore.gradient(Reverse, SERIAL["cached_inner"], x + eps * v, Const(c))[0]
          - adcore.gradient(Reverse, SERIAL["cached_inner"], x - eps * v, Const(c))[0]) / (2 * eps)
    np.testing.assert_allclose(got, fd, rtol=1e-5, atol=1e-6)


# -- generated loop bodies -----------------------------------------------------------------
UNARY = {"sin": "math.sin({})", "exp": "math.exp(-({})**2)", "square": "({0}) * ({0})",
         "tanh": "math.tanh({})"}
INDEX = {"own": "i", "shifted": "(i + 1) % n", "reversed": "n - 1 - i", "gathered": "idx[i]"}
COMBINE = {"store": "out[i] = {}", "sum": "total += {}", "scatter": "out[idx[i]] += {}"}


def _both_builds(src):
    """The ``parallel=True`` and ``parallel=False`` builds of function ``kernel`` in ``src``."""
    scope = {"math": math, "np": np, "prange": prange}
    exec(src, scope)
    return numba.njit(parallel=True)(scope["kernel"]), numba.njit(scope["kernel"])


def _generated(unary, index, combine):
    term = UNARY[unary].format(f"w[0] * x[{INDEX[index]}] + x[i]")
    body = COMBINE[combine].format(term)
    src = (f"def kernel(x, w, idx, out):\n"
           f"    n = x.shape[0]\n"
           f"    total = 0.0\n"
           f"    for i in prange(n):\n"
           f"        {body}\n"
           f"    return total + np.sum(out * out)\n")
    return _both_builds(src)


_KERNELS = {}


def _agrees_with_serial_and_differences(par, ser, u, *consts):
    """The parallel build's gradient in ``u`` (the other arguments constant) equals the
    serial build's and central differences of the serial build."""
    args = (u, *(Const(c) for c in consts))
    got = adcore.gradient(Reverse, par, *_copied(args))
    expected = adcore.gradient(Reverse, ser, *_copied(args))
    _assert_same(got, expected, 1e-12)
    fd = fd_gradient(ser, [u, *consts], {})
    np.testing.assert_allclose(got[0], fd[0], rtol=1e-5, atol=1e-5)


def _builds(key, make):
    """The two builds of generated kernel ``key``, made once by ``make()``."""
    if key not in _KERNELS:
        _KERNELS[key] = make()
    return _KERNELS[key]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(unary=st.sampled_from(sorted(UNARY)), index=st.sampled_from(sorted(INDEX)),
       combine=st.sampled_from(sorted(COMBINE)), n=st.integers(1, 9), seed=st.integers(0, 99))
def test_generated_parallel_loops_agree_with_serial_and_differences(unary, index, combine, n, seed):
    par, ser = _builds((unary, index, combine), lambda: _generated(unary, index, combine))
    r = np.random.default_rng(seed)
    x, w = r.random(n), r.random(1) + 0.5
    idx = r.integers(0, n, n)
    out = r.random(n)
    args = (x, w, Const(idx), Const(out))
    got = adcore.gradient(Reverse, par, *_copied(args))
    expected = adcore.gradient(Reverse, ser, *_copied(args))
    _assert_same(got, expected, 1e-12)

    # serially: a scatter with repeated indices races in parallel
    fd = fd_gradient(ser, [x, w, idx, out], {})
    for k in (0, 1):
        np.testing.assert_allclose(got[k], fd[k], rtol=1e-5, atol=1e-5)


def _generated_rows(unary, up, down, column):
    """A loop writing ``out[i, j]`` from ``u`` read ``up`` rows above, ``down`` rows below
    and ``column`` columns aside."""
    term = UNARY[unary].format(f"u[i - {up}, j + {column}]")
    src = (f"def kernel(u, out):\n"
           f"    m, p = u.shape\n"
           f"    for i in prange(2, m - 2):\n"
           f"        for j in range(1, p - 1):\n"
           f"            out[i, j] = {term} * u[i + {down}, j] + u[i, j]\n"
           f"    return np.sum(out * out)\n")
    return _both_builds(src)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(unary=st.sampled_from(sorted(UNARY)), up=st.integers(-2, 2), down=st.integers(-2, 2),
       column=st.integers(-1, 1), m=st.sampled_from([5, 9, 40, 90]), seed=st.integers(0, 99))
def test_generated_row_bands_agree_with_serial_and_differences(unary, up, down, column, m, seed):
    """Short loops fail the band check (pieces too narrow) and run serially, long ones run
    every other piece at once: both must give the serial gradient."""
    par, ser = _builds(("rows", unary, up, down, column), lambda: _generated_rows(unary, up, down, column))
    r = np.random.default_rng(seed)
    _agrees_with_serial_and_differences(par, ser, r.random((m, 4)), np.zeros((m, 4)))


def _generated_steps(unary, index, copy_loop):
    """Time steps: a parallel loop reads ``u`` (at ``index``) into ``v``, the next loop
    (``copy_loop``: prange or range) overwrites ``u`` with ``v``."""
    term = UNARY[unary].format(f"u[{INDEX[index]}]")
    src = (f"def kernel(u, v, idx, steps):\n"
           f"    n = u.shape[0]\n"
           f"    for _ in range(steps):\n"
           f"        for i in prange(1, n):\n"
           f"            v[i] = {term} + 0.5 * u[i]\n"
           f"        v[0] = 0.5 * u[0]\n"                   # (not fused with the next loop)
           f"        for i in {copy_loop}(n):\n"
           f"            u[i] = v[i]\n"
           f"    return np.sum(u * u)\n")
    return _both_builds(src)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(unary=st.sampled_from(sorted(UNARY)), index=st.sampled_from(sorted(INDEX)),
       copy_loop=st.sampled_from(["prange", "range"]), n=st.integers(1, 40), steps=st.integers(0, 3),
       seed=st.integers(0, 99))
def test_generated_time_steps_agree_with_serial_and_differences(unary, index, copy_loop, n, steps, seed):
    """An array a parallel loop reads and the kernel overwrites after it: the chunks keep
    the values they read on their tapes (no copy of the array) or the kernel copies it."""
    par, ser = _builds(("steps", unary, index, copy_loop), lambda: _generated_steps(unary, index, copy_loop))
    r = np.random.default_rng(seed)
    _agrees_with_serial_and_differences(par, ser, r.random(n) - 0.5, np.zeros(n), r.integers(0, n, n), steps)


def _generated_flat(unary, up, down, side, guarded):
    """A loop over a grid of rows of ``p`` stored flat, reading ``u`` ``up`` rows above,
    ``down`` rows below and ``side`` columns aside (``u[k - up * p + side]``), under a test
    that keeps the reads on the grid (``guarded``), or not: then the first iterations' reads
    wrap around to the grid's end, as Numba's negative indices do."""
    above = UNARY[unary].format(f"u[k - {up} * p + {side}]")
    if guarded:
        read = f"{above} * u[k + {down} * p] + u[k]"
        test = f"{up} <= k // p < n // p - {down} and 1 <= k % p < p - 1"
    else:
        read, test = f"{above} + u[k]", "True"
    src = (f"def kernel(u, out, p):\n"
           f"    n = u.shape[0]\n"
           f"    for k in prange(n):\n"
           f"        if {test}:\n"
           f"            out[k] = {read}\n"
           f"        else:\n"
           f"            out[k] = 0.5 * u[k]\n"
           f"    return np.sum(out * out)\n")
    return _both_builds(src)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(unary=st.sampled_from(sorted(UNARY)), up=st.integers(0, 2), down=st.integers(0, 2),
       side=st.integers(-1, 1), guarded=st.booleans(), rows=st.sampled_from([1, 3, 12, 70]),
       p=st.sampled_from([3, 4, 7]), seed=st.integers(0, 99))
def test_generated_flat_grid_reads_agree_with_serial_and_differences(unary, up, down, side, guarded, rows, p,
                                                                      seed):
    """Reads a whole number of rows away on a flat grid are a band around the loop index:
    one shared shadow where the pieces are long enough and what the first piece's reads
    wrap around to lies past the other pieces that run with it, else the pieces one after
    another: both must give the serial gradient."""
    if not guarded:      # reads on the grid or wrapped around once, never past its end
        side, rows = side if up else min(side, 0), max(rows, up + 1)
    par, ser = _builds(("flat", unary, up, down, side, guarded),
                       lambda: _generated_flat(unary, up, down, side, guarded))
    r = np.random.default_rng(seed)
    _agrees_with_serial_and_differences(par, ser, r.random(rows * p) + 0.1, np.zeros(rows * p), p)


def test_reads_rows_away_on_a_flat_grid_share_one_shadow():
    """The flat stencil's first loop reads ``u[k - p]`` .. ``u[k + p]`` under a test that
    keeps them on the grid: ``u`` is read in a band (one shared shadow, every other piece
    at once), not given a private shadow per thread."""
    compiled = adcore.compile_gradient(Reverse, PARALLEL["flat_stencil"], *_annotated(ARGUMENTS["flat_stencil"]()))
    first = compiled.parallel_loops[0]
    assert "read in a band of rows (a shared shadow, every other piece at once): 1" in first, first
    assert "read elsewhere (a private shadow per thread, added after the loop): 0" in first, first


def test_a_loop_reading_an_array_overwritten_after_it_keeps_what_it_reads():
    """The plan report says so, and the reverse reads no copy: the forward pass copies
    nothing (the chunks' tapes hold the values, counted in the bytes cached)."""
    par, _ = _generated_steps("sin", "own", "prange")
    u = rng.random(64)
    compiled = adcore.compile_gradient(Reverse, par, Duplicated(u, np.zeros(64)), Const(np.zeros(64)),
                                       Const(np.zeros(64, np.int64)), Const(2))
    assert "the values it reads from arrays included" in compiled.parallel_loops[0], compiled.parallel_loops
    threaded = [line for line in compiled.parallel_loops if "reverse runs on Numba's threads" in line]
    # each threaded loop's range (refilled at each step) is copied; u is not (the three loops:
    # the step, the copy, a memcpy of its range in Numba's chunk function, and the sum)
    assert compiled.adjoint_ir.count("call ptr @ad.copy.operand(") == len(threaded) == 3


def test_callee_with_parallel_loops_is_refused_with_its_reason():
    @numba.njit(parallel=True)
    def callee(x):
        s = 0.0
        for i in prange(x.shape[0]):
            s += x[i] ** 2
        return s

    @numba.njit
    def caller(x):
        return callee(x) + 1.0

    with pytest.raises(adcore.UnsupportedError, match="a call to a parallel=True function"):
        adcore.gradient(Reverse, caller, np.ones(4))


def test_readme_example_runs_and_matches_finite_differences():
    import pathlib
    import re
    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "def energy(pos)" in b)
    scope = {}
    exec(compile(block, "README.md", "exec"), scope)
    fd = fd_gradient(scope["energy"].py_func, [scope["pos"]], {})[0]
    np.testing.assert_allclose(scope["dpos"], fd, rtol=1e-5, atol=1e-6)


def _annotated(args):
    return [a if isinstance(a, Const) else adcore.Active(a) if isinstance(a, float)
            else Duplicated(a, np.zeros_like(a)) for a in args]


@pytest.mark.parametrize("name", ON_THREADS)
def test_reverse_of_these_loops_runs_on_threads(name):
    compiled = adcore.compile_gradient(Reverse, PARALLEL[name], *_annotated(ARGUMENTS[name]()))
    assert compiled.parallel_loops
    lines = compiled.parallel_loops
    if name in RUN_AGAIN:      # its np.zeros((n, n)) is a parallel loop differentiated serially
        lines = [line for line in lines if "written in the loop index's row" in line]
    how = "iterations run again" if name in RUN_AGAIN else "tape of its own"
    assert lines and all("reverse runs on Numba's threads" in line and how in line for line in lines), \
        compiled.parallel_loops


def test_the_bytes_the_pieces_keep_count_in_last_cached_bytes():
    """A running product over 6 factors per point: the pieces' tapes grow with the points,
    and the serial build keeps as much."""
    c = rng.random(6)
    kept = {}
    for n in (2000, 4000):
        adcore.gradient(Reverse, PARALLEL["cached_inner"], rng.random(n), c)
        kept[n] = adcore.last_cached_bytes()
        adcore.gradient(Reverse, SERIAL["cached_inner"], rng.random(n), c)
        serial = adcore.last_cached_bytes()
        assert 0.5 * serial <= kept[n] <= 2 * serial, (kept[n], serial)
    assert 1.8 <= kept[4000] / kept[2000] <= 2.2, kept


@numba.njit(parallel=True)
def raises_after_its_loop(x, c):
    total = 0.0
    for i in prange(x.shape[0]):
        p = 1.0
        for j in range(c.shape[0]):
            p = p * math.cos(c[j] * x[i]) + 0.5
        total += p
    if total > 0.0:
        raise ValueError("after the loop")
    return total


def _resident_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_gradient_failing_after_a_parallel_loop_releases_the_pieces_tapes():
    """Each call's pieces keep ~5 MB of values; the kernel raises before the reverse."""
    x, c = rng.random(100_000), rng.random(6)
    for _ in range(3):
        with pytest.raises(ValueError, match="after the loop"):
            adcore.gradient(Reverse, raises_after_its_loop, x, c)
    before = _resident_bytes()
    for _ in range(60):
        with pytest.raises(ValueError, match="after the loop"):
            adcore.gradient(Reverse, raises_after_its_loop, x, c)
    assert _resident_bytes() - before < 100 * 2 ** 20


def test_arrays_read_at_neighbouring_rows_share_one_shadow():
    """The stencil reads ``u`` at rows i - 1 and i + 1: no private shadow per thread, the
    reverses of every other piece run at once; its copy loop reads ``v`` in its row: a
    shared shadow, every piece at once."""
    compiled = adcore.compile_gradient(Reverse, PARALLEL["stencil_rows"], *_annotated(ARGUMENTS["stencil_band"]()))
    steps = [line for line in compiled.parallel_loops if "written in the loop index's row" in line]
    assert len(steps) == 2, compiled.parallel_loops
    assert all("added after the loop): 0" in line for line in steps)
    assert "every other piece at once): 1" in steps[0] and "every other piece at once): 0" in steps[1], steps


def test_without_tapes_an_overwritten_array_is_copied_or_its_loop_runs_serially(monkeypatch):
    """With chunk tapes off the forward pass copies a contiguous array the kernel
    overwrites after the loop, for the loop's reverse to read; a strided one is not copied,
    and its loop runs serially, saying why.  Both give the serial gradient."""
    monkeypatch.setenv("ADCORE_CHUNK_TAPES", "0")
    monkeypatch.setattr(parallel_loops, "_tapes", {})
    kernel = numba.njit(parallel=True)(overwritten_after)          # nothing compiled for it yet
    for x, how in [(rng.random(11), "iterations run again"), (rng.random(22)[::2], "overwritten after the loop")]:
        args = (x, Const(np.zeros(11)))
        compiled = adcore.compile_gradient(Reverse, kernel, *_annotated(args))
        assert how in compiled.parallel_loops[0], compiled.parallel_loops
        got = adcore.gradient(Reverse, kernel, *_copied(args))
        _assert_same(got, adcore.gradient(Reverse, SERIAL["overwritten_after"], *_copied(args)), 1e-12)


def test_arrays_read_in_the_loop_index_row_share_one_shadow():
    """``x[i, j]`` with ``j`` over the row: each piece adds into its own rows of the
    shadow, one shared shadow, every piece at once (no private copies, no two halves)."""
    @numba.njit(parallel=True)
    def weighted(x, w):
        s = 0.0
        for i in prange(x.shape[0]):
            for j in range(x.shape[1]):
                s += math.exp(x[i, j]) * w[i, j]
        return s

    x, w = rng.random((40, 7)), rng.random((40, 7))
    line = adcore.compile_gradient(Reverse, weighted, Duplicated(x, np.zeros_like(x)), Const(w)).parallel_loops[0]
    assert "reduced (shared shadows): 3" in line and "band of rows (a shared shadow, every other piece " \
        "at once): 0" in line and "added after the loop): 0" in line, line
    got = adcore.gradient(Reverse, weighted, x, Const(w))[0]
    np.testing.assert_allclose(got, np.exp(x) * w, rtol=1e-13)


ARRAY_EXPRESSIONS = {"exp_times": "np.exp(A) * B", "tanh_sum": "np.tanh(A + B) * A",
                     "sin_square": "np.sin(A) ** 2 + B * B"}


def _array_expression(name):
    src = (f"def kernel(A, B):\n"
           f"    C = {ARRAY_EXPRESSIONS[name]}\n"
           f"    return np.sum(C * C)\n")
    return _both_builds(src)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(ARRAY_EXPRESSIONS)), m=st.integers(1, 40), p=st.integers(1, 7),
       order=st.sampled_from("CF"), seed=st.integers(0, 99))
def test_array_expressions_over_2d_arrays_agree_with_serial_and_differences(name, m, p, order, seed):
    """A parallel array expression over 2-D arrays is one parfor over both dimensions; its
    pieces split the first, and the arrays read at each element share one shadow where a
    check at each call shows each row of the parfor reaches only its own row (C order;
    Fortran-ordered arrays fail it and the pieces run one after another)."""
    par, ser = _builds(("expression", name), lambda: _array_expression(name))
    r = np.random.default_rng(seed)
    A, B = (np.asarray(r.uniform(-1, 1, (m, p)), order=order) for _ in range(2))
    got = adcore.gradient(Reverse, par, A, B)
    _assert_same(got, adcore.gradient(Reverse, ser, A, B), 1e-12)
    fd = fd_gradient(ser, [A, B], {})
    for g, f in zip(got, fd):
        np.testing.assert_allclose(g, f, rtol=1e-5, atol=1e-6)


def test_an_array_expression_over_2d_arrays_shares_its_shadows():
    par, _ = _builds(("expression", "exp_times"), lambda: _array_expression("exp_times"))
    A, B = rng.random((30, 5)), rng.random((30, 5))
    loops = adcore.compile_gradient(Reverse, par, Duplicated(A, np.zeros_like(A)),
                                    Duplicated(B, np.zeros_like(B))).parallel_loops
    assert any("reverse runs on Numba's threads" in line and "added after the loop): 0" in line
               and "(shared shadows): 3" in line for line in loops), loops


@pytest.mark.parametrize("name", sorted(SERIALLY))
def test_loops_that_cannot_run_their_reverse_on_threads_say_why(name):
    compiled = adcore.compile_gradient(Reverse, PARALLEL[name], *_annotated(ARGUMENTS[name]()))
    assert any("serially" in line and SERIALLY[name] in line for line in compiled.parallel_loops), \
        compiled.parallel_loops


def test_the_same_array_twice_is_differentiated_serially():
    x = rng.random(9)
    got = adcore.gradient(Reverse, PARALLEL["two_inputs"], x, x, Const(np.zeros(9)))
    expected = adcore.gradient(Reverse, SERIAL["two_inputs"], x, x, Const(np.zeros(9)))
    _assert_same(got, expected, 1e-12)
    compiled = adcore.compile_gradient(Reverse, PARALLEL["two_inputs"], Duplicated(x, np.zeros(9)),
                                       Duplicated(x, np.zeros(9)), Const(np.zeros(9)))
    assert any("share memory" in line for line in compiled.parallel_loops)


@numba.njit(parallel=True)
def prints_in_its_loop(x):
    s = 0.0
    for i in prange(x.shape[0]):
        print(x[i])
        s += x[i] ** 2
    return s


def test_a_loop_that_prints_prints_once_and_runs_its_reverse_serially(capfd):
    x = np.array([0.5, 1.5, -2.0])
    capfd.readouterr()
    (gx,) = adcore.gradient(Reverse, prints_in_its_loop, x)
    assert sorted(capfd.readouterr().out.split()) == sorted(str(v) for v in x)
    np.testing.assert_allclose(gx, 2 * x, rtol=1e-12)
    compiled = adcore.compile_gradient(Reverse, prints_in_its_loop, Duplicated(x, np.zeros(3)))
    assert any("must not run twice" in line for line in compiled.parallel_loops)


def test_the_chunk_tape_guards_see_what_they_look_for():
    """A chunk's augmented forward may not keep a pointer on its value stack nor read a
    shadow (the reverse may be given copies; the forward is given no shadows): the checks
    that send such a loop back to running its iterations again find both."""
    from adcore.reverse.chunk_tape import _keeps_pointers, _reads_parameters
    kept = ("define internal i32 @c.aug(ptr %a) {\n  call void @ad.push.ptr(ptr %ad.stack, ptr %a)\n"
            "  ret i32 0\n}\n")
    plain = kept.replace("@ad.push.ptr(ptr %ad.stack,", "@ad.push.ptr(ptr %ad.rawfrees,")
    assert _keeps_pointers(kept, "c.aug") and not _keeps_pointers(plain, "c.aug")
    ir = ("define i32 @c.aug.w(ptr %ret, double %p0, ptr %p1, ptr %p12) {\n"
          "  %v = load double, ptr %p12\n  ret i32 0\n}\n")
    assert _reads_parameters(ir, "c.aug.w", [2, 12])
    assert not _reads_parameters(ir, "c.aug.w", [1, 2])      # %p1 is not %p12


def test_a_thread_number_read_outside_the_chunk_function_keeps_no_tape():
    """``slotted_module`` replaces the chunk function's reads of the thread's number with
    the word after its schedule, and gives None when another function reads it."""
    import llvmlite.binding as llvm
    from adcore.reverse.chunk_tape import slotted_module
    head = ("declare i64 @get_thread_id()\n"
            "define i32 @chunk(ptr %retptr, ptr %excinfo, ptr %s0, ptr %s1, i64 %s2, i64 %s3, "
            "ptr %s4, i64 %s5, i64 %s6) {\n  %t = call i64 @get_thread_id()\n  ret i32 0\n}\n")
    slotted = str(slotted_module(llvm.parse_assembly(head), "chunk"))
    assert "get_thread_id()" not in slotted.split("define", 1)[1] and "load i64, ptr %t.at" in slotted
    other = head + "define i64 @other() {\n  %u = call i64 @get_thread_id()\n  ret i64 %u\n}\n"
    assert slotted_module(llvm.parse_assembly(other), "chunk") is None
