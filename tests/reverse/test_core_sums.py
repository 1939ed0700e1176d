"""Adjoint sums (``d += ...``) carry ``reassoc nsz`` (adcore/ir/writer.py's ``SUM``): the reverse of
``a[j] += v`` resets the shadow of ``a[j]`` to 0.0 and adds the load's adjoint back, and
without ``nsz`` LLVM must keep that ``0.0 + d`` (it turns -0.0 into 0.0).  The optimised
gradient has no addition of zero left; the derivatives are checked against central finite
differences."""
import re

import numba
import numpy as np

import adcore
from adcore import Duplicated, Reverse
from fdcheck import check


@numba.njit
def accumulate_rows(a, b, c):
    """a[j] += b[i, j] c[i] over the rows of b, then sum(a^2): a read-modify-write per entry."""
    for i in range(b.shape[0]):
        for j in range(a.shape[0]):
            a[j] += b[i, j] * c[i]
    s = 0.0
    for j in range(a.shape[0]):
        s += a[j] * a[j]
    return s


_ZERO = r"(0\.000000e\+00|zeroinitializer|0x0+\b)"
ADD_OF_ZERO = re.compile(rf"= fadd [^,]*(?:{_ZERO},|, {_ZERO}\s*$)", re.M)


def _values(rng, n=7, m=5):
    return rng.standard_normal(n), rng.standard_normal((m, n)), rng.standard_normal(m)


def test_read_modify_write_adds_no_zero():
    a, b, c = _values(np.random.default_rng(0))
    ir = adcore.adjoint_ir(Reverse, accumulate_rows, Duplicated(a, np.zeros_like(a)),
                           Duplicated(b, np.zeros_like(b)), Duplicated(c, np.zeros_like(c)),
                           optimised=True)
    assert "fadd reassoc nsz" in ir
    assert not ADD_OF_ZERO.findall(ir)


def test_read_modify_write_gradient():
    for seed in range(3):
        check(accumulate_rows, *_values(np.random.default_rng(seed)))
