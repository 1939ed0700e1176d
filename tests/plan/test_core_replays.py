"""Scratch arrays refilled in the reverse pass instead of snapshotted (adcore/plan/replays.py):
the decision through ``adcore.cache_report`` on kernels where it is known, gradients against
central finite differences (also where the replay must not be taken: a fill that reads what
the loop overwrites later, a fill that does not cover the array, aliasing arguments), and
the cached bytes, which stop growing with the scratch arrays."""
import math

import numba
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import adcore
from adcore import Const, Duplicated, Reverse
from adcore.plan import replays
from fdcheck import check
from test_core_snapshots import scratch_programs


@numba.njit
def filled(a, w, buf):
    """buf refilled from a and w for every row, then read in a triangular loop."""
    n, m = a.shape
    s = 0.0
    for i in range(n):
        for j in range(m):
            buf[j] = math.sin(a[i, j]) * w[j]
        for j in range(m):
            for k in range(j, m):
                s += buf[j] * buf[k] * w[k]
    return s


@numba.njit
def input_overwritten(a, w, buf):
    """The fill reads w, which each row overwrites after the fill: no replay."""
    n, m = a.shape
    s = 0.0
    for i in range(n):
        for j in range(m):
            buf[j] = a[i, j] * w[j]
        for j in range(m):
            for k in range(m):
                s += buf[j] * buf[k] * a[i, k]
        for j in range(m):
            w[j] = 0.5 * w[j] + 0.1 * buf[j]
    return s


@numba.njit
def filled_in_part(a, buf):
    """Fills buf[:m]; buf may be longer, and its tail (never written) is read too: the
    replay is taken only in calls where m covers buf."""
    n, m = a.shape
    s = 0.0
    for i in range(n):
        for j in range(m):
            buf[j] = a[i, j] * a[i, j]
        for k in range(m):
            for j in range(buf.shape[0]):
                s += buf[j] * a[i, k]
    return s


@numba.njit
def filled_from_one(a, buf):
    """Fills buf[1:], buf[0] keeps the caller's value: no replay."""
    n, m = a.shape
    s = 0.0
    for i in range(n):
        for j in range(1, m):
            buf[j] = a[i, j] * a[i, j - 1]
        for j in range(m):
            for k in range(m):
                s += buf[j] * a[i, k]
    return s


@numba.njit
def filled_when(a, buf, flag):
    """Fills buf only in rows where ``a[i, 0] > flag`` (else the previous row's stays)."""
    n, m = a.shape
    s = 0.0
    for i in range(n):
        if a[i, 0] > flag:
            for j in range(m):
                buf[j] = math.cos(a[i, j])
        for j in range(m):
            for k in range(m):
                s += buf[j] * a[i, k]
    return s


@numba.njit
def two_scratch(a, w, xc, qxc):
    """GMM's pattern: xc and qxc filled together, then qxc += L xc (triangular), then read."""
    n, m = a.shape
    s = 0.0
    for i in range(n):
        for j in range(m):
            xc[j] = a[i, j] - w[j]
            qxc[j] = math.exp(w[j]) * xc[j]
        for c in range(m):
            for r in range(c + 1, m):
                qxc[r] += w[r] * xc[c]
        t = 0.0
        for j in range(m):
            t += qxc[j] * qxc[j]
        s += math.log(1.0 + t)
    return s


def _report(kernel, *args):
    return adcore.cache_report(kernel, *(Duplicated(v, np.zeros_like(v)) if isinstance(v, np.ndarray)
                                         else v for v in args))


def _kinds(report):
    return [lp for lp in report.loops if lp.refills], [lp for lp in report.loops if lp.snapshots]


def _rows(seed, n, m):
    return np.random.default_rng(seed).standard_normal((n, m))


def test_a_fill_from_read_only_arrays_is_replayed():
    a, w = _rows(1, 3, 4), np.linspace(0.5, 1.5, 4)
    refills, snaps = _kinds(_report(filled, a, w, np.zeros(4)))
    assert len(refills) == 1 and not snaps and refills[0].depth == 1
    assert all(item.bytes == "0|n·size" for item in refills[0].refills)
    assert [item.type for item in refills[0].items].count("i8") == 1     # the choice, per row
    refills, snaps = _kinds(_report(two_scratch, a, w, np.zeros(4), np.zeros(4)))
    assert len(refills) == 1 and len(refills[0].refills) == 2 and not snaps


def test_the_snapshot_stays_where_the_replay_could_differ():
    a, w = _rows(2, 3, 4), np.linspace(0.5, 1.5, 4)
    for kernel, args in ((input_overwritten, (a, w, np.zeros(4))), (filled_from_one, (a, np.zeros(4))),
                         (filled_when, (a, np.zeros(4), 0.0))):
        refills, snaps = _kinds(_report(kernel, *args))
        assert not refills and snaps, (kernel, str(_report(kernel, *args)))


def test_replayed_gradients_match_finite_differences():
    a, w = _rows(3, 3, 4), np.linspace(0.5, 1.5, 4)
    check(filled, a, w, np.zeros(4))
    check(two_scratch, a, w, np.zeros(4), np.zeros(4))
    check(input_overwritten, a, w.copy(), np.zeros(4), rtol=1e-4, atol=1e-5)
    check(filled_from_one, a, _rows(4, 1, 4)[0])
    check(filled_when, a, _rows(5, 1, 4)[0], 0.1)


def test_the_scratch_holds_the_primals_final_contents():
    a, w = _rows(6, 4, 3), np.linspace(0.5, 1.5, 3)
    expect, buf = np.zeros(3), np.zeros(3)
    filled(a, w, expect)
    adcore.autodiff(Reverse, filled, Duplicated(a, np.zeros_like(a)), Duplicated(w, np.zeros(3)),
                    Duplicated(buf, np.zeros(3)))
    np.testing.assert_array_equal(buf, expect)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 4), st.integers(1, 4), st.integers(0, 2), st.integers(0, 2**16))
def test_a_fill_covering_the_array_or_not_matches_finite_differences(n, m, extra, seed):
    """The cover is checked per call: with a longer buf the snapshot is taken instead."""
    rng = np.random.default_rng(seed)
    check(filled_in_part, rng.standard_normal((n, m)), rng.standard_normal(m + extra),
          rtol=1e-4, atol=1e-5)


def test_the_cover_is_checked_at_run_time():
    a = _rows(7, 20, 4)
    used = {}
    for extra in (0, 1):
        buf = np.zeros(4 + extra)
        adcore.autodiff(Reverse, filled_in_part, Duplicated(a, np.zeros_like(a)), Duplicated(buf, np.zeros_like(buf)))
        used[extra] = adcore.last_cached_bytes()
    assert used[1] >= used[0] + 20 * 5 * 8, used         # a snapshot of 5 doubles per row


def _two_scratch_gradient(a, w):
    """adcore's gradient of two_scratch (da, dw) and the bytes it kept."""
    m = a.shape[1]
    da, dw = np.zeros_like(a), np.zeros(m)
    adcore.autodiff(Reverse, two_scratch, Duplicated(a, da), Duplicated(w, dw),
                    Duplicated(np.zeros(m), np.zeros(m)), Duplicated(np.zeros(m), np.zeros(m)))
    return da, dw, adcore.last_cached_bytes()


def test_small_scratch_is_refilled_larger_is_copied():
    """Arrays of SNAPSHOT_MIN bytes together are refilled; larger ones are copied while the
    tape stays within the budget (their bytes then show in the cached bytes)."""
    rows, used = 50, {}
    for m in (2, 3):                           # xc and qxc: 32 B, then 48 B per row
        used[m] = _two_scratch_gradient(_rows(8, rows, m), np.linspace(0.5, 1.5, m))[2]
    assert 2 * 2 * 8 <= replays.SNAPSHOT_MIN < 2 * 3 * 8
    assert used[3] >= used[2] + rows * 2 * 3 * 8, used
    assert used[2] < rows * 2 * 2 * 8, used


def test_beyond_the_budget_the_scratch_is_refilled():
    """Snapshots of 512 B per row fill the tape up to SNAPSHOT_BUDGET; the rows after that
    refill their arrays: the cached bytes stop growing with the scratch, and the gradient of
    each row (checked against calls on blocks of rows, all copied) is the same either way."""
    m, used = 32, {}
    w = np.linspace(0.5, 1.5, m)
    per_row = replays.SNAPSHOT_BUDGET // (2 * m * 8)
    short, n = per_row + 2000, per_row + 6000
    for rows in (short, n):
        a = _rows(10, rows, m)
        da, dw, used[rows] = _two_scratch_gradient(a, w)
    assert replays.SNAPSHOT_BUDGET - 2 * m * 8 <= used[short] <= replays.SNAPSHOT_BUDGET + 64 * short
    assert used[n] - used[short] <= 4000 * 64, used
    blocks = [_two_scratch_gradient(a[lo:lo + 3000], w) for lo in range(0, n, 3000)]
    np.testing.assert_allclose(da, np.concatenate([b[0] for b in blocks]), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(dw, sum(b[1] for b in blocks), rtol=1e-11)


def test_aliasing_arguments_give_the_right_gradient():
    """buf overlaps w (the fill overwrites what it reads): arrays that may overlap are
    never snapshotted nor replayed; checked against differences of the shared memory."""
    a = _rows(9, 3, 4)
    base = np.linspace(0.5, 1.5, 6)

    def f(b):
        b = b.copy()
        return filled(a, b[:4], b[2:])

    shared, dshared = base.copy(), np.zeros(6)
    adcore.autodiff(Reverse, filled, Const(a), Duplicated(shared[:4], dshared[:4]), Duplicated(shared[2:], dshared[2:]))
    h = 1e-6
    fd = np.array([(f(base + h * e) - f(base - h * e)) / (2 * h) for e in np.eye(6)])
    np.testing.assert_allclose(dshared, fd, rtol=1e-5, atol=1e-6)


def test_hvp_through_a_replay():
    """Forward mode over a gradient that refills its scratch: the tangents of the refilled
    values follow (checked against central differences of the gradient)."""
    rng = np.random.default_rng(10)
    a, w = rng.standard_normal((3, 3)), rng.standard_normal(3)

    def grad(x):
        dx = np.zeros_like(x)
        adcore.autodiff(Reverse, two_scratch, Duplicated(x.copy(), dx), Const(w), Const(np.zeros(3)),
                        Const(np.zeros(3)))
        return dx

    v, eps = rng.standard_normal(a.shape), 1e-5
    fd = (grad(a + eps * v) - grad(a - eps * v)) / (2 * eps)
    np.testing.assert_allclose(adcore.hvp(two_scratch, a, v, w, np.zeros(3), np.zeros(3)), fd,
                               rtol=1e-6, atol=1e-8)


_READ_ONLY = ["x[i, j] * w[j]", "math.sin(x[i, j]) - w[j]", "math.exp(w[j]) * x[i, j]"]


@st.composite
def refilling_programs(draw):
    """tests/plan/test_core_snapshots.py's random scratch programs, each row starting with a fill
    of both arrays from read-only values (so that a replay is possible; the statements after
    it update, partly overwrite and read the arrays)."""
    src = draw(scratch_programs())
    head, body = src.split("    for i in range(n):\n")
    fill = "        for j in range(m):\n" + "".join(
        f"            {b}[j] = {draw(st.sampled_from(_READ_ONLY))}\n" for b in ("b1", "b2"))
    return head + "    for i in range(n):\n" + fill + body


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(refilling_programs(), st.integers(1, 3), st.integers(1, 3), st.integers(0, 1), st.integers(0, 2**16))
def test_random_refilling_kernels_match_finite_differences(src, n, m, extra, seed):
    scope = {"math": math}
    exec(src, scope)
    kernel = numba.njit(scope["kernel"])
    rng = np.random.default_rng(seed)
    check(kernel, rng.standard_normal((n, m)), rng.standard_normal(m), rng.standard_normal(m + extra),
          rng.standard_normal(m), rtol=1e-4, atol=1e-5)
