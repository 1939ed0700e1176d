"""The reverse pass's choice of kept values as a minimum cut (adcore/plan/cache_cut.py): the
flow network itself, a kernel whose expected kept set is known, and random kernels whose
needed values share their loads (never more kept than the loads themselves, gradients
against central differences)."""
import math

import numba
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import adcore
from adcore import Duplicated, Reverse
from adcore.plan.cache_cut import INF, _Graph
from fdcheck import check


def test_the_network_cuts_the_cheapest_vertices():
    """Two leaves (8 each) feed three needed values (8 each): the cut is the leaves, 16."""
    g = _Graph()
    for leaf in ("x1", "x2"):
        g.add("source", ("in", leaf), INF)
        g.add(("in", leaf), ("out", leaf), 8)
    for v in ("v1", "v2", "v3"):
        g.add(("in", v), ("out", v), 8)
        g.add(("out", v), "sink", INF)
        for leaf in ("x1", "x2"):
            g.add(("out", leaf), ("in", v), INF)
    reached = g.max_flow_residual_reach("source", "sink")
    cut = {n[1] for n in reached if n != "source" and n[0] == "in" and ("out", n[1]) not in reached}
    assert cut == {"x1", "x2"}


@numba.njit
def three_of_two(a, b, out):
    s = 0.0
    for i in range(a.shape[0]):
        x1 = a[i]
        x2 = b[i]
        a[i] = 0.0          # the loads cannot be read again in the reverse pass
        b[i] = 0.0
        s += math.sin(x1 * x2) + math.sin(x1 + x2) + math.sin(x1 - x2)
    out[0] = s


def test_three_values_of_two_loads_keep_the_loads():
    """The sines' rules need x1 x2, x1 + x2, x1 - x2, and the product's rule x1 and x2:
    keeping the two loads (16 B per iteration) serves all of them; deciding one value at a
    time kept the three arguments as well (40 B)."""
    n = 200
    a, b = np.linspace(0.1, 1.0, n), np.linspace(-1.0, 0.5, n)
    x1, x2 = a.copy(), b.copy()
    da, db = np.zeros(n), np.zeros(n)
    adcore.autodiff(Reverse, three_of_two, Duplicated(a, da), Duplicated(b, db),
                    Duplicated(np.zeros(1), np.ones(1)))
    assert adcore.last_cached_bytes() == 16 * n
    c1, c2, c3 = np.cos(x1 * x2), np.cos(x1 + x2), np.cos(x1 - x2)
    np.testing.assert_allclose(da, c1 * x2 + c2 + c3, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(db, c1 * x1 + c2 - c3, rtol=1e-14, atol=1e-15)
    report = str(adcore.cache_report(three_of_two, Duplicated(x1.copy(), np.zeros(n)),
                                     Duplicated(x2.copy(), np.zeros(n)),
                                     Duplicated(np.zeros(1), np.ones(1))))
    assert report.count("double  load") == 2 and "16 B of values per iteration" in report, report


_LEAVES = ("x1", "x2", "x3")
_OPS = ("{} * {}", "{} + {}", "{} - {}", "{} / (1.5 + {} * {})")


@st.composite
def shared_leaf_programs(draw):
    """A loop reading three arrays, overwriting what it read, and adding up sin, exp or a
    product of expressions built from the three loads (each expression of two or three)."""
    terms = []
    for _ in range(draw(st.integers(2, 5))):
        op = draw(st.sampled_from(_OPS))
        names = [draw(st.sampled_from(_LEAVES)) for _ in range(op.count("{}"))]
        expr = op.format(*names)
        outer = draw(st.sampled_from(("math.sin({})", "math.exp(0.3 * ({}))", "({}) * ({})")))
        terms.append(outer.format(expr, expr) if outer.count("{}") == 2 else outer.format(expr))
    body = " + ".join(terms)
    return ("def kernel(a, b, c, out):\n"
            "    s = 0.0\n"
            "    for i in range(a.shape[0]):\n"
            "        x1 = a[i]\n        x2 = b[i]\n        x3 = c[i]\n"
            "        a[i] = 0.5 * x1\n        b[i] = 0.0\n        c[i] = x2\n"
            f"        s += {body}\n"
            "    out[0] = s\n")


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shared_leaf_programs(), st.integers(1, 4), st.integers(0, 2**16))
def test_random_shared_leaves_keep_at_most_the_loads(src, n, seed):
    """Keeping the three loads is always enough (24 B per iteration), with the result of
    each exp, kept for its cost (adcore/plan/values.py, SELF_DERIVED): the minimum cut keeps no
    more (but for a byte or so once per call), and the gradient matches central differences."""
    scope = {"math": math}
    exec(src, scope)
    kernel = numba.njit(scope["kernel"])
    rng = np.random.default_rng(seed)
    a, b, c = (rng.uniform(-1, 1, n) for _ in range(3))
    check(kernel, a, b, c, np.zeros(1), rtol=1e-4, atol=1e-5)
    adcore.autodiff(Reverse, kernel, *(Duplicated(v.copy(), np.zeros(n)) for v in (a, b, c)),
                    Duplicated(np.zeros(1), np.ones(1)))
    assert adcore.last_cached_bytes() <= 8 * (3 + src.count("math.exp")) * n + 8, src
