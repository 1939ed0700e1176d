"""Derivatives the forward pass computes and keeps (adcore.plan.kept_derivatives): sin and
cos in loops whose operand the reverse pass could only have from the tape.  Generated loop
bodies give the gradient of the plan with the pass off to rounding, and central finite
differences; the pass applies exactly where the operand would be kept."""
import math

import numba
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import adcore
from adcore import Duplicated, Reverse
from adcore.calling.arguments import annotate
from fdcheck import fd_gradient

# where sin/cos reads its operand: an array element the loop overwrites afterwards (a load
# that cannot be repeated), a value carried between iterations (a phi), an element nothing
# writes (loaded again by the reverse pass: the pass does not apply)
OPERANDS = {"overwritten": "x[i]", "carried": "t", "read_only": "w[i]"}
# how its result v is used: linearly (the reverse pass needs nothing of v), or multiplied
# by w[i] (w's derivative needs v, recomputed from the operand: the pass does not apply)
USES = {"linear": "0.5 * v", "product": "v * w[i]"}
FUNCTIONS = ["sin", "cos"]


def _applies(operand, use):
    return operand != "read_only" and use == "linear"


def _source(function, operand, use, dtype):
    return (f"def kernel(x, w):\n"
            f"    t = {dtype}(0.25)\n"
            f"    s = {dtype}(0.0)\n"
            f"    for k in range(2):\n"
            f"        for i in range(x.shape[0]):\n"
            f"            v = math.{function}({OPERANDS[operand]})\n"
            f"            s += {USES[use]} + w[i] * w[i]\n"
            f"            t = {dtype}(0.5) * t + x[i]\n"
            f"            x[i] = {dtype}(0.5) * x[i] + v\n"
            f"    return s + x.sum() + t\n")


_KERNELS = {}


def _kernel(function, operand, use, dtype):
    key = (function, operand, use, dtype)
    if key not in _KERNELS:
        scope = {"math": math, "np": np, "float32": np.float32, "float64": np.float64}
        exec(_source(function, operand, use, dtype), scope)
        _KERNELS[key] = numba.njit(scope["kernel"])
    return _KERNELS[key]


def _gradient(kernel, x, w, passes=None):
    """The shadows of ``x`` and ``w`` from one call of the gradient compiled with ``passes``."""
    args = [Duplicated(x.copy(), np.zeros_like(x)), Duplicated(w.copy(), np.zeros_like(w))]
    adcore.compile_gradient(Reverse, kernel, *args, passes=passes)(annotate(args))
    return args[0].dval, args[1].dval


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(function=st.sampled_from(FUNCTIONS), operand=st.sampled_from(sorted(OPERANDS)),
       use=st.sampled_from(sorted(USES)), dtype=st.sampled_from(["float64", "float32"]),
       n=st.integers(1, 40), seed=st.integers(0, 99))
def test_kept_derivatives_give_the_gradient_of_the_plain_plan(function, operand, use, dtype, n, seed):
    kernel = _kernel(function, operand, use, dtype)
    rng = np.random.default_rng(seed)
    x, w = rng.uniform(-2, 2, n).astype(dtype), rng.uniform(-1, 1, n).astype(dtype)
    got = _gradient(kernel, x, w)
    plain = _gradient(kernel, x, w, {"kept_derivatives": False})
    rtol = 1e-5 if dtype == "float32" else 1e-12
    for g, p in zip(got, plain):
        np.testing.assert_allclose(g, p, rtol=rtol, atol=rtol)
    if dtype == "float64":
        fd = fd_gradient(kernel.py_func, [x, w], {})
        for g, f in zip(got, fd):
            np.testing.assert_allclose(g, f, rtol=1e-5, atol=1e-6)


def test_the_pass_applies_where_only_the_derivative_needs_the_kept_operand():
    """And then the reverse keeps no more bytes than without it (the derivative instead of
    the operand)."""
    x, w = np.linspace(-1, 1, 8), np.linspace(0.5, 1.5, 8)
    for operand in OPERANDS:
        for use in USES:
            for function in FUNCTIONS:
                kernel = _kernel(function, operand, use, "float64")
                args = [Duplicated(x.copy(), np.zeros(8)), Duplicated(w, np.zeros(8))]
                full = adcore.adjoint_ir(Reverse, kernel, *args)
                off = adcore.adjoint_ir(Reverse, kernel, *args, passes={"kept_derivatives": False})
                assert ("%ad.dv." in full) is _applies(operand, use) and "%ad.dv." not in off, \
                    (function, operand, use)
                report = str(adcore.cache_report(kernel, *args))
                plain = str(adcore.cache_report(kernel, *args, passes={"kept_derivatives": False}))
                assert _bytes(report) == _bytes(plain), (report, plain)


def _bytes(report):
    return [line.split(":")[1] for line in report.splitlines() if "per iteration" in line]
