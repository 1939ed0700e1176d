"""bench.gmm_points (the GMM vectorised across points) against bench.gmm's kernels: the same
objective, the same gradients (hand-written and adcore's), ADBench's test instance and
central finite differences."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from bench import gmm, gmm_points
from bench.measure import central_fd, rel_err


def _instance(d, K, n, seed):
    inst = gmm.instance(K, n, d, seed=seed)
    inst.gamma, inst.m = 1.3, 0.7          # the prior's terms in m and gamma count too
    return inst


def _both(inst):
    """(value, gradient) of the per-point hand-written gradient, then of each of the points
    layout's hand-written and adcore gradients."""
    ref_val, ref = gmm.Kernels(inst).hand()
    ref = [g.copy() for g in ref]
    kern = gmm_points.Kernels(inst)
    out = []
    for fn in (kern.hand, kern.adcore):
        val, grads = fn()
        out.append((val, [g.copy() for g in grads]))
    return (ref_val, ref), out


def test_adbench_test_instance():
    inst = gmm.parse(gmm.TEST_INSTANCE, "test")
    kern = gmm_points.Kernels(inst)
    assert kern.objective() == pytest.approx(gmm.TEST_F, rel=1e-12)
    fd = central_fd(kern.objective, list(inst.params))
    (_, ref), results = _both(inst)
    for val, grads in results:
        assert val == pytest.approx(gmm.TEST_F, rel=1e-12)
        assert rel_err(grads, fd) < 1e-7
        assert rel_err(grads, ref) < 1e-12


@pytest.mark.parametrize("d", [5, 19])
def test_objective_and_gradients_match_the_per_point_kernels(d):
    """d = 19: rows 8-18 take one or two passes of eight columns (``OCTET``) and the rest
    one by one."""
    inst = _instance(d, 4, 37, seed=3)
    assert gmm_points.Kernels(inst).objective() == pytest.approx(gmm.Kernels(inst).objective(),
                                                                 rel=1e-12)
    (ref_val, ref), results = _both(inst)
    for val, grads in results:
        assert val == pytest.approx(ref_val, rel=1e-12)
        assert rel_err(grads, ref) < 1e-12


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(d=st.integers(1, 18), K=st.integers(1, 3), n=st.integers(1, 9), seed=st.integers(0, 99))
def test_any_size(d, K, n, seed):
    """The scratch row ``z`` is refilled for every (component, row): adcore's gradient stays
    the hand-written one at every size, including one point, one component, d = 1, and d
    past one and two passes of eight columns."""
    (ref_val, ref), results = _both(_instance(d, K, n, seed))
    for val, grads in results:
        assert val == pytest.approx(ref_val, rel=1e-12)
        assert rel_err(grads, ref) < 1e-11
