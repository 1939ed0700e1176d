"""adcore.backend.vector_math: loops of tanh/exp/log/sin/cos in gradients call glibc's libmvec,
with the same derivatives (closed forms), also loaded from the disk cache in a new
process; ADCORE_VECTOR_MATH=0 keeps libm's scalar calls."""
import json
import math
import os
import re
import subprocess
import sys

import numba
import numpy as np
import pytest

import adcore
from adcore.backend import vector_math
from tests.test_architecture import ROOT

pytestmark = pytest.mark.skipif(not vector_math.ENABLED, reason="needs glibc's libmvec")


@numba.njit
def mixed(x):
    """sin, cos and log, whose reverse pass recomputes them in a loop LLVM vectorises (the
    results of exp and tanh are kept instead: the reverse pops them from the value stack)."""
    s = 0.0
    for i in range(x.size):
        s += math.log(1.5 + math.sin(x[i])) * math.cos(x[i])
    return s


def _closed_form(x):
    x = x.astype(np.float64)
    return np.cos(x) ** 2 / (1.5 + np.sin(x)) - np.log(1.5 + np.sin(x)) * np.sin(x)


@pytest.mark.parametrize("dtype, tol", [(np.float32, 2e-6), (np.float64, 1e-13)])
def test_vectorised_math_keeps_the_derivative(dtype, tol):
    x = np.random.default_rng(3).uniform(-3, 3, 1003).astype(dtype)
    dx = np.zeros_like(x)
    adcore.autodiff(adcore.Reverse, mixed, adcore.Duplicated(x, dx))
    np.testing.assert_allclose(dx, _closed_form(x), rtol=tol, atol=tol)
    grad = adcore.compile_gradient(adcore.Reverse, mixed, adcore.Duplicated(x, dx))
    called = set(re.findall(r"@(_ZGV\w+)\(", grad.optimised_ir))
    assert any(name.startswith("_ZGV") and name.endswith(("_sin", "_cos", "_sinf", "_cosf"))
               for name in called), called


def test_libmvec_names_follow_the_vector_function_abi():
    assert vector_math.libmvec_name("llvm.exp.v2f64") == "_ZGVbN2v_exp"
    assert vector_math.libmvec_name("llvm.sqrt.v4f32") is None      # not mapped: an instruction
    assert vector_math.libmvec_name("llvm.exp.v3f32") is None       # no such width
    assert vector_math.libmvec_name("llvm.exp.f32") is None         # scalar
    if "d" in vector_math._WIDTHS.values():
        assert vector_math.libmvec_name("llvm.tanh.v8f32") == "_ZGVdN8v_tanhf"


_SCRIPT = """
import json, sys, numpy as np
sys.path.insert(0, {root!r})
import adcore
from tests.backend.test_vector_math import mixed
x = np.linspace(-2, 2, 301)
dx = np.zeros_like(x)
adcore.autodiff(adcore.Reverse, mixed, adcore.Duplicated(x, dx))
stages = list(adcore.last_compile_report().seconds)
grad = adcore.compile_gradient(adcore.Reverse, mixed, adcore.Duplicated(x, dx))
print(json.dumps({{"dx": dx.tolist(), "stages": stages,
                   "libmvec": "_ZGV" in (grad.optimised_ir or "")}}))
"""


def _run(cache, **env):
    run = subprocess.run([sys.executable, "-c", _SCRIPT.format(root=str(ROOT))], cwd=ROOT,
                         capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, ADCORE_CACHE="1", ADCORE_CACHE_DIR=cache, **env))
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_a_new_process_loads_the_libmvec_gradient_from_disk_and_the_setting_is_keyed(tmp_path):
    want = _closed_form(np.linspace(-2, 2, 301))
    first, again = _run(str(tmp_path)), _run(str(tmp_path))
    off = _run(str(tmp_path), ADCORE_VECTOR_MATH="0")
    for got in (first, again, off):
        np.testing.assert_allclose(got["dx"], want, rtol=1e-13, atol=1e-13)
    assert "capture" in first["stages"] and again["stages"] == ["load from disk"]
    assert "capture" in off["stages"]                 # another key: compiled, not loaded
    assert first["libmvec"] and not off["libmvec"]


def _elementwise_loss(m):
    """Each function's value is read twice, so it is stored, not computed inline."""
    w = m.weight
    total = 0.0
    for f, x in ((np.tanh, w), (np.exp, w / 4), (np.log, w * w + 1), (np.sin, w), (np.cos, w)):
        y = f(x)
        total = total + np.sum(y * y) + np.sum(y)
    return total


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [3, 8, 10, 13, 23])
def test_staged_math_in_vectors_matches_the_tape_engine(dtype, n):
    """``Duplicated`` programs compute tanh, exp, log, sin and cos of contiguous values in
    vectors (``layers.vector_kernels``; the elements left over in one more vector read and
    written one by one, and below one vector's width in a scalar loop): the gradient
    agrees with the tape engine's."""
    from layers import Dense, gradient
    from layers.staging import program
    m = Dense(n, 1, dtype=dtype, rng=n)
    got = gradient(_elementwise_loss, adcore.Duplicated(m))[0]["weight"]
    want = gradient(_elementwise_loss, m)[0]["weight"]
    np.testing.assert_allclose(got, want, rtol={np.float32: 2e-5, np.float64: 1e-12}[dtype])
    source = program._cache[_elementwise_loss.__code__][0].source
    wide = n >= 32 // np.dtype(dtype).itemsize
    for op in ("tanh", "exp", "log", "sin", "cos"):
        assert (f"vector_{op}_" in source) == wide and (f"math.{op}(" in source) != wide, op


def _tail_chain_loss(m, x):
    a = np.log(m(x) ** 2 + 1.0)          # log's reserved lanes read zeros: -inf
    b = np.tanh(a)                       # each value used twice: stored, mapped in vectors
    c = np.exp(b)
    return np.sum(a * b) + np.sum(c * c) + np.sum(b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_vector_maps_over_workspace_run_whole_vectors_and_their_tails_stay_apart(dtype):
    """A map over a workspace buffer runs whole vectors into the buffers' reserved tails
    (no ``_first`` call), where log reads zeros (-inf, NaN further on): over repeated calls
    with other inputs the gradient still agrees with the tape engine's and does not
    depend on the calls before (the tails' adjoints stay zero)."""
    from layers import Dense, gradient
    from layers.staging import program
    m = Dense(4, 23, dtype=dtype, rng=5)
    dup = adcore.Duplicated(m)
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(4).astype(dtype) for _ in range(3)]
    for x in xs + xs[:1]:
        got = gradient(_tail_chain_loss, dup, x)[0]
        want = gradient(_tail_chain_loss, m, x)[0]
        for k in ("weight", "bias"):
            np.testing.assert_allclose(got[k], want[k], rtol={np.float32: 3e-5, np.float64: 1e-12}[dtype])
    source = program._cache[_tail_chain_loss.__code__][0].source
    assert "vector_log_" in source and "_first" not in source, source
