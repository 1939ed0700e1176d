"""Calls of exp, exp2, expm1 and tanh that change with every loop around them are kept by the
forward pass instead of recomputed in the reverse pass (their derivative is their result:
adcore/plan/values.py's ``SELF_DERIVED``, adcore/analysis/loop_variance.py); sin is still recomputed (its
reverse needs cos anyway), and so is a call that does not change with an outer loop.  The
plan is read through ``adcore.cache_report``, the gradients checked against central finite
differences."""
import math

import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import adcore
from adcore import Duplicated
from fdcheck import check


def _weighted(fn):
    """sum(fn(x[i] - t_i) * y[i]), t_i the running maximum: the reverse needs fn's value for
    d y and d x, and recomputing it would need t_i kept."""
    @numba.njit
    def kernel(x, y):
        s = 0.0
        t = 0.0
        for i in range(x.shape[0]):
            t = max(t, x[i])
            s += fn(x[i] - t) * y[i]
        return s
    return kernel


KERNELS = {name: _weighted(fn) for name, fn in
           {"exp": math.exp, "expm1": math.expm1, "tanh": math.tanh, "sin": math.sin}.items()}


@numba.njit
def exp2_branch(x, y):
    """2**x taken on one side of a branch only; nested in a second loop."""
    s = 0.0
    for k in range(2):
        for i in range(x.shape[0]):
            if x[i] > 0.0:
                s += (2.0 ** x[i]) * y[i] * (k + 1)
            else:
                s += math.exp(x[i] * y[i])
    return s


@numba.njit
def softmax_weights(x, w, out):
    """logsumexp-style: the exps feed a sum and an array that is overwritten per row."""
    total = 0.0
    for r in range(x.shape[0]):
        s = 0.0
        for j in range(x.shape[1]):
            out[j] = math.exp(x[r, j] - 1.0)
            s += out[j]
        for j in range(x.shape[1]):
            total += w[j] * out[j] / s
    return total


def _report(kernel, x, y):
    return str(adcore.cache_report(kernel, Duplicated(x, np.zeros_like(x)),
                                   Duplicated(y, np.zeros_like(y))))


@pytest.mark.parametrize("name", ["exp", "expm1", "tanh"])
def test_self_derived_call_in_a_loop_is_kept(name):
    x, y = np.linspace(-1, 1, 7) + 0.05, np.linspace(0.5, 2, 7)      # no tie with the running max
    report = _report(KERNELS[name], x, y)
    assert f"8 B  double  call of {name}" in report, report
    check(KERNELS[name], x, y)


def test_sin_in_a_loop_is_recomputed_not_kept():
    x, y = np.linspace(-1, 1, 7) + 0.05, np.linspace(0.5, 2, 7)      # no tie with the running max
    report = _report(KERNELS["sin"], x, y)
    assert "double  call" not in report and "phi of t" in report, report
    check(KERNELS["sin"], x, y)


@numba.njit
def invariant_in_points(x, q):
    """exp(q[k]) does not change with the loop over points: recomputed, not kept per point."""
    s = 0.0
    for i in range(x.shape[0]):
        for k in range(q.shape[0]):
            s += math.exp(q[k]) * x[i]
    return s


@numba.njit
def exp_of_each(x, w):
    """exp(x[i] - m), m found before the loop: changes with the loop's only counter."""
    m = x.max()
    s = 0.0
    for i in range(x.shape[0]):
        s += w[i] * math.exp(x[i] - m)
    return math.log(s) + m


def test_call_changing_with_its_loop_is_kept():
    x, w = np.linspace(-1, 1, 7), np.linspace(0.5, 2, 7)
    report = _report(exp_of_each, x, w)
    assert "8 B  double  call of exp" in report, report
    check(exp_of_each, x, w)


def test_call_invariant_in_an_outer_loop_is_recomputed():
    x, q = np.linspace(0.1, 1.0, 6), np.linspace(-1.0, 1.0, 4)
    report = _report(invariant_in_points, x, q)
    assert "nothing inside loops" in report, report
    check(invariant_in_points, x, q)


def test_kept_calls_in_branches_and_nested_loops():
    rng = np.random.default_rng(1)
    check(exp2_branch, rng.standard_normal(9), rng.standard_normal(9))


def test_kept_exps_beside_an_overwritten_scratch_array():
    rng = np.random.default_rng(2)
    check(softmax_weights, rng.standard_normal((4, 5)), rng.standard_normal(5), np.zeros(5))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(KERNELS)), st.integers(0, 12), st.integers(0, 2**31 - 1))
def test_kept_or_recomputed_calls_match_finite_differences(name, n, seed):
    rng = np.random.default_rng(seed)
    check(KERNELS[name], rng.uniform(-2, 2, n), rng.standard_normal(n))
