"""The tape's dispatch path stays short.

A structural check, not a timing: the Python function calls made while recording an op,
while the backward pass handles a record, and in one training step of the seed model
(``bench.seed``), counted with ``sys.setprofile``.  A longer dispatch path (another layer
of wrappers, a numpy function's Python implementation where a ufunc call did, a per-op
lookup through a generic walker) shows up as more calls.  The bounds are the counts
measured when they were written plus a little room.
"""
import gc
import sys

import numpy as np

import optim
from adcore import Const, tape
from layers import Chain, Dense, only, sigmoid, softmax, tanh, train, withgradient


def python_calls(fn, *args):
    """The number of Python function calls (not C calls) made by ``fn(*args)``, with the
    garbage collector off (a collection may run other tests' finalizers in between)."""
    calls = 0

    def profile(frame, event, arg):
        nonlocal calls
        if event == "call":
            calls += 1
    enabled = gc.isenabled()
    gc.disable()
    sys.setprofile(profile)
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
        if enabled:
            gc.enable()
    return calls


def elementwise(n):
    def f(x):                                   # 3 ops a step: multiply, add, tanh
        for _ in range(n):
            x = np.tanh(x * 1.01 + 0.1)
        return np.sum(x)
    return f


def mixed(n):
    def f(x):                                   # 11 ops a step (bench.tape_bench.mixed_chain)
        for _ in range(n):
            m = x[:, None] * x[None, :]
            x = np.sum(m.T, axis=0)[::-1] * 0.1
            x = np.exp(-x) - x * 0.5
        return np.sum(x)
    return f


def per_op(count, short, long, ops_per_step):
    """Calls per op: the difference between the counts of a long and a short chain, per op."""
    return (count(long) - count(short)) / ((long - short) * ops_per_step)


X = np.linspace(-1.0, 1.0, 8)


def recording(make):
    return lambda n: python_calls(tape.record, make(n), X)


def backward(make):
    def count(n):
        rec = tape.record(make(n), X)
        return python_calls(rec.tape.backward, rec.out.id)
    return count


def test_an_elementwise_op_records_in_a_few_calls():
    # measured: 2.33 (operator -> _record, the Record built without a call; ufunc ->
    # __array_ufunc__ -> apply1 -> _record)
    assert per_op(recording(elementwise), 10, 20, 3) <= 2.6


def test_a_backward_record_of_an_elementwise_op_costs_at_most_its_vjp():
    # measured: 1.07 (the VJP itself, and now and then a helper of numpy's)
    assert per_op(backward(elementwise), 10, 20, 3) <= 1.1


def test_shape_ops_record_and_differentiate_in_a_few_calls():
    # measured: 4.0 recording (indexing, .T, np.sum through __array_function__), 4.7 backward
    assert per_op(recording(mixed), 5, 10, 11) <= 4.5
    assert per_op(backward(mixed), 5, 10, 11) <= 5.0


def seed_model():
    return Chain(Dense(1, 23, tanh, rng=0), Dense(23, 1, bias=False, rng=1), only)


def seed_loss(m, x, y):
    return (m(x) - y) ** 2


def test_a_seed_model_training_step_makes_a_bounded_number_of_calls():
    m = seed_model()
    state = optim.setup(optim.Adam(), m)
    x, y = np.array([0.3], np.float32), np.float32(0.5)
    data = [(np.array([v], np.float32), np.float32(2 * v - v ** 3)) for v in (-1.0, -0.5, 0.5, 1.0)]
    train(seed_loss, m, data, state)            # compiles Adam's kernel
    rec = tape.record(seed_loss, m, x, y)
    assert [r.op for r in rec.tape.records if r.op != "input"] == [
        "transpose", "matmul", "add", "tanh", "transpose", "matmul", "getitem", "subtract", "power"]
    grad = withgradient(seed_loss, m, x, y).grad[0]
    # measured: 99 for the gradient (9 ops, 5 leaves, a model of 3 nodes), 37 for the
    # update of its 3 arrays (49 when the walk went through adcore.tree.child), 138 a
    # training step (its data are constants)
    assert python_calls(withgradient, seed_loss, m, x, y) <= 106
    assert python_calls(optim.update, state, m, grad) <= 42
    assert python_calls(train, seed_loss, m, data, state) <= 4 * 146


def mlp_calls(batch):
    """The Python calls of one gradient of the docs MLP (bench/mlp.py) on ``batch`` rows."""
    m = Chain(Dense(784, 32, sigmoid, rng=0), Dense(32, 10, rng=1), softmax)
    x, y = np.ones((batch, 784), np.float32), np.eye(10, dtype=np.float32)[np.arange(batch) % 10]

    def loss(m, x, y):
        return np.sum((m(x) - y) ** 2)
    withgradient(loss, m, Const(x), Const(y))
    return python_calls(withgradient, loss, m, Const(x), Const(y))


def test_an_mlp_gradient_makes_a_bounded_number_of_calls():
    # measured: 124 at 4 rows, 128 at the benchmark's 128 (11 ops, 4 leaves; the stable
    # sigmoid and softmax are one op each; softmax's short rows and the biases' cotangents
    # summed by BLAS products)
    assert mlp_calls(4) <= 132
    assert mlp_calls(128) <= 136
