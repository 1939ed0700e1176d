"""Header phis that advance by a nested loop's trips (adcore/plan/advances.py): a packed-triangle
index such as the GMM's ``li`` runs backwards in the reverse pass instead of being kept per
column; gradients checked against central finite differences, the plan through
``adcore.cache_report``."""
import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import adcore
from adcore import Duplicated
from fdcheck import check


@numba.njit
def packed(icf, xc, out, d):
    """GMM's walk: column c adds icf[li] * xc[c] to the rows below it, li running on."""
    s = 0.0
    for k in range(icf.shape[0]):
        for j in range(d):
            out[j] = xc[j]
        li = d
        for c in range(d):
            for r in range(c + 1, d):
                out[r] += icf[k, li] * xc[c]
                li += 1
        for j in range(d):
            s += out[j] * out[j]
    return s


@numba.njit
def every_other(icf, xc, d, start):
    """Steps of 2 from a given start, rows from c + 2, and li read after each column."""
    s = 0.0
    li = start
    for c in range(d):
        for r in range(c + 2, d):
            s += icf[li] * xc[r] * xc[c]
            li += 2
        s += icf[li % icf.shape[0]] * xc[c]
    return s


@numba.njit
def downward(icf, xc, d):
    """Rows visited from the bottom up."""
    s = 0.0
    li = 0
    for c in range(d):
        for r in range(d - 1, c, -1):
            s += icf[li] * xc[r] * xc[c] * xc[c]
            li += 1
    return s


@numba.njit
def countdown(icf, xc, d):
    """li running down by 3 from the end."""
    s = 0.0
    li = icf.shape[0] - 1
    for c in range(d):
        for r in range(c + 1, d):
            s += icf[li] * xc[r] * xc[c]
            li -= 3
    return s


@numba.njit
def tetrahedron(icf, xc, d):
    """li running on through two nested triangular loops (an advance inside an advance)."""
    s = 0.0
    li = 0
    for a in range(d):
        for b in range(a, d):
            for c in range(b + 1, d):
                s += icf[li] * xc[a] * xc[b] * xc[c]
                li += 1
    return s


@numba.njit
def ragged(icf, xc, lens):
    """Row ends read from memory: not an advance the reverse pass can recompute."""
    s = 0.0
    li = 0
    for c in range(lens.shape[0]):
        for r in range(c + 1, lens[c]):
            s += icf[li] * xc[r % xc.shape[0]] * xc[c % xc.shape[0]]
            li += 1
    return s


def _report(kernel, *args):
    return str(adcore.cache_report(kernel, *args))


def test_packed_index_is_kept_once_per_run_not_per_column():
    d = 6
    icf, xc = np.random.default_rng(0).standard_normal((3, d * (d + 1) // 2)), np.linspace(-1, 1, d)
    report = _report(packed, Duplicated(icf, np.zeros_like(icf)), Duplicated(xc, np.zeros(d)),
                     Duplicated(np.zeros(d), np.zeros(d)), d)
    assert "a loop counter's start of li" in report and "phi of li" not in report
    check(packed, icf, xc, np.zeros(d), d)


def test_packed_cached_bytes_do_not_grow_with_the_columns():
    """The bytes kept per run of the column loop do not grow with d, the copies of the
    scratch array aside (d doubles per run: with a tape this small the forward pass copies
    it rather than have the reverse pass refill it, adcore/plan/replays.py)."""
    sizes = {}
    for d in (8, 16):
        icf, xc = np.ones((2, d * (d + 1) // 2)), np.ones(d)
        adcore.autodiff(adcore.Reverse, packed, Duplicated(icf, np.zeros_like(icf)),
                        Duplicated(xc, np.zeros(d)), Duplicated(np.zeros(d), np.zeros(d)), d)
        sizes[d] = adcore.last_cached_bytes() - 2 * d * 8
    assert sizes[16] == sizes[8], sizes


WALKS = ["packed", "every_other", "downward", "countdown", "tetrahedron", "ragged"]


def _check_walk(which, d, seed):
    rng = np.random.default_rng(seed)
    xc = rng.standard_normal(d)
    if which == "packed":
        check(packed, rng.standard_normal((2, d * (d + 1) // 2)), xc, np.zeros(d), d)
    elif which == "every_other":
        check(every_other, rng.standard_normal(d * d + 3), xc, d, 1 + seed % 3)
    elif which == "downward":
        check(downward, rng.standard_normal(d * d + 1), xc, d)
    elif which == "countdown":
        check(countdown, rng.standard_normal(3 * d * d + 1), xc, d)
    elif which == "tetrahedron":
        check(tetrahedron, rng.standard_normal(d * d * d + 1), xc, d)
    else:
        lens = rng.integers(0, d + 2, size=d).astype(np.int64)
        check(ragged, rng.standard_normal(d * d + 2), rng.standard_normal(d + 1), lens)


@pytest.mark.parametrize("which", WALKS)
def test_each_triangle_walk_matches_finite_differences(which):
    _check_walk(which, 5, 1)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(WALKS), st.integers(0, 6), st.integers(0, 2 ** 16))
def test_triangle_walks_match_finite_differences(which, d, seed):
    """Any size, including columns (or whole loops) with no rows."""
    _check_walk(which, d, seed)
