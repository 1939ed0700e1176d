"""bench.gmm_c (the GMM written as ADBench's C is) against bench.gmm's kernel: the same
objective, and adcore's gradient of it equal to the hand-written gradient, at several sizes
(d = 1 too: no lower triangle)."""
import numpy as np
import pytest

from bench import gmm, gmm_c
from bench.measure import rel_err


@pytest.mark.parametrize("d, K, n", [(1, 2, 5), (2, 5, 40), (3, 4, 7), (7, 3, 11)])
def test_adbench_c_style_kernel_matches_the_per_point_kernel(d, K, n):
    inst = gmm.instance(K, n, d, seed=d)
    inst.gamma, inst.m = 1.3, 0.7
    ref_val, ref = gmm.Kernels(inst).hand()
    ref = [g.copy() for g in ref]
    kern = gmm_c.Kernels(inst)
    assert kern.objective() == pytest.approx(gmm.Kernels(inst).objective(), rel=1e-13)
    for _ in range(2):                                   # the repeat call's numbers too
        val, grads = kern.adcore()
        assert val == pytest.approx(ref_val, rel=1e-13)
        assert rel_err(grads, ref) < 1e-12
    test = gmm.parse(gmm.TEST_INSTANCE, "ADBench test")
    assert gmm_c.Kernels(test).objective() == pytest.approx(gmm.TEST_F, rel=1e-12)
