"""Repeat calls of ``autodiff`` through the native builtin (adcore.calling.repeat_builtin):
the numbers, errors and array contents of the full checks, for every argument kind it
passes and every kind it must leave to them."""
import math

import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import adcore
from adcore import Active, ActivityError, Const, Duplicated, Reverse, ReverseWithPrimal, api, plan
from adcore.calling import repeat_builtin, repeat_guard
from calling.test_repeat_guard import raises_after_writing
from fdcheck import fd_gradient


@numba.njit
def mixed(a, x, w, n, flag, m):
    """a * sum(x^2 w) + n * sum(sin(m)), doubled when ``flag``."""
    s = 0.0
    for i in range(x.shape[0]):
        s += a * x[i] * x[i] * w[i]
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            s += n * math.sin(m[i, j])
    if flag:
        s *= 2.0
    return s


@pytest.fixture(autouse=True)
def promote_at_once(monkeypatch):
    """The second call of a kind compiles the builtin; the third uses it."""
    monkeypatch.setattr(repeat_builtin, "PROMOTE_AFTER", 1)


def _hit(mode, f, args):
    return api._repeat.get(repeat_guard.call_key(("autodiff", mode.with_primal, plan.disabled()), f, args))


def _native(mode, f, *args):
    """Three calls: the full way, the Python guard (which compiles the builtin), then the
    builtin; the last call's result."""
    api._repeat.clear()
    for _ in range(3):
        got = adcore.autodiff(mode, f, *args)
    hit = _hit(mode, f, args)
    assert hit is not None and type(hit[0]).__name__ == "builtin_function_or_method", hit
    return got


def _full(call):
    """``call()`` with every repeat caller forgotten (restored after): the full checks."""
    kept = dict(api._repeat)
    api._repeat.clear()
    try:
        return call()
    finally:
        api._repeat.clear()
        api._repeat.update(kept)


def _mixed_args(rng):
    x, w, m = rng.standard_normal(5), rng.random(5), rng.standard_normal((3, 4))
    return x, w, m


def test_the_builtin_gives_the_closed_form():
    rng = np.random.default_rng(1)
    x, w, m = _mixed_args(rng)
    dx, dm = np.zeros(5), np.zeros((3, 4))
    args = (Active(1.5), Duplicated(x, dx), Const(w), 3, True, Duplicated(m, dm))
    (da, *rest), value = _native(ReverseWithPrimal, mixed, *args)
    assert rest == [None] * 5
    assert value == pytest.approx(2 * (1.5 * np.sum(x * x * w) + 3 * np.sum(np.sin(m))), rel=1e-14)
    assert da == pytest.approx(2 * np.sum(x * x * w), rel=1e-14)
    np.testing.assert_allclose(dx, 3 * 2 * 2 * 1.5 * x * w, rtol=1e-14)       # three calls
    np.testing.assert_allclose(dm, 3 * 2 * 3 * np.cos(m), rtol=1e-14)
    fa, fx, _, _, _, fm = fd_gradient(mixed.py_func, [1.5, x, w, 3, True, m], {})
    np.testing.assert_allclose([da], [fa], rtol=1e-7)
    np.testing.assert_allclose(dx / 3, fx, rtol=1e-7)
    np.testing.assert_allclose(dm / 3, fm, rtol=1e-7)
    assert adcore.autodiff(Reverse, mixed, *args)[0] == da       # Reverse: its own builtin


def test_a_kernel_exception_through_the_builtin_runs_the_kernel_once():
    x, dx, count = np.array([1.0]), np.zeros(1), np.zeros(1, np.int64)
    _native(Reverse, raises_after_writing, Duplicated(x, dx), Const(count), 5.0)
    assert count[0] == 3 and dx[0] == 6.0
    with pytest.raises(TypeError, match="above limit"):
        adcore.autodiff(Reverse, raises_after_writing, Duplicated(x, dx), Const(count), 0.5)
    assert count[0] == 4 and dx[0] == 6.0


def test_the_builtin_stores_the_bytes_cached():
    @numba.njit
    def branchy(x):
        s = 0.0
        for i in range(x.shape[0]):
            if x[i] > 0:
                s += math.exp(x[i])
            else:
                s += x[i] * x[i]
        return s

    x, dx = np.linspace(-1, 1, 50), np.zeros(50)
    _full(lambda: adcore.autodiff(Reverse, branchy, Duplicated(x, dx)))
    full = adcore.last_cached_bytes()
    _native(Reverse, branchy, Duplicated(x, dx))
    adcore.autodiff(Reverse, branchy, Duplicated(np.zeros(3), np.zeros(3)))
    assert adcore.last_cached_bytes() != full
    adcore.autodiff(Reverse, branchy, Duplicated(x, dx))
    assert adcore.last_cached_bytes() == full > 0


# -- property: what a call through the builtin gives is what the full checks give ---------
_VARIANTS = ["plain", "shadow_is_x", "w_is_x", "shadow_in_dm", "strided_shadow", "short_shadow",
             "fortran_m", "float32_x", "empty", "a_numpy", "flag_false", "n_huge", "n_uint64", "n_negative", "subclass",
             "readonly_shadow", "x_is_m_row", "dm_transposed"]


class _Sub(np.ndarray):
    pass


def _variant(kind, rng):
    x, w, m = _mixed_args(rng)
    dx, dm = np.zeros(5), np.zeros((3, 4))
    a, n, flag = 1.5, 3, True
    if kind == "shadow_is_x":
        dx = x
    elif kind == "w_is_x":
        w = x
    elif kind == "shadow_in_dm":
        dx = dm.reshape(-1)[:5]
    elif kind == "strided_shadow":
        dx = np.zeros(10)[::2]
    elif kind == "short_shadow":
        dx = np.zeros(4)
    elif kind == "fortran_m":
        m, dm = np.asfortranarray(m), np.asfortranarray(dm)
    elif kind == "float32_x":
        x, dx = x.astype(np.float32), dx.astype(np.float32)
    elif kind == "empty":
        x, w, dx = np.zeros(0), np.zeros(0), np.zeros(0)
    elif kind == "a_numpy":
        a = np.float64(1.5)
    elif kind == "flag_false":
        flag = False
    elif kind == "n_huge":
        n = 2 ** 70                          # Numba refuses it
    elif kind == "n_uint64":
        n = 2 ** 63 + 5                      # Numba types it uint64
    elif kind == "n_negative":
        n = -2
    elif kind == "subclass":
        x = x.view(_Sub)
    elif kind == "readonly_shadow":
        dx.flags.writeable = False
    elif kind == "x_is_m_row":
        m = np.concatenate([x[:4], rng.standard_normal(8)]).reshape(3, 4)
        x = m.reshape(-1)[:5]
    elif kind == "dm_transposed":
        dm = np.zeros((4, 3)).T
    return a, x, w, n, flag, m, dx, dm


def _outcome(mode, a, x, w, n, flag, m, dx, dm):
    before = (dx.copy(), dm.copy(), x.copy(), m.copy())
    try:
        got = adcore.autodiff(mode, mixed, Active(a), Duplicated(x, dx), Const(w), n, flag,
                              Duplicated(m, dm))
    except adcore.ADError as err:
        return type(err).__name__, str(err), [np.array_equal(s, b) for s, b in zip((dx, dm, x, m), before)]
    except Exception as err:                      # noqa: BLE001  (Numba's own typing errors)
        return type(err).__name__, str(err).splitlines()[0], []
    return got, dx - before[0], dm - before[1]


def _same(fast, full):
    if isinstance(full[0], str):
        assert fast == full
        return
    assert fast[0] == full[0]
    np.testing.assert_array_equal(fast[1], full[1])
    np.testing.assert_array_equal(fast[2], full[2])


@pytest.mark.parametrize("first, then", [(2 ** 63 + 5, -2), (-2, 2 ** 63 + 5), (3, 2 ** 64 - 1)])
def test_an_integer_is_never_wrapped(first, then):
    """A Python int of another range than the first call's (int64, or uint64 past it) takes
    the gradient Numba types it for, never the first one's with its value wrapped."""
    rng = np.random.default_rng(0)
    a, x, w, _, flag, m, dx, dm = _variant("plain", rng)
    for _ in range(3):
        _outcome(Reverse, a, x, w, first, flag, m, dx.copy(), dm.copy())
    got = _outcome(Reverse, a, x, w, then, flag, m, dx.copy(), dm.copy())
    np.testing.assert_allclose(got[2], 2 * then * np.cos(m), rtol=1e-14)
    _same(got, _full(lambda: _outcome(Reverse, a, x, w, then, flag, m, dx.copy(), dm.copy())))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_VARIANTS), min_size=1, max_size=4), st.booleans(), st.integers(0, 99))
def test_calls_through_the_builtin_match_the_full_checks(kinds, with_primal, seed):
    """Each call of a sequence that varies what it passes returns, raises and writes what
    the full checks do (a first call), with the builtin in place for the plain kind."""
    mode = ReverseWithPrimal if with_primal else Reverse
    a, x, w, n, flag, m, dx, dm = _variant("plain", np.random.default_rng(seed))
    _native(mode, mixed, Active(a), Duplicated(x, dx), Const(w), n, flag, Duplicated(m, dm))
    for kind in kinds:
        fast = _outcome(mode, *_variant(kind, np.random.default_rng(seed)))
        _same(fast, _full(lambda: _outcome(mode, *_variant(kind, np.random.default_rng(seed)))))
