"""Order statistics, sampling and 1-D convolution on adcore.tape (adcore/tape/numpy_stats.py)
against numpy's values and central finite differences."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from adcore import UnsupportedError, tape
from test_tape_coverage import R, check, distinct

KNOTS = np.array([-1.0, 0.0, 0.5, 2.0])

CASES = {
    "median_odd": (np.median, distinct(7)),
    "median_even": (np.median, distinct(6)),
    "median_axis": (lambda a: np.median(a, axis=0), distinct(4, 5)),
    "median_keepdims": (lambda a: np.median(a, axis=1, keepdims=True), distinct(4, 5)),
    "median_all_keepdims": (lambda a: np.median(a, keepdims=True), distinct(2, 3)),
    "quantile_many": (lambda a: np.quantile(a, [0.0, 0.1, 0.5, 0.93, 1.0]), distinct(7)),
    "quantile_axis_keepdims": (lambda a: np.quantile(a, [0.2, 0.7], axis=0, keepdims=True), distinct(4, 5)),
    "percentile_axis": (lambda a: np.percentile(a, 30, axis=-1), distinct(3, 5)),
    "nanmax_nanmin": (lambda a: np.nanmax(a) + np.nanmin(a * a), R(6)),
    "nanmax_skips_nan": (lambda a: np.nanmax(np.where(np.arange(4) == 1, np.nan, a), axis=0), distinct(4)),
    "nanmin_axis": (lambda a: np.nanmin(np.where(np.arange(5) == 2, np.nan, a), axis=1), distinct(3, 5)),
    "linspace": (lambda a: np.linspace(a[0], a[1], 5), R(2)),
    "linspace_open_step": (lambda a: np.linspace(a[0], a[1], 4, endpoint=False, retstep=True), R(2)),
    "linspace_vectors": (lambda a, b: np.linspace(a, b, 3), R(3), R(3)),
    "interp_fp": (lambda fp: np.interp(np.array([-3.0, 0.1, 0.5, 0.77, 2.0, 9.0]), np.linspace(0, 2, 5), fp), R(5)),
    "interp_x": (lambda x: np.interp(x, KNOTS, [1.0, -2.0, 3.0, 0.5]), np.array([-1.5, -0.3, 0.2, 0.9, 1.7, 2.5])),
    "interp_left_right": (lambda x, l: np.interp(x, KNOTS, [1.0, -2.0, 3.0, 0.5], left=l[0], right=l[1]),
                          np.array([-1.5, 0.2, 2.5]), R(2)),
    "convolve_full": (np.convolve, R(7), R(3)),
    "convolve_same_short_first": (lambda a, v: np.convolve(a, v, "same"), R(3), R(7)),
    "convolve_valid_const_kernel": (lambda a: np.convolve(a, [1.0, -2.0, 0.5], "valid"), R(7)),
    "correlate_valid": (np.correlate, R(7), R(3)),
    "correlate_full_short_first": (lambda a, v: np.correlate(a, v, "full"), R(3), R(7)),
    "correlate_same_even": (lambda a, v: np.correlate(a, v, "same"), R(4), R(4)),
    "correlate_same_short_first": (lambda a, v: np.correlate(a, v, "same"), R(2), R(5)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients(name):
    f, *args = CASES[name]
    check(f, *args)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 6), m=st.integers(1, 6), mode=st.sampled_from(["full", "same", "valid"]),
       seed=st.integers(0, 2 ** 16))
def test_convolve_and_correlate_of_any_lengths(n, m, mode, seed):
    rng = np.random.default_rng(seed)
    a, v = rng.standard_normal(n), rng.standard_normal(m)
    check(lambda a, v: np.convolve(a, v, mode), a, v)
    check(lambda a, v: np.correlate(a, v, mode), a, v)


@settings(max_examples=25, deadline=None)
@given(q=st.lists(st.floats(0, 1), min_size=1, max_size=4), n=st.integers(1, 7), seed=st.integers(0, 2 ** 16))
def test_quantiles_of_any_q(q, n, seed):
    a = np.random.default_rng(seed).permutation(n) * 0.37 + 0.01 * np.arange(n)
    check(lambda a: np.quantile(a, q), a)


@pytest.mark.parametrize("call, words", [
    (lambda a: np.quantile(a, 0.5, method="nearest"), "method='nearest'"),
    (lambda a: np.median(np.reshape(a, (2, 3)), axis=(0, 1)), "several axes"),
    (lambda a: np.interp(0.5, a, a), "tracked sample points"),
    (lambda a: np.interp(0.5, [0.0, 1.0], a[:2], period=1.0), "period="),
])
def test_unrecorded_options_are_refused(call, words):
    with pytest.raises(UnsupportedError, match=words):
        tape.gradient(lambda a: np.sum(call(a)), np.arange(6.0))
