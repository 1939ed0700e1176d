"""Loops whose trip count changes with an enclosing loop (adcore/plan/varying_loops.py): the forward
pass's copy and the replay of a packed triangle carry the hint unrolling their scalar
remainder, a rectangle's loops do not, and gradients through the triangle match central
finite differences at sizes on both sides of the vector widths and of the unroll count."""
import numba
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import adcore
from adcore import Duplicated, Reverse
from fdcheck import check

HINT = "llvm.loop.vectorize.followup_epilogue"


@numba.njit
def packed_triangle(x, icf, xc, qxc):
    """ADBench's GMM triangle: Q x for every row x of ``x``, Q lower triangular with its
    diagonal in icf[:d] and the rest packed column by column after it."""
    n, d = x.shape
    s = 0.0
    for i in range(n):
        for j in range(d):
            xc[j] = x[i, j]
            qxc[j] = icf[j] * xc[j]
        li = d
        for c in range(d):
            for r in range(c + 1, d):
                qxc[r] += icf[li] * xc[c]
                li += 1
        for j in range(d):
            s += qxc[j] * qxc[j]
    return s


@numba.njit
def dense_square(x, w, xc, qxc):
    """The same with a full d x d matrix: every inner loop runs d trips."""
    n, d = x.shape
    s = 0.0
    for i in range(n):
        for j in range(d):
            xc[j] = x[i, j]
            qxc[j] = 0.0
        for c in range(d):
            for r in range(d):
                qxc[r] += w[c, r] * xc[c]
        for j in range(d):
            s += qxc[j] * qxc[j]
    return s


def _triangle_args(seed, n, d):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)), rng.standard_normal(d * (d + 1) // 2), np.zeros(d), np.zeros(d)


def _ir(f, *args):
    return adcore.adjoint_ir(Reverse, f, *(Duplicated(a, np.zeros_like(a)) for a in args))


def test_the_triangle_and_its_replay_carry_the_hint():
    args = _triangle_args(0, 3, 4)
    ir = _ir(packed_triangle, *args)
    latches = [line for line in ir.splitlines() if line.lstrip().startswith("br i1 ") and "!llvm.loop !" in line
               and int(line.rsplit("!", 1)[1]) >= 1 << 20]
    assert len(latches) == 2, latches          # the forward pass's loop and the replay's
    assert ir.count(HINT) == 1 and '!{!"llvm.loop.unroll.count", i32 4}' in ir
    refills = [item for loop in adcore.cache_report(packed_triangle, *(Duplicated(a, np.zeros_like(a)) for a in args)).loops
               for item in loop.refills]
    assert len(refills) == 2                   # xc and qxc are replayed, not snapshotted


def test_loops_of_fixed_trip_count_get_no_hint():
    rng = np.random.default_rng(1)
    assert HINT not in _ir(dense_square, rng.standard_normal((3, 4)), rng.standard_normal((4, 4)),
                           np.zeros(4), np.zeros(4))


def test_triangle_gradients_match_finite_differences():
    for d in (1, 2, 5, 9, 34):
        check(packed_triangle, *_triangle_args(d, 3, d))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 4), st.integers(1, 40), st.integers(0, 2**16))
def test_triangles_of_any_size_match_finite_differences(n, d, seed):
    """The scratch buffers are refilled for every row; columns of every length up to 39
    rows run through the vector loop and the unrolled remainder."""
    check(packed_triangle, *_triangle_args(seed, n, d))
