"""adcore.calling.fastcall: builtins that check their arguments natively and call Numba-convention
code; a refusal touches nothing."""
import numba
import numpy as np
import pytest
from numba import types

from adcore import Duplicated
from adcore.calling.fastcall import ArrayArg, ConstArg, FixedArray, ScalarArg, numba_caller, row_copier
from adcore.numba_abi import native_function
from layers import Chain, Dense, gradient, tanh, withgradient
from layers.staging import drivers, program
from optim import Adam, setup, update


@numba.njit
def _axpy(a, x, y, out, n):
    """out += a x + y (x flat), returns the sum of out and n."""
    for i in range(x.size):
        out[i] += a * x[i] + y[i]
    return out.sum() + n


@numba.njit
def _checked_sqrt(x):
    if x[0] < 0:
        raise ValueError("negative")
    return np.sqrt(x[0])


F64 = types.float64[::1]
AXPY = (types.float64, F64, F64, F64, types.int64)


def _axpy_caller(zero=None, written=True):
    x, y, out = np.ones((2, 3)), np.ones(6), np.zeros(6)
    address, restype = native_function(_axpy, AXPY)
    slots = [ScalarArg(1.0), ArrayArg(x, True), ArrayArg(y, True), ArrayArg(out, True, zero, written),
             ConstArg(10)]
    return numba_caller(address, AXPY, restype, slots, zero=zero == "on_request")


CALLER = _axpy_caller()
ZEROING = _axpy_caller("on_request")


def test_the_builtin_computes_what_the_njit_function_does():
    x, y, out = np.arange(6.0).reshape(2, 3), np.full(6, 0.5), np.ones(6)
    expected_out = out.copy()
    expected = _axpy(2.0, x.reshape(-1), y, expected_out, 10)
    got = CALLER.call(2.0, x, y, out, 10)
    assert type(got) is float and got == expected
    np.testing.assert_array_equal(out, expected_out)


@pytest.mark.parametrize("zero", [True, False])
def test_zero_on_request_clears_the_array_before_the_call(zero):
    x, y, out = np.ones((2, 3)), np.zeros(6), np.full(6, 7.0)
    got = ZEROING.call(zero, 1.0, x, y, out, 0)
    np.testing.assert_array_equal(out, np.ones(6) + (0 if zero else 7))
    assert got == out.sum() + 10          # the constant 10 is compiled in


def _wrong_arguments():
    """Arguments ``(name, make(out))`` unlike those ``ZEROING`` was compiled for."""
    x, y = np.ones((2, 3)), np.ones(6)
    yield "a list", lambda out: (1.0, x.tolist(), y, out, 10)
    yield "another shape", lambda out: (1.0, np.ones((3, 2)), y, out, 10)
    yield "another dtype", lambda out: (1.0, x.astype(np.float32), y, out, 10)
    yield "big-endian", lambda out: (1.0, x.astype(">f8"), y, out, 10)
    yield "not contiguous", lambda out: (1.0, np.ones((2, 6))[:, ::2], y, out, 10)
    yield "read-only written array", lambda out: (1.0, x, y, np.frombuffer(bytes(48)), 10)
    yield "a float32 scalar", lambda out: (np.float32(1.0), x, y, out, 10)
    yield "an int scalar", lambda out: (1, x, y, out, 10)
    yield "too few", lambda out: (1.0, x, y, out)
    yield "too many", lambda out: (1.0, x, y, out, 10, 11)


@pytest.mark.parametrize("name, make", list(_wrong_arguments()), ids=lambda v: v if isinstance(v, str) else "")
def test_arguments_unlike_the_compiled_ones_are_refused_before_anything_runs(name, make):
    out = np.full(6, 3.0)
    assert ZEROING.call(True, *make(out)) is None
    assert ZEROING.error() is None
    np.testing.assert_array_equal(out, 3.0)       # not zeroed: nothing was touched


@numba.njit
def _scaled(x, a, b):
    return x[0] * a + b


def test_float_constants_are_compiled_in():
    argtypes = (F64, types.float64, types.float32)
    address, restype = native_function(_scaled, argtypes)
    caller = numba_caller(address, argtypes, restype,
                          [ArrayArg(np.ones(1), False), ConstArg(0.1), ConstArg(np.float32(2.5))])
    assert caller.call(np.array([3.0]), 99.0, 99.0) == 3.0 * 0.1 + 2.5


def test_a_read_only_array_that_is_not_written_passes():
    x = np.ones((2, 3))
    x.flags.writeable = False
    assert CALLER.call(1.0, x, np.zeros(6), np.zeros(6), 10) == 16.0


def test_the_function_s_exception_comes_back():
    argtypes = (F64,)
    address, restype = native_function(_checked_sqrt, argtypes)
    caller = numba_caller(address, argtypes, restype, [ArrayArg(np.ones(1), False)])
    assert caller.call(np.array([4.0])) == 2.0
    assert caller.call(np.array([-4.0])) is None
    error = caller.error()
    assert isinstance(error, ValueError) and "negative" in str(error)


def test_watched_and_fixed_arrays_are_checked_as_they_were():
    x, y, out = np.ones(6), np.ones(6), np.zeros(6)
    address, restype = native_function(_axpy, AXPY)
    slots = [ScalarArg(1.0), FixedArray(x), FixedArray(y), FixedArray(out), ConstArg(0)]
    watched = np.zeros(4)
    caller = numba_caller(address, AXPY, restype, slots, watched=[watched])
    assert caller.call(1.0, 0) == 12.0 and out[0] == 2.0
    watched.shape = (2, 2)                   # changed in place: refused
    assert caller.call(1.0, 0) is None and caller.error() is None and out[0] == 2.0
    watched.shape = (4,)
    watched.dtype = np.int64
    assert caller.call(1.0, 0) is None
    watched.dtype = np.float64
    assert caller.call(1.0, 0) == 24.0


def test_a_busy_flag_refuses_every_call_while_it_is_raised():
    busy = np.zeros(1, np.int64)
    address, restype = native_function(_axpy, AXPY)
    out = np.zeros(6)
    slots = [ScalarArg(1.0), ArrayArg(np.ones(6), True), ArrayArg(np.ones(6), True),
             ArrayArg(out, True, written=True), ConstArg(0)]
    caller = numba_caller(address, AXPY, restype, slots, busy=busy)
    args = (1.0, np.ones(6), np.ones(6), out, 0)
    assert caller.call(*args) == 12.0
    busy[0] = 1
    assert caller.call(*args) is None and caller.error() is None and out[0] == 2.0
    busy[0] = 0
    assert caller.call(*args) == 24.0


def _model():
    return Chain(Dense(3, 5, tanh, rng=1), Dense(5, 1, rng=2))


def _loss(m, x):
    return np.sum(m(x) ** 2)


X = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)


def test_duplicated_gradients_go_through_the_builtin_and_match_the_tape_engine():
    m = _model()
    dup = Duplicated(m)
    expected = gradient(_loss, m, X)[0]
    for _ in range(3):
        got = gradient(_loss, dup, X)[0]
    staged = program._cache[_loss.__code__][0]
    assert isinstance(staged.call, drivers.BuiltinDriver)
    for layer, want in zip(got["layers"], expected["layers"]):
        for k in ("weight", "bias"):
            np.testing.assert_allclose(layer[k], want[k], rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("zero, factor", [(False, 2), (0, 2), (1, 1), ("yes", 1)])
def test_zero_is_taken_by_truth(zero, factor):
    dup = Duplicated(_model())
    first = gradient(_loss, dup, X)[0]["layers"][0]["weight"].copy()
    again = gradient(_loss, dup, X, zero=zero)[0]["layers"][0]["weight"]
    np.testing.assert_allclose(again, factor * first, rtol=1e-6)


def _first_row_loss(m):
    return np.sum(np.sin(m.layers[0].weight[0]) ** 2)


def test_a_weight_whose_shape_is_set_in_place_is_followed():
    """A weight whose shape is set in place (the same object): the builtin refuses it, and
    the call stages again, matching the tape engine."""
    m = _model()
    dup = Duplicated(m)
    gradient(_first_row_loss, dup)
    for tree in (m, dup.dval):
        tree.layers[0].weight.shape = (3, 5)
    got = gradient(_first_row_loss, dup)[0]["layers"][0]["weight"]
    want = gradient(_first_row_loss, m)[0]["layers"][0]["weight"]
    assert got.shape == (3, 5) and np.count_nonzero(want) == 5
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-7)


def test_update_after_a_dtype_set_in_place_does_what_the_python_path_does():
    """The fused update checks each array it reaches through addresses: after a
    parameter's dtype is set in place it does what the Python path does (never float32
    arithmetic on the int32 bits)."""
    fused, python = Duplicated(_model()), Duplicated(_model())
    s_fused, s_python = setup(Adam(0.01), fused), setup(Adam(0.01), python)

    def step():
        outcomes = []
        for dup, s, grad in ((fused, s_fused, None), (python, s_python, python.dval)):
            gradient(_loss, dup, X) if dup.val.layers[0].bias.dtype == np.float32 else None
            try:
                update(s, dup, grad)
                outcomes.append(None)
            except Exception as err:         # noqa: BLE001 (compared below)
                outcomes.append(type(err))
        assert outcomes[0] == outcomes[1]
        for a, b in zip(fused.val.layers, python.val.layers):
            np.testing.assert_allclose(a.weight, b.weight, rtol=1e-5, atol=1e-7)
            np.testing.assert_array_equal(a.bias, b.bias)
    for _ in range(3):
        step()
    for dup in (fused, python):
        dup.val.layers[0].bias.dtype = np.int32
    step()


def test_repeat_calls_return_the_same_read_only_gradient_until_the_shadow_changes():
    m = _model()
    dup = Duplicated(m)
    first = gradient(_loss, dup, X)
    second = gradient(_loss, dup, X)
    assert second is first and second[0]["layers"][1]["weight"] is dup.dval.layers[1].weight
    with pytest.raises(TypeError, match="cannot be changed"):
        second[0]["layers"][0]["weight"] = np.zeros((5, 3), np.float32)
    with pytest.raises(TypeError):
        second[0]["layers"][0].pop("bias")
    mine = dict(second[0])                   # a copy to change
    mine["layers"] = None
    dup.dval.layers[0].weight = np.zeros((5, 3), np.float32)   # a new shadow array
    third = gradient(_loss, dup, X)
    assert third is not first and third[0]["layers"][0]["weight"] is dup.dval.layers[0].weight
    want = gradient(_loss, m, X)[0]["layers"][0]["weight"]
    np.testing.assert_allclose(third[0]["layers"][0]["weight"], want, rtol=2e-5, atol=1e-6)


def test_a_strided_input_is_copied_on_the_slow_path():
    dup = Duplicated(_model())
    wide = np.zeros((4, 6), np.float32)
    wide[:, ::2] = X
    want = [a.copy() for a in (gradient(_loss, dup, X)[0]["layers"][0]["weight"],)]
    got = gradient(_loss, dup, wide[:, ::2])[0]["layers"][0]["weight"]
    np.testing.assert_allclose(got, want[0], rtol=1e-6)


def test_a_repeat_call_waits_while_another_thread_holds_the_program():
    """The native repeat call needs no lock of its own: while another thread holds the
    program's lock (its buffers are in use), the call is refused natively and waits for
    the lock on the slow path."""
    import threading
    dup = Duplicated(_model())
    want = gradient(_loss, dup, X)[0]["layers"][0]["weight"].copy()
    staged = program._cache[_loss.__code__][0]
    done = threading.Event()

    def other():
        gradient(_loss, dup, X)
        done.set()
    with staged.lock:
        thread = threading.Thread(target=other)
        thread.start()
        assert not done.wait(0.3)            # it waits while the lock is held
    thread.join(10)
    assert done.is_set()
    np.testing.assert_allclose(dup.dval.layers[0].weight, want, rtol=1e-6)


def _dict_loss(p):
    return np.sum(p["v99"] ** 2) + np.sum(np.sin(p["a1"]))


def test_a_dict_model_whose_keys_look_like_the_guard_s_names():
    params = {"v99": np.arange(3, dtype=np.float64), "a1": np.ones(2)}
    dup = Duplicated(params)
    for _ in range(3):
        got = gradient(_dict_loss, dup)[0]
    np.testing.assert_allclose(got["v99"], 2 * params["v99"])
    np.testing.assert_allclose(got["a1"], np.cos(params["a1"]))


def _aux_loss(m, x):
    return np.sum(m(x) ** 2), m(x)


def test_the_slow_path_under_the_lock_calls_a_builtin_not_the_python_driver():
    """A call that takes the program's lock (a loss with an aux output) runs through a
    builtin that does not look at the lock's flag: the busy flag it raises itself must not
    send it to the Python driver."""
    m = _model()
    dup = Duplicated(m)
    withgradient(_aux_loss, dup, X)
    staged = program._cache[_aux_loss.__code__][0]
    driven = []
    driver = staged.call.driver
    staged.call.driver = lambda *a: driven.append(a) or driver(*a)
    (val, out), grad = withgradient(_aux_loss, dup, X)
    assert driven == []
    (want_val, want_out), want = withgradient(_aux_loss, m, X)
    np.testing.assert_allclose(val, want_val, rtol=2e-5)
    np.testing.assert_allclose(out, want_out, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(grad[0]["layers"][0]["weight"], want[0]["layers"][0]["weight"],
                               rtol=2e-5, atol=1e-6)


def test_row_copier_checks_every_item_before_copying_any():
    xs = tuple(np.arange(3, dtype=np.float32) + k for k in range(4))
    ys = tuple(np.full((2, 2), k, np.float64) for k in range(4))
    bx, by = np.zeros((4, 3), np.float32), np.zeros((4, 4))
    copy, _ = row_copier([(xs[0], bx), (ys[0], by)])
    assert copy(xs, ys) is True
    np.testing.assert_array_equal(bx, np.stack(xs))
    np.testing.assert_array_equal(by, np.stack(ys).reshape(4, 4))
    bx[:] = by[:] = 0
    for bad in [(xs[:3] + (np.zeros(4, np.float32),), ys),          # another shape
                (xs[:3] + (xs[3].astype(np.float64),), ys),         # another dtype
                (xs, ys[:3] + (np.asfortranarray(ys[3]),)),        # not C-contiguous
                (xs[:3] + (np.float32(1),), ys), (xs[:3] + (None,), ys),
                (xs[:3], ys), (list(xs), ys), (xs,), (xs, ys, ys)]:
        assert copy(*bad) is None
    assert not bx.any() and not by.any()
