"""The ctypes entry Python calls a compiled gradient through (adcore.calling.ctypes_entry): the same
results as the njit stub, and a TypeError (never a wrong result or a crash) for arguments
of another type than the gradient was compiled for."""
import numba
import numpy as np
import pytest

import adcore
from adcore import Active, Duplicated, Reverse, ReverseWithPrimal
from adcore.errors import ActivityError


@numba.njit
def weighted(a, W, flags, x, n):
    s = 0.0
    for i in range(W.shape[0]):
        for j in range(W.shape[1]):
            if flags[i]:
                s += a * W[i, j] * x[j] * n
    return s


def _args():
    rng = np.random.default_rng(0)
    W, x = rng.random((3, 4)), rng.random(4)
    return W, x, np.array([1, 0, 1], np.int64)


@pytest.fixture(scope="module")
def compiled():
    W, x, flags = _args()
    return adcore.compile_gradient(ReverseWithPrimal, weighted, Active(0.5), Duplicated(W, np.zeros_like(W)),
                                   flags, Duplicated(x, np.zeros_like(x)), 2)


def test_a_fresh_gradient_is_called_through_its_entry_and_matches_the_stub(compiled):
    W, x, flags = _args()
    assert compiled.from_disk                     # no stub yet: Python calls the entry
    dW, dx = np.zeros_like(W), np.zeros_like(x)
    value, da, _ = compiled.call(0.5, W, flags, x, 2, dW, dx)
    dW2, dx2 = np.zeros_like(W), np.zeros_like(x)
    assert compiled.native(0.5, W, flags, x, 2, dW2, dx2)[:2] == (value, da)
    np.testing.assert_array_equal(dW, dW2)
    np.testing.assert_array_equal(dx, dx2)
    rows = flags[:, None] * W
    assert value == pytest.approx(0.5 * 2 * np.sum(rows @ x))
    np.testing.assert_allclose(dW, 0.5 * 2 * flags[:, None] * x[None, :])
    np.testing.assert_allclose(dx, 0.5 * 2 * rows.sum(axis=0))
    assert da == pytest.approx(2 * np.sum(rows @ x))


@pytest.mark.parametrize("position, value, words", [
    (1, np.zeros((3, 4), np.float32), "2-d float64"),              # another dtype
    (1, np.zeros(12), "2-d float64"),                              # another number of dimensions
    (1, np.zeros((4, 3)).T, "C-contiguous"),                       # another layout
    (1, np.zeros((3, 4), ">f8"), "native byte order"),             # another byte order
    (2, np.array([1, 0, 1], np.int32), "1-d int64"),
    (1, "read-only", r"writeable .*\(read-only\)"),
])
def test_an_array_of_another_type_is_a_type_error(compiled, position, value, words):
    W, x, flags = _args()
    args = [0.5, W, flags, x, 2, np.zeros_like(W), np.zeros_like(x)]
    if isinstance(value, str):                    # a read-only copy
        value = W.copy()
        value.flags.writeable = False
    args[position] = value
    if position == 1:
        args[5] = np.zeros_like(value)            # a shadow laid out like it
    with pytest.raises(TypeError, match=f"argument {position} must be .*{words}"):
        compiled.call(*args)


def test_an_unaligned_array_runs_as_numba_runs_it(compiled):
    """Numba types an unaligned array as an aligned one; the entry takes it too (the data
    of a shard Dask sent is often 4 bytes off): the same numbers as an aligned copy."""
    W, x, flags = _args()
    unaligned = np.frombuffer(bytearray(8 * 12 + 4), np.float64, 12, 4).reshape(3, 4)
    unaligned[:] = W
    assert not unaligned.flags.aligned
    got = [compiled.call(0.5, w, flags, x, 2, np.zeros_like(W), np.zeros_like(x)) for w in (W, unaligned)]
    assert got[0] == got[1]


def test_int64_arrays_of_either_type_number_pass(compiled):
    W, x, _ = _args()
    flags = np.array([1, 0, 1], np.longlong)      # int64 as 'long long' (another type number)
    assert compiled.call(0.5, W, flags, x, 2, np.zeros_like(W), np.zeros_like(x))[0] == \
        pytest.approx(0.5 * 2 * np.sum((flags[:, None] * W) @ x))


def test_what_is_not_an_array_or_a_misshapen_shadow_is_refused(compiled):
    W, x, flags = _args()
    with pytest.raises(TypeError, match="argument 3 must be a numpy array, got list"):
        compiled.call(0.5, W, flags, list(x), 2, np.zeros_like(W), np.zeros_like(x))
    with pytest.raises(ActivityError, match="shadow of argument 3 must have the shape"):
        compiled.call(0.5, W, flags, x, 2, np.zeros_like(W), np.zeros(5))


@numba.njit
def checked(x):
    if x[0] < 0:
        raise ValueError("negative start")
    return x[0] * x[0]


def test_an_exception_the_kernel_raises_comes_through_the_entry():
    with pytest.raises(ValueError, match="negative start"):
        adcore.gradient(Reverse, checked, np.array([-1.0]))
    assert adcore.gradient(Reverse, checked, np.array([3.0]))[0][0] == 6.0


def test_njit_code_calls_the_gradient_through_its_intrinsic_without_a_stub():
    @numba.njit
    def square_sum(x):
        return np.sum(x * x)
    x = np.arange(1.0, 4.0)
    g = adcore.compile_gradient(Reverse, square_sum, Duplicated(x, np.zeros(3)))
    call = g.njit_call

    @numba.njit
    def twice(x, dx):
        return call(x, dx)[0] + call(x, dx)[0]
    dx = np.zeros(3)
    assert twice(x, dx) == 2 * np.sum(x * x)
    np.testing.assert_allclose(dx, 2 * 2 * x)              # accumulated by both calls
    assert g.from_disk                                    # no stub was compiled
    with pytest.raises(numba.core.errors.TypingError):
        twice(x.astype(np.float32), np.zeros(3, np.float32))
