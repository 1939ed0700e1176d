"""The plan's named passes: each can be switched off (``compile_gradient(..., passes=...)``,
``ADCORE_PASSES``), switching it off changes the plan of a kernel it applies to, and any
set of passes switched off gives the same gradient as the full plan (itself checked
against central finite differences)."""
import math
import os
import subprocess
import sys

import numba
import numpy as np
import pytest
from hypothesis import given, strategies as st

import adcore
from adcore import ActivityError, Duplicated, Reverse
from adcore.calling.arguments import annotate
from adcore.plan import PASSES
from fdcheck import check
from reverse.test_core_property import compile_kernel, examples, kernels
from test_core_snapshots import scratch_programs


@numba.njit
def points(x, mu, tmp):
    """ADBench's GMM shape: a scratch centred vector per (point, component), its squared
    norm under exp (kept: self-derived), summed."""
    n, d = x.shape
    s = 0.0
    for i in range(n):
        for k in range(mu.shape[0]):
            for j in range(d):
                tmp[j] = x[i, j] - mu[k, j]
            q = 0.0
            for j in range(d):
                q += tmp[j] * tmp[j]
            s += math.exp(-q)
    return s


@numba.njit
def scaled_then_summed(x, y, a):
    """A loop whose iterations commute (its reverse may count up), a value stored at y[i]
    (loaded back, not kept), and y[i] += ... (its reverse leaves the shadow of y[i])."""
    for i in range(x.shape[0]):
        y[i] = math.tanh(a[0] * x[i])
    for i in range(x.shape[0]):
        y[i] += 0.5 * x[i] * x[i]
    s = 0.0
    for i in range(x.shape[0]):
        s += y[i] * math.sin(x[i] * a[0] + y[i])
    return s


@numba.njit
def running_sines(x, a):
    """sin of a value carried from one iteration to the next (a phi: kept for the reverse
    pass), whose derivative cos the forward pass keeps instead (kept_derivatives)."""
    t = a[0]
    s = 0.0
    for i in range(x.shape[0]):
        t = 0.5 * t + x[i]
        s += math.sin(t) * x[i]
    return s


def _points_args(rng):
    return [rng.standard_normal((6, 3)), rng.standard_normal((3, 3)), rng.standard_normal(3)]


def _scaled_args(rng):
    return [rng.standard_normal(5), rng.standard_normal(5), rng.standard_normal(1)]


# the kernel on which each pass changes the gradient's IR
APPLIES_TO = {"recompute": (points, _points_args), "min_cut": (points, _points_args),
              "snapshots": (points, _points_args), "replays": (points, _points_args),
              "stored_copies": (scaled_then_summed, _scaled_args),
              "loop_order": (scaled_then_summed, _scaled_args),
              "read_modify_write": (scaled_then_summed, _scaled_args),
              "kept_derivatives": (running_sines, lambda rng: [rng.standard_normal(7), rng.standard_normal(1)])}


def _gradient(kernel, values, passes=None, seed=0):
    """The shadows (and Active adjoints) of ``kernel`` at ``values`` with the seeds
    fdcheck.check uses, compiled with ``passes``."""
    rng = np.random.default_rng(seed)
    args = [Duplicated(v.copy(), rng.standard_normal(v.shape)) if isinstance(v, np.ndarray)
            else adcore.Active(v) for v in values]
    compiled = adcore.compile_gradient(Reverse, kernel, *args, passes=passes)
    out = compiled(annotate(args))
    return [a.dval for a in args if isinstance(a, Duplicated)], out


def _assert_same(kernel, values, passes, seed=0):
    want, want_out = _gradient(kernel, values, None, seed)
    got, got_out = _gradient(kernel, values, passes, seed)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(got_out[1:], dtype=float),
                               np.asarray(want_out[1:], dtype=float), rtol=1e-12, atol=1e-12)


def test_every_pass_is_documented_and_has_a_kernel_it_applies_to():
    assert set(APPLIES_TO) == set(PASSES)
    assert all(len(doc) > 40 and "off" in doc for doc in PASSES.values())


@pytest.mark.parametrize("name", sorted(PASSES))
def test_switching_a_pass_off_changes_the_plan_and_keeps_the_gradient(name):
    kernel, make = APPLIES_TO[name]
    values = make(np.random.default_rng(1))
    check(kernel, *values, rtol=1e-5, atol=1e-6)            # the full plan, against FD
    args = [Duplicated(v, np.zeros_like(v)) for v in values]
    full = adcore.adjoint_ir(Reverse, kernel, *args)
    off = adcore.adjoint_ir(Reverse, kernel, *args, passes={name: False})
    assert off != full, f"switching {name} off left the gradient's IR as it was"
    _assert_same(kernel, values, {name: False})


def test_a_pass_switched_off_is_its_own_compile_and_the_default_stays_cached():
    values = _points_args(np.random.default_rng(2))
    args = [Duplicated(v, np.zeros_like(v)) for v in values]
    full = adcore.compile_gradient(Reverse, points, *args)
    off = adcore.compile_gradient(Reverse, points, *args, passes={"snapshots": False})
    assert off is not full
    assert adcore.compile_gradient(Reverse, points, *args, passes={"snapshots": False}) is off
    assert adcore.compile_gradient(Reverse, points, *args, passes={"snapshots": True}) is full
    assert adcore.compile_gradient(Reverse, points, *args) is full


def test_the_compile_report_times_the_plans_passes():
    values = _points_args(np.random.default_rng(3))
    args = [Duplicated(v, np.zeros_like(v)) for v in values]
    adcore.compile_gradient(Reverse, points, *args, passes={"loop_order": False})
    stages = adcore.last_compile_report().seconds
    assert {"plan: snapshots", "plan: replays", "plan: min_cut"} <= set(stages)


def test_the_cache_report_shows_the_plan_with_passes_off():
    values = _points_args(np.random.default_rng(4))
    args = [Duplicated(v, np.zeros_like(v)) for v in values]
    full = str(adcore.cache_report(points, *args))
    off = str(adcore.cache_report(points, *args, passes={"snapshots": False, "replays": False}))
    assert "array tmp refilled" in full and "refill" not in off
    assert "(depth 3): 8 B of values per iteration" in off      # the loads of tmp, kept


@pytest.mark.parametrize("passes, message", [
    ({"replay": False}, "unknown plan pass 'replay'; the passes are recompute, min_cut"),
    ({"replays": 0}, "passes['replays'] must be True or False, got 0"),
    (["replays"], "passes must be a dict {name: bool}, got list"),
])
def test_bad_passes_are_refused_before_anything_compiles(passes, message):
    x = np.ones(3)
    with pytest.raises(ActivityError) as err:
        adcore.compile_gradient(Reverse, scaled_then_summed, Duplicated(x, np.zeros(3)),
                                Duplicated(x.copy(), np.zeros(3)), np.ones(1), passes=passes)
    assert message in str(err.value)


@pytest.mark.slow
@examples()
@given(source=kernels(), off=st.sets(st.sampled_from(sorted(PASSES)), min_size=1),
       seed=st.integers(0, 2 ** 16))
def test_random_kernels_give_the_same_gradient_with_any_passes_off(source, off, seed):
    kernel = compile_kernel(source)
    rng = np.random.default_rng(seed)
    values = [rng.uniform(-1, 1, 4), rng.uniform(-1, 1, 4), np.array([rng.uniform(-1, 1)]),
              np.zeros(4)]
    wrapped = compile_kernel(source.replace("def kernel(x, y, a, out):",
                                            "def kernel(x, y, a_, out):\n    a = a_[0]"))
    check(wrapped, *values, rtol=1e-4, atol=1e-6, seed=seed)
    _assert_same(wrapped, values, {name: False for name in off}, seed)


@examples(max(5, int(os.environ.get("ADCORE_PROPERTY_EXAMPLES", 25)) // 3))
@given(source=scratch_programs(), off=st.sets(st.sampled_from(sorted(PASSES)), min_size=1),
       n=st.integers(1, 3), m=st.integers(1, 3), seed=st.integers(0, 2 ** 16))
def test_kernels_reusing_scratch_give_the_same_gradient_with_any_passes_off(source, off, n, m, seed):
    scope = {"math": math}
    exec(source, scope)
    kernel = numba.njit(scope["kernel"])
    rng = np.random.default_rng(seed)
    values = [rng.standard_normal((n, m)), rng.standard_normal(m), rng.standard_normal(m),
              rng.standard_normal(m)]
    _assert_same(kernel, values, {name: False for name in off}, seed)


def test_adcore_passes_switches_passes_off_for_the_process():
    """A fresh process with ADCORE_PASSES: its first gradient has the plan without them,
    the same numbers; an unknown name is refused with the variable named."""
    code = ("import numpy as np, adcore, math, numba\n"
            "from adcore import Duplicated, Reverse\n"
            "@numba.njit\n"
            "def f(x, tmp):\n"
            "    s = 0.0\n"
            "    for i in range(x.shape[0]):\n"
            "        for j in range(tmp.shape[0]):\n"
            "            tmp[j] = x[i] * (j + 1)\n"
            "        for j in range(tmp.shape[0]):\n"
            "            for k in range(tmp.shape[0]):\n"
            "                s += math.sin(tmp[j] * tmp[k])\n"
            "    return s\n"
            "x, tmp = np.linspace(0.1, 0.5, 4), np.zeros(3)\n"
            "dx = np.zeros(4)\n"
            "adcore.autodiff(Reverse, f, Duplicated(x, dx), Duplicated(tmp, np.zeros(3)))\n"
            "h = 1e-6\n"
            "fd = [(f(x + h * e, tmp) - f(x - h * e, tmp)) / (2 * h) for e in np.eye(4)]\n"
            "assert np.allclose(dx, fd, rtol=1e-6, atol=1e-8), (dx, fd)\n"
            "report = str(adcore.cache_report(f, Duplicated(x, dx), Duplicated(tmp, np.zeros(3))))\n"
            "print('array tmp' in report)\n")
    env = dict(os.environ, ADCORE_PASSES="-snapshots,-replays")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "False", run.stderr
    run = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, ADCORE_PASSES=""),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "True", run.stderr
    env = dict(os.environ, ADCORE_PASSES="-snapshot")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 1 and "ADCORE_PASSES='-snapshot': unknown plan pass 'snapshot'" \
        in run.stderr, run.stderr
