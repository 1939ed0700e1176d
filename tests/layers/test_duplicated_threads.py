"""Duplicated gradients split a batch's rows across Numba's threads: threaded against serial
(the whole batch's program, run while Numba has one thread), against the tape engine and
central differences; models that must not split run serially and say why; the parts'
gradients are the same on every call (no races), at 2 threads here and 4 in a fresh
process; a fresh process's first call is a threaded one."""
import os
import subprocess
import sys

import numba
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import layers as L
from adcore import Duplicated
from adcore.errors import ActivityError
from adcore.tree import leaves
from layers import (BatchNorm, Chain, Conv, Dense, MaxPool, flatten, gradient, logitcrossentropy,
                    mse, relu, softmax, tanh, threads, train, withgradient)
from layers.staging import split_policy
from optim import Descent, setup

pytestmark = pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2,
                                reason="Numba has one thread (NUMBA_NUM_THREADS)")
RNG = np.random.default_rng(0)


def mean_loss(m, x, y):
    return logitcrossentropy(m(x), y)


def sum_loss(m, x, y):
    return mse(m(x), y, agg=np.sum)


def mlp(dtype=np.float64):
    return L.f64(Chain(Dense(64, 96, tanh, rng=1), Dense(96, 10, rng=2))) if dtype == np.float64 \
        else Chain(Dense(64, 96, tanh, rng=1), Dense(96, 10, rng=2))


def cnn():
    return Chain(Conv((3, 3), 1, 8, relu, pad=1, rng=1), MaxPool((2, 2)),
                 Conv((3, 3), 8, 16, relu, pad=1, rng=2), MaxPool((2, 2)),
                 flatten, Dense(16 * 2 * 2, 10, rng=3))


def data(shape, classes=10, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(dtype)
    return x, np.eye(classes, dtype=dtype)[rng.integers(0, classes, shape[0])]


def flat(tree):
    return np.concatenate([np.asarray(a, np.float64).ravel() for _, a in leaves(tree)])


def at_threads(n, f, *args, **kwargs):
    """``f(*args)`` while Numba has ``n`` threads."""
    before = numba.get_num_threads()
    numba.set_num_threads(n)
    try:
        return f(*args, **kwargs)
    finally:
        numba.set_num_threads(before)


def threaded_and_serial(loss, dup, *args):
    """The flattened gradients with 2 threads (split) and with one (the serial program)."""
    threaded = flat(at_threads(2, gradient, loss, dup, *args)[0])
    serial = flat(at_threads(1, gradient, loss, dup, *args)[0])
    return threaded, serial


@pytest.fixture(scope="module")
def dense():
    """A float64 MLP, its Duplicated and a batch of 32: compiled once for the module."""
    model = mlp()
    dup = Duplicated(model)
    x, y = data((32, 64))
    for loss in (mean_loss, sum_loss):
        assert at_threads(2, threads, loss, dup, x, y).startswith("split into 2 parts of 16 rows")
    return model, dup, x, y


@pytest.fixture(scope="module")
def conv():
    model = cnn()
    dup = Duplicated(model)
    x, y = data((32, 1, 8, 8), dtype=np.float32)
    assert at_threads(2, threads, mean_loss, dup, x, y).startswith("split into 2 parts")
    return model, dup, x, y


@pytest.mark.parametrize("loss", [mean_loss, sum_loss], ids=["mean", "sum"])
def test_dense_threaded_equals_serial_and_the_tape_engine(dense, loss):
    model, dup, x, y = dense
    threaded, serial = threaded_and_serial(loss, dup, x, y)
    np.testing.assert_allclose(threaded, serial, rtol=1e-12, atol=1e-14)
    tape = flat(gradient(loss, model, x, y)[0])
    np.testing.assert_allclose(threaded, tape, rtol=1e-10, atol=1e-13)
    val = at_threads(2, withgradient, loss, dup, x, y).val
    assert np.isclose(val, loss(model, x, y), rtol=1e-12)


def test_dense_threaded_gradient_against_central_differences(dense):
    model, dup, x, y = dense
    g = at_threads(2, gradient, mean_loss, dup, x, y)[0]
    w = model.layers[0].weight
    dw = g["layers"][0]["weight"]
    for i, j in [(0, 0), (5, 17), (95, 63)]:
        old, eps = w[i, j], 1e-6
        w[i, j] = old + eps
        up = mean_loss(model, x, y)
        w[i, j] = old - eps
        down = mean_loss(model, x, y)
        w[i, j] = old
        assert np.isclose(dw[i, j], (up - down) / (2 * eps), rtol=1e-6, atol=1e-9)


def test_zero_false_accumulates_the_threaded_gradient(dense):
    _, dup, x, y = dense
    once = flat(at_threads(2, gradient, sum_loss, dup, x, y)[0]).copy()
    twice = flat(at_threads(2, gradient, sum_loss, dup, x, y, zero=False)[0])
    np.testing.assert_allclose(twice, 2 * once, rtol=1e-13)


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2 ** 16), scale=st.floats(0.1, 10.0))
def test_new_data_needs_no_new_program_and_agrees(dense, seed, scale):
    _, dup, x, y = dense
    x2, y2 = data((32, 64), seed=seed)
    threaded, serial = threaded_and_serial(mean_loss, dup, scale * x2, y2)
    np.testing.assert_allclose(threaded, serial, rtol=1e-11, atol=1e-14)


@pytest.mark.slow
def test_cnn_threaded_equals_serial_and_the_tape_engine(conv):
    model, dup, x, y = conv
    threaded, serial = threaded_and_serial(mean_loss, dup, x, y)
    scale = np.abs(serial).max()
    np.testing.assert_allclose(threaded, serial, rtol=1e-5, atol=1e-6 * scale)
    tape = flat(gradient(mean_loss, model, x, y)[0])
    np.testing.assert_allclose(threaded, tape, rtol=2e-4, atol=2e-5 * scale)


def same_every_time(loss, dup, x, y, repeat=40):
    """The parts write private shadows and are added in part order after the join: no
    call may differ from another by even one bit."""
    first = flat(at_threads(2, gradient, loss, dup, x, y)[0])
    for _ in range(repeat):
        assert np.array_equal(flat(at_threads(2, gradient, loss, dup, x, y)[0]), first)


@pytest.mark.parametrize("loss", [mean_loss, sum_loss], ids=["mean", "sum"])
def test_dense_threaded_gradients_are_the_same_on_every_call(dense, loss):
    same_every_time(loss, *dense[1:])


@pytest.mark.slow
def test_cnn_threaded_gradients_are_the_same_on_every_call(conv):
    same_every_time(mean_loss, *conv[1:])


def test_train_with_threads_steps_like_the_serial_loop():
    """With threads, ``train`` takes each item's split gradient; with one thread, its
    native loop: the same steps to rounding."""
    x, y = data((32, 64), seed=3)
    items = [(x, y), (x[::-1].copy(), y[::-1].copy())]
    runs = []
    for n in (2, 1):
        model = mlp()
        losses = at_threads(n, train, mean_loss, Duplicated(model), items, setup(Descent(0.1), model),
                            epochs=2)
        runs.append((losses, flat(model)))
    np.testing.assert_allclose(runs[0][0], runs[1][0], rtol=1e-12)
    np.testing.assert_allclose(runs[0][1], runs[1][1], rtol=1e-11, atol=1e-14)


def _batch_mean(m, x, y):
    h = m(x)
    return np.sum((h - np.mean(h, axis=0)) ** 2)


def _softmax_rows(m, x, y):
    return np.sum(softmax(m(x).T) * y.T)


def _mixed_reshape(m, x, y):
    return np.sum(m(x).reshape(-1, 20)[:, :3] ** 2)


def _scaled(m, x, y):
    return 0.5 * np.sum((m(x) - y) ** 2)


def _batchnorm(m, x, y):
    return np.sum(m(x) * y)


@pytest.mark.parametrize("loss, model, why", [
    (_batch_mean, mlp, "'mean' over the batch's rows"),
    (_softmax_rows, mlp, "transpose that moves the batch's rows"),
    (_mixed_reshape, mlp, "reshape that mixes the batch's rows"),
    (_scaled, mlp, "'sum' over the batch's rows"),
    (_batchnorm, lambda: L.f64(Chain(Dense(64, 96), BatchNorm(96), Dense(96, 10))), "state"),
], ids=["batch-mean", "softmax-axis-0", "reshape", "scaled-loss", "batchnorm"])
def test_losses_that_couple_rows_run_serially_and_say_why(loss, model, why):
    m = model()
    dup = Duplicated(m)
    x, y = data((32, 64))
    report = at_threads(2, threads, loss, dup, x, y)
    assert report.startswith("runs serially") and why in report, report
    got = flat(at_threads(2, gradient, loss, dup, x, y)[0])
    np.testing.assert_allclose(got, flat(gradient(loss, m, x, y)[0]), rtol=1e-9, atol=1e-12)


def test_small_batches_and_one_thread_run_serially():
    dup = Duplicated(mlp())
    x, y = data((6, 64))
    assert "parts of at least" in at_threads(2, threads, mean_loss, dup, x, y)
    small = Duplicated(L.f64(Chain(Dense(4, 3), Dense(3, 2))))
    x, y = data((32, 4), classes=2)
    assert "too little work" in at_threads(2, threads, mean_loss, small, x, y)
    with pytest.raises(ActivityError, match="Duplicated"):
        threads(mean_loss, mlp(), x, y)


@settings(max_examples=30, deadline=None)
@given(batch=st.integers(1, 300), threads_=st.integers(1, 16))
def test_part_count_cuts_a_batch_evenly_into_parts_of_enough_rows(batch, threads_):
    parts = split_policy.part_count(batch, threads_)
    assert 1 <= parts <= max(1, threads_) and batch % parts == 0
    if parts > 1:
        assert batch // parts >= split_policy.MIN_ROWS
    better = [p for p in range(parts + 1, threads_ + 1)
              if batch % p == 0 and batch // p >= split_policy.MIN_ROWS]
    assert not better


SCRIPT = """
import numba, numpy as np
from adcore import Duplicated
from adcore.errors import ActivityError
from layers import Chain, Conv, Dense, MaxPool, flatten, relu, gradient, threads, logitcrossentropy
from adcore.tree import leaves

def loss(m, x, y):
    return logitcrossentropy(m(x), y)

model = Chain(Conv((3, 3), 1, 8, relu, pad=1, rng=1), MaxPool((2, 2)), flatten,
              Dense(8 * 4 * 4, 10, rng=3))
rng = np.random.default_rng(0)
x = rng.standard_normal((32, 1, 8, 8)).astype(np.float32)
y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 32)]
dup = Duplicated(model)
flat = lambda g: np.concatenate([np.asarray(a).ravel() for _, a in leaves(g)])
print(threads(loss, dup, x, y))                     # stages the split at once
first = flat(gradient(loss, dup, x, y)[0])          # the process's first gradient: threaded
tape = flat(gradient(loss, model, x, y)[0])
assert np.allclose(first, tape, rtol=2e-4, atol=1e-6), np.abs(first - tape).max()
for n in {threads_list}:
    numba.set_num_threads(n)
    for _ in range({repeat}):
        assert np.array_equal(flat(gradient(loss, dup, x, y)[0]), first), n
print("same every time")
"""


def _fresh(env, threads_list, repeat):
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(threads_list=threads_list,
                                                                repeat=repeat)],
                          env=dict(os.environ, **env), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_fresh_process_first_call_is_threaded_and_right():
    out = _fresh({"NUMBA_NUM_THREADS": "2"}, (2,), 3)
    assert "split into 2 parts of 16 rows" in out and "same every time" in out


@pytest.mark.slow
def test_four_threads_split_into_four_parts_the_same_every_time():
    out = _fresh({"NUMBA_NUM_THREADS": "4"}, (4, 3, 2), 20)
    assert "split into 4 parts of 8 rows" in out and "same every time" in out


def _batch_sized_slice(m, x, y):
    return np.sum(m(x)[:, :x.shape[0] // 8] ** 2)     # 4 columns for 32 rows, 2 for a part


def test_a_loss_whose_code_depends_on_the_batch_size_runs_serially():
    model = mlp()
    dup = Duplicated(model)
    x, y = data((32, 64))
    report = at_threads(2, threads, _batch_sized_slice, dup, x, y)
    assert report.startswith("runs serially") and "batch's size" in report, report
    got = flat(at_threads(2, gradient, _batch_sized_slice, dup, x, y)[0])
    np.testing.assert_allclose(got, flat(gradient(_batch_sized_slice, model, x, y)[0]), rtol=1e-9,
                               atol=1e-12)


def test_a_program_splits_once_it_is_hot(monkeypatch):
    """The first calls run the serial program (staging a split costs about a second); once
    the serial calls have taken ``HOT_SECONDS`` the program splits, and agrees."""
    from layers.staging import row_split
    from layers.staging.program import lookup
    def loss(m, x, y):                 # a program of its own
        return mean_loss(m, x, y)

    model = mlp()
    dup = Duplicated(model)
    x, y = data((32, 64))
    serial = flat(at_threads(2, gradient, loss, dup, x, y)[0]).copy()
    rows = lookup(loss, (dup, x, y))[0].row_threads
    assert rows.split is None and rows.serial_seconds > 0
    monkeypatch.setattr(row_split, "HOT_SECONDS", rows.serial_seconds)
    threaded = flat(at_threads(2, gradient, loss, dup, x, y)[0])
    assert rows.split is not None and rows.describe.startswith("split into 2 parts")
    np.testing.assert_allclose(threaded, serial, rtol=1e-12, atol=1e-14)
