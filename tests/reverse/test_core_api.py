"""The adcore API: annotations, modes, gradient, errors, exceptions, IR inspection."""
import math
import warnings

import llvmlite.binding as llvm
import numba

import numpy as np
import pytest

import adcore
from bench.kernels import sinxx       # sum(sin(x) * x * x)
from adcore import (Active, ActivityError, Const, Duplicated, Reverse, ReverseWithPrimal,
                    UnsupportedError)


@numba.njit
def api_example(a, x, out):
    for i in range(x.shape[0]):
        out[i] = math.sin(a * x[i])
    return out.sum()


def test_api_md_example_against_closed_form():
    x = np.random.default_rng(0).random(5)
    dx, out, dout = np.zeros(5), np.zeros(5), np.zeros(5)
    da, n1, n2 = adcore.autodiff(Reverse, api_example, Active(0.3), Duplicated(x, dx),
                                 Duplicated(out, dout))
    assert n1 is None and n2 is None
    np.testing.assert_allclose(da, np.sum(x * np.cos(0.3 * x)), rtol=1e-12)
    np.testing.assert_allclose(dx, 0.3 * np.cos(0.3 * x), rtol=1e-12)
    np.testing.assert_allclose(out, np.sin(0.3 * x))      # the primal side effect happened
    np.testing.assert_array_equal(dout, 0)                 # out was overwritten: adjoint of old value


def test_reverse_with_primal_returns_value():
    x = np.random.default_rng(1).random(4)
    (da, _, _), value = adcore.autodiff(ReverseWithPrimal, api_example, Active(0.5),
                                        Duplicated(x, np.zeros(4)), Duplicated(np.zeros(4), np.zeros(4)))
    assert value == pytest.approx(np.sin(0.5 * x).sum(), rel=1e-12)
    assert da == pytest.approx(np.sum(x * np.cos(0.5 * x)), rel=1e-12)


def test_gradient_plain_arguments():
    x = np.random.default_rng(2).random(5)
    out = np.zeros(5)
    ga, gx, gout = adcore.gradient(Reverse, api_example, 0.3, x, Const(out))
    assert gout is None
    assert ga == pytest.approx(np.sum(x * np.cos(0.3 * x)), rel=1e-12)
    np.testing.assert_allclose(gx, 0.3 * np.cos(0.3 * x), rtol=1e-12)


def test_plain_python_function_is_compiled():
    def f(x, k):
        s = 0.0
        for i in range(x.shape[0]):
            s += x[i] ** 2 * k
        return s
    x = np.arange(3.0)
    gx, gk = adcore.gradient(Reverse, f, x, 3)
    np.testing.assert_allclose(gx, 6 * x)
    assert gk is None


def test_duplicated_of_an_array_makes_zero_shadow():
    d = Duplicated(np.ones(3))
    assert d.dval.shape == (3,) and not d.dval.any()
    assert d.val is not d.dval


def test_shadow_accumulates_into_pure_input():
    x = np.array([1.0, 2.0])
    dx = np.array([10.0, 20.0])
    adcore.autodiff(Reverse, api_example, Const(0.5), Duplicated(x, dx), Duplicated(np.zeros(2), np.zeros(2)))
    np.testing.assert_allclose(dx, [10.0, 20.0] + 0.5 * np.cos(0.5 * x))


@numba.njit
def seeded_by_output_shadow(x, y):
    for i in range(x.shape[0]):
        y[i] = x[i] * x[i]


def test_no_return_seed_comes_from_output_shadow():
    x = np.array([1.0, 2.0, 3.0])
    dx, dy = np.zeros(3), np.array([1.0, 0.5, -1.0])
    res = adcore.autodiff(Reverse, seeded_by_output_shadow, Duplicated(x, dx), Duplicated(np.zeros(3), dy))
    assert res == (None, None)
    np.testing.assert_allclose(dx, 2 * x * [1.0, 0.5, -1.0])
    np.testing.assert_array_equal(dy, 0)


def test_return_activity_const_drops_the_seed():
    x = np.random.default_rng(3).random(3)
    dx = np.zeros(3)
    adcore.autodiff(Reverse, api_example, Const, Active(0.3), Duplicated(x, dx),
                    Duplicated(np.zeros(3), np.ones(3)))
    # only the output shadow seeds: d/dx sum(sin(a x)) = a cos(a x)
    np.testing.assert_allclose(dx, 0.3 * np.cos(0.3 * x), rtol=1e-12)


def test_cache_is_reused():
    x = np.random.default_rng(4).random(5)
    adcore.gradient(Reverse, api_example, 0.3, x, Const(np.zeros(5)))
    n = len(adcore.api._cache)
    adcore.gradient(Reverse, api_example, 0.7, x * 2, Const(np.zeros(5)))
    assert len(adcore.api._cache) == n


def test_aliasing_arguments_give_correct_gradient():
    @numba.njit
    def f(x, y):
        s = 0.0
        for i in range(x.shape[0]):
            y[i] = x[i] * 2.0
            s += x[i] * x[i]
        return s
    x = np.array([1.0, 2.0, 3.0])
    dx = np.zeros(3)
    # x and y are the same memory: y[i] = 2 x[i] overwrites x[i] before it is squared
    adcore.autodiff(Reverse, f, Duplicated(x, dx), Duplicated(x, dx))
    x0 = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(dx, 8 * x0)          # s = sum((2 x)^2)


@numba.njit
def shift_into(x, y):
    s = 0.0
    for i in range(x.shape[0]):
        y[i] = 0.5 * x[i] + y[i] * y[i]
        s += y[i] * x[i]
    return s


def test_overlapping_views_with_mirrored_shadows():
    """f(x[1:], x[:-1]) writes memory both views see; shadows dx[1:], dx[:-1] mirror it."""
    def whole(z):
        z = z.copy()
        return shift_into.py_func(z[1:], z[:-1])
    z0 = np.array([0.3, -0.7, 1.1, 0.4, 0.9])
    z, dz = z0.copy(), np.zeros(5)
    adcore.autodiff(Reverse, shift_into, Duplicated(z[1:], dz[1:]), Duplicated(z[:-1], dz[:-1]))
    expected = [(whole(z0 + h * e) - whole(z0 - h * e)) / (2 * h) for h in [1e-6] for e in np.eye(5)]
    np.testing.assert_allclose(dz, expected, rtol=1e-6, atol=1e-8)
    after = z0.copy()
    shift_into.py_func(after[1:], after[:-1])
    np.testing.assert_allclose(z, after)              # the primal ran as a plain call would


def test_aliasing_the_shadows_do_not_mirror_is_refused_when_written():
    z = np.arange(1.0, 6.0)
    _refused(shift_into, Duplicated(z[1:], np.zeros(4)), Duplicated(z[:-1], np.zeros(4)),
             words="arguments 0 and 1 share memory that shift_into writes")
    _refused(shift_into, Duplicated(z[1:], np.zeros(4)), Const(z[:-1]),
             words="argument 1 shares memory with Duplicated argument 0")


def test_read_only_aliasing_with_separate_shadows():
    z, da, db = np.arange(1.0, 6.0), np.zeros(4), np.zeros(4)
    adcore.autodiff(Reverse, two_arrays, Duplicated(z[1:], da), Duplicated(z[:-1], db))
    np.testing.assert_allclose(da, z[:-1])            # d/da sum(a*b) with a, b read only
    np.testing.assert_allclose(db, z[1:])


# -- misuse: ActivityError before anything runs -----------------------------------------
@numba.njit
def touches(x, y):
    y[0] = 1.0
    return x[0]


@pytest.mark.parametrize("args, words", [
    ((Active(np.ones(3)), np.zeros(1)), "Active on an array"),
    ((Duplicated(np.ones(3), np.zeros(4)), np.zeros(1)), "shadow"),
    ((Duplicated(np.ones(3), np.zeros(3, np.float32)), np.zeros(1)), "dtype"),
    ((Duplicated(np.ones(3, np.int64), np.zeros(3, np.int64)), np.zeros(1)), "int64"),
    ((Duplicated(1.5, 0.0), np.zeros(1)), "Active"),
    ((Active(3), np.zeros(1)), "float scalar"),
])
def test_activity_errors(args, words):
    y = args[1]
    with pytest.raises(ActivityError, match=words):
        adcore.autodiff(Reverse, touches, *args)
    assert y[0] == 0.0                       # nothing ran


@numba.njit
def sum_of_squares(x):
    return np.sum(x * x)


@numba.njit
def two_arrays(x, y):
    return np.sum(x * y)


def _refused(kernel, *args, words):
    """``kernel`` refuses ``args`` with an ActivityError naming ``words``; every array is unchanged."""
    arrays = [v for a in args for v in ((a.val, a.dval) if isinstance(a, Duplicated) else (a,))
              if isinstance(v, np.ndarray)]
    before = [a.copy() for a in arrays]
    with pytest.raises(ActivityError, match=words):
        adcore.autodiff(Reverse, kernel, *args)
    for a, b in zip(arrays, before):
        np.testing.assert_array_equal(a, b)


def test_shadow_sharing_memory_is_refused():
    x, dx = np.arange(1.0, 7.0), np.zeros(6)
    _refused(sum_of_squares, Duplicated(x, x), words="argument 0: the shadow shares memory with its own")
    _refused(sum_of_squares, Duplicated(x[:4], x[2:][::-1]), words="shares memory with its own")
    _refused(two_arrays, Duplicated(x[:3], dx[:3]), Const(dx[1:4]),
             words="argument 0: the shadow shares memory with the array of argument 1")
    _refused(two_arrays, Duplicated(x[:3], dx[:3]), Duplicated(x[3:], dx[2:5]),
             words="arguments 0 and 1: their shadows share memory")


def test_memory_checks_remembered_for_the_same_arrays_only():
    """A call that passed lets the same array objects through again without a new look, but
    a shadow made to overlap its array in place (its strides set to 0), or other arrays in
    the same places, are looked at again."""
    x, dx, y, dy = np.arange(1.0, 4.0), np.zeros(3), np.arange(4.0, 7.0), np.zeros(3)
    for _ in range(2):
        adcore.autodiff(Reverse, two_arrays, Duplicated(x, dx), Duplicated(y, dy))
    np.testing.assert_allclose(dx, 2 * y)             # d/dx sum(x*y), accumulated twice
    with warnings.catch_warnings():                  # NumPy 2.4 deprecates setting strides
        warnings.simplefilter("ignore", DeprecationWarning)
        dy.strides = (0,)
    _refused(two_arrays, Duplicated(x, dx), Duplicated(y, dy), words="the shadow's elements overlap")
    _refused(two_arrays, Duplicated(x, dx), Duplicated(y, dx), words="arguments 0 and 1: their shadows")


def test_same_array_twice_with_the_same_shadow():
    x, dx = np.arange(1.0, 4.0), np.zeros(3)
    adcore.autodiff(Reverse, two_arrays, Duplicated(x, dx), Duplicated(x, dx))
    np.testing.assert_allclose(dx, 2 * x)             # d/dx sum(x*x), both uses accumulated


@pytest.mark.parametrize("which", ["array", "shadow"])
def test_zero_stride_views_are_refused(which):
    base = np.arange(3.0)
    wide = np.broadcast_to(base, (4, 3))
    overlapping = np.lib.stride_tricks.as_strided(np.zeros(6), (3, 3), (16, 8))
    for view in (wide, overlapping):
        if which == "array":
            args = (Duplicated(view, np.zeros(view.shape)),)
        else:
            args = (Duplicated(np.ones(view.shape), view if view.flags.writeable else view.copy()),)
            if not view.flags.writeable:
                continue
        _refused(sum_of_squares, *args, words=f"the {which}'s elements overlap in memory")


def test_views_of_every_stride_kind_differentiate():
    r = np.random.default_rng(9)
    base = r.random((6, 8))
    for view in (base[::-1], base[:, ::-2], base.T, np.asfortranarray(base), base[1::2, ::3][::-1],
                 base[2:5, 1:7][:, ::2]):
        dview = np.zeros_like(view)
        adcore.autodiff(Reverse, sum_of_squares, Duplicated(view, dview))
        np.testing.assert_allclose(dview, 2 * view)


def test_native_checks_its_arguments():
    x, dx = np.arange(1.0, 5.0), np.zeros(4)
    g = adcore.compile_gradient(Reverse, sum_of_squares, Duplicated(x, dx))
    value, nbytes = g.native(x, dx)                   # Reverse mode returns the primal too
    assert value == pytest.approx(np.sum(x * x))
    np.testing.assert_allclose(dx, 2 * x)
    with pytest.raises(ActivityError, match="shadow of argument 0 must have the shape and strides"):
        g.native(x, np.zeros(5))
    strided = adcore.compile_gradient(Reverse, sum_of_squares, Duplicated(x[::2], dx[::2]))
    with pytest.raises(ActivityError, match="shadow of argument 0"):
        strided.native(x[::2], dx[:2])                # same shape, other strides
    with pytest.raises(TypeError, match="No matching definition"):
        g.native(x, dx[::2])                          # a strided shadow for a contiguous gradient
    with pytest.raises(TypeError, match="No matching definition"):
        g.native(x.astype(np.float32), dx.astype(np.float32))
    stub = strided.native

    @numba.njit
    def caller(x, dx):
        return stub(x, dx)[0]
    with pytest.raises(ActivityError, match="shadow of argument 0"):
        caller(x[::2], dx[:2])                        # checked inside njit code too
    assert caller(x[::2], dx[::2]) == pytest.approx(np.sum(x[::2] ** 2))


def test_gradient_of_non_float_return_is_an_activity_error():
    @numba.njit
    def count(x):
        return x.shape[0]
    with pytest.raises(ActivityError, match="not a float"):
        adcore.gradient(Reverse, count, np.ones(2))


def test_mode_must_come_first():
    with pytest.raises(ActivityError, match="mode"):
        adcore.autodiff(api_example, Active(1.0))


# -- unsupported IR ---------------------------------------------------------------------
@numba.njit
def bit_tricks(x):
    s = 0.0
    for i in range(x.shape[0]):
        bits = np.float64(x[i]).view(np.int64)
        s += np.int64(bits >> 1).view(np.float64)
    return s


def test_unsupported_instruction_names_instruction_and_function():
    with pytest.raises(UnsupportedError) as err:
        adcore.gradient(Reverse, bit_tricks, np.ones(3))
    msg = str(err.value)
    assert "bit_tricks" in msg and "load i64" in msg                 # the function and instruction
    line = next(n for n, text in enumerate(open(__file__), 1) if "bits = np.float64(x[i])" in text)
    assert err.value.location == ("test_core_api.py", line)
    assert f"line {line}" in msg


# -- exceptions raised by the kernel ----------------------------------------------------
@numba.njit
def raises(x, limit):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > limit:
            raise ValueError("value above limit")
        s += x[i] * x[i]
    return s


def test_kernel_exception_propagates_and_shadows_untouched():
    x = np.array([1.0, 5.0])
    dx = np.array([7.0, 8.0])
    with pytest.raises(ValueError, match="above limit"):
        adcore.autodiff(Reverse, raises, Duplicated(x, dx), 2.0)
    np.testing.assert_array_equal(dx, [7.0, 8.0])
    adcore.autodiff(Reverse, raises, Duplicated(x, dx), 10.0)      # same compiled gradient, no raise
    np.testing.assert_allclose(dx, [9.0, 18.0])


def test_zero_division_raises():
    @numba.njit
    def div(x, d):
        return x[0] / d
    with pytest.raises(ZeroDivisionError):
        adcore.gradient(Reverse, div, np.ones(1), 0.0)


# -- IR inspection ------------------------------------------------------------------------
def test_primal_and_adjoint_ir_parse():
    x = np.random.default_rng(5).random(3)
    args = (Active(0.3), Duplicated(x, np.zeros(3)), Duplicated(np.zeros(3), np.zeros(3)))
    primal = adcore.primal_ir(api_example, *args)
    adjoint = adcore.adjoint_ir(Reverse, api_example, *args)
    for text in (primal, adjoint, adcore.adjoint_ir(Reverse, api_example, *args, optimised=True)):
        llvm.parse_assembly(text).verify()
    assert "<8 x double>" not in primal and "ad.r." in adjoint


def test_compile_gradient_native_is_callable_from_njit():
    x = np.random.default_rng(6).random(4)
    dx, out, dout = np.zeros(4), np.zeros(4), np.zeros(4)
    g = adcore.compile_gradient(ReverseWithPrimal, api_example, Active(0.3), Duplicated(x, dx),
                                Duplicated(out, dout))
    assert g.shadowed == [1, 2]
    native = g.native

    @numba.njit
    def repeat(n, x, out, dx, dout):
        total = 0.0
        for _ in range(n):
            value, da, _ = native(0.3, x, out, dx, dout)
            total += da
        return value, total

    value, total = repeat(3, x, out, dx, dout)
    assert value == pytest.approx(np.sin(0.3 * x).sum())
    assert total == pytest.approx(3 * np.sum(x * np.cos(0.3 * x)))
    np.testing.assert_allclose(dx, 3 * 0.3 * np.cos(0.3 * x))


@numba.njit
def through_const_2d(x, buf):
    for i in range(buf.shape[0]):
        for j in range(buf.shape[1]):
            buf[i, j] = x[j] * (i + 1)
    return np.sum(buf * buf)


def test_const_array_carrying_derivatives_gets_a_scratch_shadow():
    x = np.array([0.5, -1.5])
    for buf in (np.zeros((3, 2)), np.zeros((3, 4))[:, ::2], np.zeros((2, 3)).T):
        gx, gbuf = adcore.gradient(Reverse, through_const_2d, x, Const(buf))
        assert gbuf is None
        np.testing.assert_allclose(gx, 2 * x * (1 + 4 + 9))        # closed form


def test_shadow_with_other_strides_than_its_primal():
    A = np.random.default_rng(7).random((6, 8))[::2, 1::2]       # a strided view
    x = np.random.default_rng(8).random(4)
    dA = np.ones((3, 4))                                          # C-contiguous shadow
    adcore.autodiff(Reverse, through_const_2d, Duplicated(x, np.zeros(4)), Duplicated(A, dA))
    np.testing.assert_array_equal(dA, 0)        # every element overwritten: adjoint of old values


@numba.njit
def pair_product(pair, x):
    a, b = pair
    return (a * x).sum() + (b * x * x).sum()


@pytest.mark.parametrize("container", [lambda a, b: (a, b), lambda a, b: [a, b], lambda a, b: (1, (a, 2.0))])
def test_gradient_refuses_containers_of_floats_rather_than_give_them_none(container):
    x = np.linspace(0.5, 1.0, 4)
    with pytest.raises(ActivityError, match="argument 0: gradient differentiates floats and float arrays, "
                                            "not a (tuple|list) holding them.*Const"):
        adcore.gradient(Reverse, pair_product, container(x, 2 * x), x)


def test_gradient_takes_a_container_held_constant():
    x = np.linspace(0.5, 1.0, 4)
    g = adcore.gradient(Reverse, pair_product, Const((x, 2 * x)), x)
    assert g[0] is None
    np.testing.assert_allclose(g[1], x + 4 * x * x)              # closed form


def test_reverse_mode_skips_the_primal_and_with_primal_still_returns_it():
    """Reverse mode compiles a gradient that does not compute the unused float return
    (its forward loop is dropped); ReverseWithPrimal, called in between, keeps its own."""
    x = np.linspace(0.1, 1.3, 6)
    closed_form = np.cos(x) * x * x + 2 * np.sin(x) * x
    for mode in (Reverse, ReverseWithPrimal, Reverse, ReverseWithPrimal):
        dx = np.zeros(6)
        got = adcore.autodiff(mode, sinxx, Duplicated(x, dx))
        grads = adcore.gradient(mode, sinxx, x)
        np.testing.assert_allclose(dx, closed_form, rtol=1e-13)
        if mode is ReverseWithPrimal:
            assert got[1] == pytest.approx(sinxx.py_func(x), rel=1e-13)
            assert grads[1] == pytest.approx(sinxx.py_func(x), rel=1e-13)
            grads = grads[0]
        np.testing.assert_allclose(grads[0], closed_form, rtol=1e-13)
    without = adcore.compile_gradient(Reverse, sinxx, Duplicated(x, np.zeros(6)))
    reverse_only = adcore.api._compiled(sinxx, [Duplicated(x, np.zeros(6))], Active, keep_primal=False)
    assert without.optimised_ir.count("@llvm.sin") > reverse_only.optimised_ir.count("@llvm.sin")


def test_compile_report_names_every_stage():
    @numba.njit
    def cubes(x):
        return np.sum(x ** 3)
    adcore.gradient(Reverse, cubes, np.ones(3))
    report = adcore.last_compile_report()
    assert list(report.seconds)[:3] == ["capture", "clean", "read"]
    assert {"layout", "analyse", "generate", "compile"} <= set(report.seconds)
    assert "stub" not in report.seconds           # made when njit code first needs it
    assert all(s >= 0 for s in report.seconds.values())
    assert set(report.cpu_seconds) == set(report.seconds) and all(s >= 0 for s in report.cpu_seconds.values())
    assert report.total_cpu == pytest.approx(sum(report.cpu_seconds.values()))
    assert "cubes" in str(report) and "total" in str(report) and "ms CPU" in str(report)


def test_gradient_lowers_the_kernel_without_compiling_it():
    @numba.njit
    def squares(x):
        return np.sum(x * x)
    x = np.arange(1.0, 4.0)
    assert adcore.gradient(Reverse, squares, x)[0] == pytest.approx(2 * x)
    assert len(squares.overloads) == 0                       # no machine code for the primal
    adcore.autodiff(Reverse, squares, Duplicated(x, np.zeros(3)))
    assert adcore.last_compile_report().seconds["capture"] < 0.05   # lowered once per types
    assert squares(x) == 14.0 and len(squares.overloads) == 1      # Numba compiles it on a call


def test_compile_reports_keep_each_compile_in_order():
    @numba.njit
    def cubes_plus(x):
        return np.sum(x ** 3) + 1.0
    from adcore.timings import compile_reports
    before = compile_reports()            # the most recent ones only: the list may be full
    adcore.gradient(Reverse, cubes_plus, np.ones(3))
    adcore.autodiff(Reverse, cubes_plus, Duplicated(np.ones(3), np.zeros(3)))
    made = [r for r in compile_reports() if all(r is not b for b in before)]
    assert [r.what for r in made] == ["cubes_plus", "cubes_plus"]
    assert made[-1] is adcore.last_compile_report()


def test_memory_cache_keeps_the_most_recent_gradients(monkeypatch):
    """New lambdas do not grow the caches without end; an evicted gradient recompiles."""
    from adcore import api
    monkeypatch.setattr(api._Bounded, "limit", 2)
    x = np.arange(1.0, 4.0)
    def scaled(k):
        return numba.njit(lambda v: np.sum(v * v) * k)
    kernels = [scaled(k) for k in (1.0, 2.0, 3.0)]
    for k, f in enumerate(kernels, 1):
        (g,) = adcore.gradient(Reverse, f, x)
        np.testing.assert_allclose(g, 2 * k * x)
        assert len(api._cache) <= 2 and len(api._fast) <= 2
    (g,) = adcore.gradient(Reverse, kernels[0], x)                 # evicted: compiled again
    np.testing.assert_allclose(g, 2 * x)


@numba.njit
def with_defaults(x, scale=2.0, power=2):
    return np.sum(x ** power) * scale


def test_kernel_default_arguments_are_constants():
    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(adcore.gradient(Reverse, with_defaults, x)[0], 4 * x)
    (gx, gs), value = adcore.gradient(ReverseWithPrimal, with_defaults, x, 3.0)
    np.testing.assert_allclose(gx, 6 * x)
    assert gs == pytest.approx(np.sum(x ** 2)) and value == pytest.approx(15.0)
    dx = np.zeros(2)
    assert adcore.autodiff(Reverse, with_defaults, Duplicated(x, dx)) == (None,)
    np.testing.assert_allclose(dx, 4 * x)
    with pytest.raises(ActivityError, match="takes 3 arguments, got 0"):
        adcore.gradient(Reverse, with_defaults)


def test_type_key_tells_apart_what_numba_types_differently():
    """The caches' cheap key (arguments.type_key): dtype, dimensions, layout and tuples'
    item types count; the values do not."""
    from adcore.calling.arguments import type_key
    a = np.zeros((3, 4))
    assert type_key(a) == type_key(np.ones((5, 2)))
    assert len({type_key(a), type_key(a.astype(np.float32)), type_key(a.T), type_key(a[:, ::2]),
                type_key(a[0])}) == 5
    assert type_key((1.0, 2)) != type_key((1, 2.0))
    assert type_key((1.0, (a, 2))) == type_key((3.0, (a, 5)))
