"""Scratch arrays a loop overwrites every iteration (adcore/plan/snapshots.py): the reverse pass
restores them per iteration instead of caching each load; gradients checked against central
finite differences (shadows seeded, so the arrays' final contents count too), the cached
bytes against their growth, and the plan through ``adcore.cache_report``."""
import functools
import math

import numba
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import adcore
from adcore import Const, Duplicated, Reverse
from bench import gmm
from fdcheck import check


@numba.njit
def quadratic_form(a, w, buf):
    """buf = a[i] * w, then sum_jk buf[j] buf[k] w[k]: buf read m^2 times per row."""
    n, m = a.shape
    s = 0.0
    for i in range(n):
        for j in range(m):
            buf[j] = a[i, j] * w[j]
        for j in range(m):
            for k in range(m):
                s += buf[j] * buf[k] * w[k]
    return s


@numba.njit
def carried(a, w, buf):
    """buf[j] depends on the previous row's buf[j] (read before it is overwritten)."""
    n, m = a.shape
    s = 0.0
    for i in range(n):
        for j in range(m):
            buf[j] = buf[j] * w[j] + a[i, j]
        for j in range(m):
            for k in range(m):
                s += buf[j] * a[i, k]
    return s


@numba.njit
def mixed(a, w, b1, b2, mode):
    """Two scratch arrays: b1 filled every row, b2 only when ``mode & 1`` (else it keeps
    the previous row's), and overwritten after it is read when ``mode & 2``."""
    n, m = a.shape
    s = 0.0
    for i in range(n):
        for j in range(m):
            b1[j] = math.sin(a[i, j] * w[j])
        if mode & 1:
            for j in range(m):
                b2[j] = b1[j] * w[j]
        for j in range(m):
            t = 0.0
            for k in range(m):
                t += b1[k] * b2[j]
            if mode & 2:
                b2[j] = t * 0.5
            s += t * t
    return s


def _data(rng, n, m):
    return rng.standard_normal((n, m)), rng.standard_normal(m), np.zeros(m)


def test_quadratic_form_matches_finite_differences_and_keeps_final_scratch():
    rng = np.random.default_rng(1)
    a, w, buf = _data(rng, 4, 3)
    check(quadratic_form, a, w, buf)
    buf_primal, buf_grad = np.zeros(3), np.zeros(3)
    quadratic_form(a, w, buf_primal)
    adcore.autodiff(Reverse, quadratic_form, Duplicated(a.copy(), np.zeros_like(a)),
                    Duplicated(w.copy(), np.zeros_like(w)), Duplicated(buf_grad, np.zeros(3)))
    np.testing.assert_array_equal(buf_grad, buf_primal)      # the caller sees the primal's memory


def test_cached_bytes_grow_with_the_scratch_not_with_its_reads():
    """Per row, m values are snapshotted instead of m^2 loads cached."""
    rng = np.random.default_rng(2)
    used = {}
    for m in (8, 32):
        a, w, buf = _data(rng, 50, m)
        adcore.autodiff(Reverse, quadratic_form, Duplicated(a, np.zeros_like(a)),
                        Duplicated(w, np.zeros_like(w)), Duplicated(buf, np.zeros(m)))
        used[m] = adcore.last_cached_bytes()
    assert used[32] < 6 * used[8], used          # linear in m (quadratic would be 16x)


def test_cache_report_names_the_snapshot_and_the_loop():
    """``carried`` reads the previous row's buf: snapshotted (``quadratic_form``'s buf is
    refilled instead, tests/plan/test_core_replays.py)."""
    rng = np.random.default_rng(3)
    a, w, buf = _data(rng, 3, 3)
    report = adcore.cache_report(carried, Duplicated(a, np.zeros_like(a)),
                                 Duplicated(w, np.zeros_like(w)), Duplicated(buf, np.zeros(3)),
                                 lines=True)
    text = str(report)
    assert "snapshot of array buf" in text, text
    snap_loops = [lp for lp in report.loops if lp.snapshots]
    assert len(snap_loops) == 1 and snap_loops[0].depth == 1, text
    first = carried.py_func.__code__.co_firstlineno
    assert snap_loops[0].line is not None and first < snap_loops[0].line <= first + 10, text


def test_hvp_restores_the_tangents_of_snapshotted_scratch():
    """Forward mode over the gradient copies the scratch arrays' tangents with their
    snapshots (they were zeroed on restore: a wrong Hessian); checked against central
    differences of the gradient and, lane by lane, against the Hessian's columns."""
    rng = np.random.default_rng(4)
    a, w = rng.standard_normal((3, 2)), rng.standard_normal(2)
    const = (w, rng.standard_normal(2))
    report = adcore.cache_report(carried, Duplicated(a, np.zeros_like(a)), *map(Const, const))
    assert any(lp.snapshots for lp in report.loops), str(report)

    def grad(x):
        dx = np.zeros_like(x)
        adcore.autodiff(Reverse, carried, Duplicated(x.copy(), dx), *(Const(c.copy()) for c in const))
        return dx

    v, eps = rng.standard_normal(a.shape), 1e-5
    fd = (grad(a + eps * v) - grad(a - eps * v)) / (2 * eps)
    Hv = adcore.hvp(carried, a, v, *(c.copy() for c in const))
    np.testing.assert_allclose(Hv, fd, rtol=1e-6, atol=1e-8)
    H = adcore.hessian(carried, a, *(c.copy() for c in const)).reshape(a.size, a.size)
    np.testing.assert_allclose(H @ v.ravel(), Hv.ravel(), rtol=1e-10, atol=1e-12)


def test_no_snapshot_when_the_arrays_may_overlap():
    """Restoring one array could clobber another that shares its memory: loads are cached."""
    rng = np.random.default_rng(4)
    a = rng.standard_normal((3, 4))
    base = np.ones(6)
    report = adcore.cache_report(quadratic_form, Duplicated(a, np.zeros_like(a)),
                                 Duplicated(base[:4], np.zeros(4)), Duplicated(base[2:], np.zeros(4)))
    assert not any(lp.snapshots for lp in report.loops), str(report)


def test_carried_scratch_matches_finite_differences():
    rng = np.random.default_rng(5)
    a, w, _ = _data(rng, 4, 3)
    check(carried, a, w, rng.standard_normal(3))


@numba.njit
def gmm_objective(alphas, means, icf, x, qdiag, sum_qs, xc, qxc, main):
    return gmm.objective(alphas, means, icf, x, 1.0, 0.0, qdiag, sum_qs, xc, qxc, main)


def test_gmm_matches_finite_differences():
    """ADBench's GMM kernel (bench/gmm.py): xc and qxc refilled for every point and
    component, then read in the triangular loop."""
    inst = gmm.instance(2, n=3, d=3, seed=4)
    K, d = inst.K, inst.d
    check(gmm_objective, *inst.params, inst.x, np.zeros((K, d)), np.zeros(K),
          np.zeros(d), np.zeros(d), np.zeros(K), rtol=1e-4, atol=1e-5)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 4), st.integers(1, 4), st.integers(0, 3), st.integers(0, 2**16))
def test_mixed_scratch_patterns_match_finite_differences(n, m, mode, seed):
    rng = np.random.default_rng(seed)
    a, w = rng.standard_normal((n, m)), rng.standard_normal(m)
    check(mixed, a, w, rng.standard_normal(m), rng.standard_normal(m), mode, rtol=1e-4, atol=1e-5)


def test_const_scratch_still_restored_for_the_caller():
    """A Const scratch array (no shadow given) gets an internal shadow; its final contents
    are the primal's after the gradient."""
    rng = np.random.default_rng(7)
    a, w, buf = _data(rng, 3, 4)
    expect = buf.copy()
    quadratic_form(a, w, expect)
    dw = np.zeros_like(w)
    adcore.autodiff(Reverse, quadratic_form, Const(a), Duplicated(w, dw), Const(buf))
    np.testing.assert_array_equal(buf, expect)
    h = 1e-6
    fd = [(quadratic_form(a, w + h * e, np.zeros(4)) - quadratic_form(a, w - h * e, np.zeros(4))) / (2 * h)
          for e in np.eye(4)]
    np.testing.assert_allclose(dw, fd, rtol=1e-5, atol=1e-6)


# -- the end values of inner loops' counters, from their exit tests (adcore/analysis/exit_values.py) --
INNER_LOOPS = [
    "for j in range(i, n):\n            s += x[j] * x[i] * w[j - i]",
    "for j in range(n - 1, i - 1, -1):\n            s += math.sin(x[j]) * w[n - 1 - j]",
    "for j in range(i % 3, n, 3):\n            s += x[j] * x[j] * w[j]",
    "j = i\n        while j < n:\n            s += x[j] * w[j]\n            j += 1",
    "j = n - 1\n        while j >= i:\n            s += x[j] * x[i]\n            j -= 1",
    "j = 0\n        while j <= i:\n            s += x[j] * x[j] * w[i]\n            j += 1",
    "for j in range(i):\n            for k in range(j, i):\n                s += x[k] * w[j]",
]


@functools.lru_cache(maxsize=None)
def _inner_kernel(which):
    src = f"def kernel(x, w):\n    n = x.shape[0]\n    s = 0.0\n    for i in range(n):\n        " \
          f"{INNER_LOOPS[which]}\n        s = s * 0.9\n    return s\n"
    scope = {"math": math}
    exec(src, scope)
    return numba.njit(scope["kernel"])


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(INNER_LOOPS) - 1), st.integers(1, 6), st.integers(0, 2**16))
def test_inner_loops_counters_run_back_from_their_end_values(which, n, seed):
    rng = np.random.default_rng(seed)
    check(_inner_kernel(which), rng.standard_normal(n), rng.standard_normal(n), rtol=1e-4, atol=1e-6)


def test_counted_inner_loops_push_nothing_per_run():
    """The inner loops' counters start again from their end values: no item is cached
    per iteration of the outer loop (a while loop, a range with step -1, nested ranges)."""
    x = np.linspace(0.1, 1.0, 5)
    for which in (0, 1, 4, 6):
        report = adcore.cache_report(_inner_kernel(which), Duplicated(x.copy(), np.zeros(5)),
                                     Duplicated(x.copy(), np.zeros(5)))
        assert not any(lp.items for lp in report.loops), (which, str(report))


@numba.njit
def invariant_in_inner_loop(x, q, out):
    """exp(q[k]) depends on k only; q is never written: recomputed, not saved per point."""
    n, K = x.shape[0], q.shape[0]
    for i in range(n):
        s = 0.0
        for k in range(K):
            s += math.exp(q[k]) * x[i]
        out[i] = s


def test_loop_invariant_values_are_not_saved_per_iteration():
    x, q = np.linspace(0.1, 1.0, 6), np.linspace(-1.0, 1.0, 4)
    report = adcore.cache_report(invariant_in_inner_loop, Duplicated(x, np.zeros(6)),
                                 Duplicated(q, np.zeros(4)), Duplicated(np.zeros(6), np.ones(6)))
    assert not any(lp.items for lp in report.loops), str(report)
    check(invariant_in_inner_loop, x, q, np.zeros(6))


# -- random kernels reusing scratch arrays ------------------------------------------------
_EXPRS = ["x[i, j] * w[j]", "math.sin(x[i, j]) + {b}[j]", "{b}[j] * {b}[j] - w[j]",
          "math.tanh({b}[j] * x[i, j])", "{b}[(j + 1) % m] * 0.5"]
_STATEMENTS = [
    "for j in range(m):\n    {a}[j] = {e}",
    "for j in range(m):\n    {a}[j] += {e}",
    "for j in range(m):\n    for k in range(m):\n        s += {a}[j] * {b}[k] * w[k]",
    "for j in range(i % m, m):\n    s += {a}[j] * {e}",
    "{a}[i % m] = s * 0.1 + {b}[0]",
    "if x[i, 0] > 0.0:\n    for j in range(m):\n        {a}[j] = {e}",
    "for j in range(m):\n    t = 0.0\n    for k in range(j, m):\n        t += {a}[k] * w[j]\n    s += t * {b}[j]",
]


def _indent(text, n):
    return "\n".join(" " * n + line for line in text.split("\n"))


@st.composite
def scratch_programs(draw):
    """Source of ``kernel(x, w, b1, b2)``: a loop over the rows of x whose body is 2-4
    statements filling, updating and reading the scratch arrays b1, b2."""
    body = []
    for _ in range(draw(st.integers(2, 4))):
        a, b = draw(st.permutations(["b1", "b2"]))
        e = draw(st.sampled_from(_EXPRS)).format(b=b)
        body.append(draw(st.sampled_from(_STATEMENTS)).format(a=a, b=b, e=e))
    body.append("s = math.sin(s)")
    src = "def kernel(x, w, b1, b2):\n    n, m = x.shape\n    s = 0.0\n    for i in range(n):\n"
    return src + "\n".join(_indent(stmt, 8) for stmt in body) + "\n    return s + b1[0] * b2[m - 1]\n"


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scratch_programs(), st.integers(1, 3), st.integers(1, 3), st.integers(0, 2**16))
def test_random_kernels_reusing_scratch_match_finite_differences(src, n, m, seed):
    scope = {"math": math}
    exec(src, scope)
    kernel = numba.njit(scope["kernel"])
    rng = np.random.default_rng(seed)
    check(kernel, rng.standard_normal((n, m)), rng.standard_normal(m), rng.standard_normal(m),
          rng.standard_normal(m), rtol=1e-4, atol=1e-5)
