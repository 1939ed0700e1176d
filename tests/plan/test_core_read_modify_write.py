"""The reverse of ``a[j] += v`` leaves the shadow of ``a[j]`` as it is (adcore/plan/read_modify_write.py)
instead of resetting it and adding its old value back: which stores qualify, on hand-written
IR; that the optimised gradient then only reads such a shadow; and, against central finite
differences, kernels where it applies and where it must not (an alias written in between, the
loaded value used twice, a subtraction from the other side)."""
import re

import llvmlite.binding as llvm
import numba
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import adcore
from adcore import Duplicated, Reverse
from adcore.analysis.activity import Activity
from adcore.ir.model import read_function
from adcore.analysis.memory import ShadowedMemory
from adcore.analysis.pointers import PointerBases
from adcore.plan.read_modify_write import unchanged_shadow_load
from adcore.rules.scalar import is_differentiable_call, is_pure_call
from fdcheck import check

BODIES = {
    # name: (body between the entry label and ret, the load expected to be left or None)
    "add": ("%t = load double, ptr %p\n  %v = fmul double %w, %w\n  %s = fadd double %t, %v\n"
            "  store double %s, ptr %p", "t"),
    "add on the right": ("%t = load double, ptr %p\n  %s = fadd double %w, %t\n  store double %s, ptr %p", "t"),
    "subtract from it": ("%t = load double, ptr %p\n  %s = fsub double %t, %w\n  store double %s, ptr %p", "t"),
    "subtracted": ("%t = load double, ptr %p\n  %s = fsub double %w, %t\n  store double %s, ptr %p", None),
    "load used twice": ("%t = load double, ptr %p\n  %v = fmul double %t, %w\n  %s = fadd double %t, %v\n"
                        "  store double %s, ptr %p", None),
    "store between": ("%t = load double, ptr %p\n  store double %w, ptr %q\n  %s = fadd double %t, %w\n"
                      "  store double %s, ptr %p", None),
    "load between": ("%t = load double, ptr %p\n  %u = load double, ptr %q\n  %s = fadd double %t, %u\n"
                     "  store double %s, ptr %p", "t"),
    "other address": ("%t = load double, ptr %p\n  %s = fadd double %t, %w\n  store double %s, ptr %q", None),
    "sum stored twice": ("%t = load double, ptr %p\n  %s = fadd double %t, %w\n  store double %s, ptr %p\n"
                         "  store double %s, ptr %q", None),
    "product": ("%t = load double, ptr %p\n  %s = fmul double %t, %w\n  store double %s, ptr %p", None),
}


def _analysed(body):
    text = f"define void @f(ptr %p, ptr %q, double %w) {{\nentry:\n  {body}\n  ret void\n}}\n"
    func = read_function(llvm.parse_assembly(text).get_function("f"))
    pointers = PointerBases(func)
    p, q, w = func.args
    memory = ShadowedMemory(func, pointers, [p, q], lambda i: None, "f")
    act = Activity(func, memory, [w], None, False, [p, q],
                   (lambda i: None, is_differentiable_call, is_pure_call))
    return func, act


def test_which_stores_leave_their_shadow():
    for name, (body, expected) in BODIES.items():
        func, act = _analysed(body)
        store = [i for i in func.instructions() if i.opcode == "store"][-1]
        if name == "sum stored twice":
            store = [i for i in func.instructions() if i.opcode == "store"][0]
        found = unchanged_shadow_load(act, store, is_pure_call)
        assert (found.name if found is not None else None) == expected, name


@numba.njit
def scatter(out, b, c):
    """out[j] += b[i, j] c[i]: out is only read-modified-written."""
    for i in range(b.shape[0]):
        for j in range(out.shape[0]):
            out[j] += b[i, j] * c[i]


@numba.njit
def scatter_sub(out, b, c):
    for i in range(b.shape[0]):
        for j in range(out.shape[0]):
            out[j] -= b[i, j] * c[i]


@numba.njit
def through_alias(a, b, c, k):
    """a[j] is loaded, a[k] (maybe the same element) written, then a[j] gets the sum."""
    s = 0.0
    for j in range(a.shape[0]):
        t = a[j]
        a[k] = b[j] * c[j]
        a[j] = t + b[j]
        s += a[j] * a[k]
    return s


@numba.njit
def doubled(a, b):
    """a[j] += a[j] * b[j]: the loaded value feeds the sum twice."""
    for j in range(a.shape[0]):
        a[j] += a[j] * b[j]
    s = 0.0
    for j in range(a.shape[0]):
        s += a[j] * a[j]
    return s


@numba.njit
def scatter_indexed(out, idx, b):
    """out[idx[i]] += b[i]^2: repeated indices accumulate into one element."""
    for i in range(b.shape[0]):
        out[idx[i]] += b[i] * b[i]
    s = 0.0
    for j in range(out.shape[0]):
        s += out[j] * out[j] * out[j]
    return s


def test_the_accumulated_shadow_is_only_read():
    out, b, c = np.zeros(5), np.ones((3, 5)), np.ones(3)
    ir = adcore.adjoint_ir(Reverse, scatter, Duplicated(out, np.ones(5)), Duplicated(b, np.zeros_like(b)),
                           Duplicated(c, np.zeros(3)), optimised=True)
    assert re.search(r"readonly[^,]*%ad\.sh0\.4\b", ir)       # out's shadow: loads, no stores


def test_gradients_of_read_modify_writes():
    rng = np.random.default_rng(0)
    for f in (scatter, scatter_sub):
        check(f, rng.standard_normal(5), rng.standard_normal((4, 5)), rng.standard_normal(4))
    for k in (0, 2, 4):                     # a[k] is a[j] for one j
        check(lambda a, b, c: through_alias(a, b, c, k), rng.standard_normal(5),
              rng.standard_normal(5), rng.standard_normal(5),
              kernel=lambda a, b, c: through_alias(a, b, c, k))
    check(doubled, rng.standard_normal(6), rng.standard_normal(6))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 3), min_size=1, max_size=8), st.integers(0, 2**16))
def test_scatter_with_repeated_indices(indices, seed):
    rng = np.random.default_rng(seed)
    idx = np.array(indices, dtype=np.int64)
    check(scatter_indexed, rng.standard_normal(4), idx, rng.standard_normal(len(indices)))
