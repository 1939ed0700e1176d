"""Repeat calls of reverse mode take a generated caller (adcore.calling.repeat_guard): the same numbers
as the first call, and what the full checks refuse or handle is still refused or handled."""
import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import adcore
from adcore import Active, ActivityError, Const, Duplicated, Reverse, ReverseWithPrimal, api
from adcore.calling import ctypes_entry, repeat_guard
from adcore.calling.compiled import last_cached_bytes


_ARRAY_KINDS = ctypes_entry.array_kinds


@pytest.fixture(autouse=True)
def eager_stubs(monkeypatch):
    """Repeat callers call a gradient's njit stub, and a fresh gradient has none until njit
    code asks (Python calls its ctypes entry, as fast here as a caller): gradients compiled
    here get their stub at once, as those whose arguments the entry cannot take do."""
    monkeypatch.setattr(ctypes_entry, "array_kinds", lambda numba_types: None)


@numba.njit
def weighted(a, x, w):
    s = 0.0
    for i in range(x.shape[0]):
        s += a * x[i] * x[i] * w[i]
    return s


@numba.njit
def in_place(x, y, scale=2.0):
    for i in range(x.shape[0]):
        y[i] = scale * x[i] * x[i]
    return y.sum()


@numba.njit
def raises_after_writing(x, count, limit):
    count[0] += 1
    if x[0] > limit:
        raise TypeError("x above limit")
    return x[0] * x[0]


def _caller(entry, f, *args):
    """The caller a ReverseWithPrimal call left (repeat calls are keyed with the mode)."""
    hit = api._repeat.get(repeat_guard.call_key((entry, True, frozenset()), f, args))
    return None if hit is None else hit[0]


def _uses_caller(entry, f, *args):
    """Two calls: the first checked the full way, the second through the caller it left."""
    fn = adcore.autodiff if entry == "autodiff" else adcore.gradient
    first = fn(ReverseWithPrimal, f, *args)
    assert _caller(entry, f, *args) is not None
    return first


def test_a_fresh_gradient_repeats_through_its_ctypes_entry(monkeypatch):
    """Before its njit stub is made, a gradient's repeat calls take a caller that calls its
    ctypes entry: the same numbers, the same refusals, a kernel's exception raised once."""
    monkeypatch.setattr(ctypes_entry, "array_kinds", _ARRAY_KINDS)

    @numba.njit
    def fresh(a, x, w, count):
        count[0] += 1
        if x[0] > 100.0:
            raise ValueError("x above limit")
        s = 0.0
        for i in range(x.shape[0]):
            s += a * x[i] * x[i] * w[i]
        return s

    x, w, dx, count = np.arange(1.0, 5.0), np.linspace(0.5, 2.0, 4), np.zeros(4), np.zeros(1)
    args = (Active(1.5), Duplicated(x, dx), Const(w), Const(count))
    (da, _, _, _), value = _uses_caller("autodiff", fresh, *args)
    assert adcore.compile_gradient(Reverse, fresh, *args).from_disk      # no stub: the entry
    for k in range(2, 4):
        assert adcore.autodiff(ReverseWithPrimal, fresh, *args) == ((da, None, None, None), value)
        np.testing.assert_allclose(dx, k * 2 * 1.5 * x * w)
    assert count[0] == 3
    readonly = x.copy()
    readonly.flags.writeable = False          # another Numba type: the full way compiles it
    dr = np.zeros(4)
    adcore.autodiff(Reverse, fresh, Active(1.5), Duplicated(readonly, dr), Const(w), Const(count))
    np.testing.assert_allclose(dr, 2 * 1.5 * x * w)
    x32, d32 = x.astype(np.float32), np.zeros(4, np.float32)               # another dtype
    adcore.autodiff(Reverse, fresh, Active(1.5), Duplicated(x32, d32), Const(w), Const(count))
    np.testing.assert_allclose(d32, 3 * x * w, rtol=1e-6)
    with pytest.raises(ActivityError, match=r"shadow is float64\[3\]"):
        adcore.autodiff(Reverse, fresh, Active(1.5), Duplicated(x, np.zeros(3)), Const(w), Const(count))
    big, dbig, calls = np.full(4, 200.0), np.zeros(4), count[0]
    with pytest.raises(ValueError, match="x above limit"):
        adcore.autodiff(Reverse, fresh, Active(1.5), Duplicated(big, dbig), Const(w), Const(count))
    assert count[0] == calls + 1 and not dbig.any()


def test_repeat_calls_give_the_first_calls_numbers():
    x, w, dx = np.arange(1.0, 5.0), np.linspace(0.5, 2.0, 4), np.zeros(4)
    args = (Active(1.5), Duplicated(x, dx), Const(w))
    (da, _, _), value = _uses_caller("autodiff", weighted, *args)
    assert last_cached_bytes() >= 0
    for k in range(2, 4):
        (da2, none, none2), value2 = adcore.autodiff(ReverseWithPrimal, weighted, *args)
        assert (da2, none, none2, value2) == (da, None, None, value)
        np.testing.assert_allclose(dx, k * 2 * 1.5 * x * w)          # accumulated k times
    assert da == pytest.approx(np.sum(x * x * w))
    assert adcore.autodiff(Reverse, weighted, *args)[0] == da


def test_gradient_repeat_calls_return_fresh_shadows():
    x, w = np.arange(1.0, 5.0), np.linspace(0.5, 2.0, 4)
    _uses_caller("gradient", weighted, 1.5, x, Const(w))
    g1 = adcore.gradient(Reverse, weighted, 1.5, x, Const(w))
    g2 = adcore.gradient(Reverse, weighted, 1.5, x, Const(w))
    assert g1[1] is not g2[1] and g1[2] is None
    np.testing.assert_allclose(g1[1], 2 * 1.5 * x * w)
    np.testing.assert_array_equal(g1[1], g2[1])
    assert g1[0] == pytest.approx(np.sum(x * x * w))
    f32 = adcore.gradient(Reverse, weighted, np.float32(1.5), x, Const(w))[0]   # another kind
    assert f32 == pytest.approx(g1[0])


def test_return_activity_and_default_arguments():
    x, y, dx, dy = np.arange(1.0, 4.0), np.zeros(3), np.zeros(3), np.ones(3)
    _uses_caller("autodiff", in_place, Const, Duplicated(x, dx), Duplicated(y, dy))
    dx[:], dy[:] = 0.0, 1.0
    assert adcore.autodiff(Reverse, in_place, Const, Duplicated(x, dx), Duplicated(y, dy)) == (None, None)
    np.testing.assert_allclose(dx, 4 * x)                # the seed came from dy alone
    dx[:], dy[:] = 0.0, 0.0
    adcore.autodiff(Reverse, in_place, Duplicated(x, dx), Duplicated(y, dy))      # Active return
    adcore.autodiff(Reverse, in_place, Duplicated(x, dx), Duplicated(y, dy))
    np.testing.assert_allclose(dx, 8 * x)


def test_refusals_of_repeat_calls_are_the_first_calls():
    x, w, dx = np.arange(1.0, 5.0), np.ones(4), np.zeros(4)
    _uses_caller("autodiff", weighted, Active(1.5), Duplicated(x, dx), Const(w))
    readonly = np.zeros(4)
    readonly.flags.writeable = False
    for shadow, words in [(np.zeros(3), r"shadow is float64\[3\]"), (x, "shares memory with its own array"),
                          (readonly, "read-only"), (np.zeros(4, np.float32), "shadow is float32"),
                          (w, "shares memory with the array of argument 2")]:
        before = [a.copy() for a in (x, w, shadow)]
        with pytest.raises(ActivityError, match=words):
            adcore.autodiff(Reverse, weighted, Active(1.5), Duplicated(x, shadow), Const(w))
        for a, b in zip((x, w, shadow), before):
            np.testing.assert_array_equal(a, b)


def test_what_the_full_way_handles_is_handled():
    x, w = np.arange(1.0, 5.0), np.linspace(0.5, 2.0, 4)
    _uses_caller("autodiff", weighted, Active(1.5), Duplicated(x, np.zeros(4)), Const(w))
    wide = np.zeros(8)
    adcore.autodiff(Reverse, weighted, Active(1.5), Duplicated(x, wide[::2]), Const(w))   # copied back
    np.testing.assert_allclose(wide[::2], 3 * x * w)
    both = np.arange(1.0, 5.0)                             # x and w one array: compiled for aliasing
    dboth = np.zeros(4)
    adcore.autodiff(Reverse, weighted, Active(1.5), Duplicated(both, dboth), Const(both))
    np.testing.assert_allclose(dboth, 2 * 1.5 * both * both)
    x32 = x.astype(np.float32)
    d32 = np.zeros(4, np.float32)
    adcore.autodiff(Reverse, weighted, Active(1.5), Duplicated(x32, d32), Const(w))       # other types
    np.testing.assert_allclose(d32, 3 * x * w, rtol=1e-6)


def test_const_array_with_a_scratch_shadow_gets_a_fresh_one():
    x, y, dx = np.arange(1.0, 4.0), np.zeros(3)[::-1], np.zeros(3)
    _uses_caller("autodiff", in_place, Duplicated(x, dx), Const(y))
    for k in (2, 3):
        adcore.autodiff(Reverse, in_place, Duplicated(x, dx), Const(y))
        np.testing.assert_allclose(dx, k * 4 * x)


def test_a_kernel_exception_runs_the_kernel_once():
    x, dx, count = np.array([1.0]), np.zeros(1), np.zeros(1, np.int64)
    _uses_caller("autodiff", raises_after_writing, Duplicated(x, dx), Const(count), Const(5.0))
    with pytest.raises(TypeError, match="above limit"):
        adcore.autodiff(Reverse, raises_after_writing, Duplicated(x, dx), Const(count), Const(0.5))
    assert count[0] == 2 and dx[0] == 2.0


# -- property: a repeat call does what a first call does ----------------------------------
_shadows = st.sampled_from(["fresh", "same", "strided", "short", "own", "weight"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_shadows, min_size=1, max_size=4), st.booleans())
def test_repeat_calls_match_the_full_checks(kinds, same_arrays):
    """A sequence of calls that vary what they pass: each returns or raises what the full
    checks give (the callers forgotten), and leaves the arrays as they do."""
    x0, w0 = np.arange(1.0, 5.0), np.linspace(0.5, 2.0, 4)
    dx0 = np.zeros(4)

    def run(kind, fresh):
        x, w = (x0.copy(), w0.copy()) if fresh else (x0, w0)
        shadow = {"fresh": np.zeros(4), "same": dx0, "strided": np.zeros(8)[::2], "short": np.zeros(3),
                  "own": x, "weight": w}[kind]
        before = shadow.copy()
        try:
            got = adcore.autodiff(ReverseWithPrimal, weighted, Active(1.5), Duplicated(x, shadow), Const(w))
        except ActivityError as err:
            np.testing.assert_array_equal(shadow, before)
            return str(err)
        return got[0][0], got[1], shadow - before

    for kind in kinds:
        fast = run(kind, not same_arrays)
        api._repeat.clear()
        full = run(kind, not same_arrays)
        if isinstance(full, str):
            assert fast == full
        else:
            assert fast[:2] == full[:2]
            np.testing.assert_array_equal(fast[2], full[2])
