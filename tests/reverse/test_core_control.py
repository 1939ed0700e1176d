"""Finite-difference checks of control flow: branches, switches, loops, exits."""
import math

import numba
import numpy as np

from fdcheck import check


@numba.njit
def branches(x, a):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > 0.5:
            s += math.sin(x[i]) * a
        elif x[i] > 0.2:
            s += x[i] * x[i]
        else:
            s -= math.exp(x[i] * a)
    return s


def test_if_elif_else():
    check(branches, np.array([0.1, 0.3, 0.7, 0.9, 0.25, 0.05]), 1.3)


@numba.njit
def switch(x, k):
    s = 0.0
    for i in range(x.shape[0]):
        c = (i + k) % 4
        if c == 0:
            s += x[i] * 2.0
        elif c == 1:
            s += x[i] * x[i]
        elif c == 2:
            s += math.cos(x[i])
        else:
            s += math.sqrt(x[i])
    return s


def test_switch_on_integer():
    check(switch, np.random.default_rng(0).uniform(0.5, 2, 9), 1)


@numba.njit
def nested(A, v):
    s = 0.0
    for i in range(A.shape[0]):
        t = 1.0
        for j in range(i + 1):              # triangular: trip count depends on i
            t = t * A[i, j] + v[j]
        s += math.tanh(t)
    return s


def test_nested_triangular_loops():
    rng = np.random.default_rng(1)
    check(nested, rng.uniform(-1, 1, (4, 4)), rng.uniform(-1, 1, 4))


@numba.njit
def data_dependent_while(x, a):
    s, i = 0.0, 0
    while a < 5.0:              # trip count depends on the value of a
        a = a * 1.7 + x[i % x.shape[0]]
        s += a * a
        i += 1
    return s


def test_while_with_data_dependent_trip_count():
    check(data_dependent_while, np.array([0.3, 0.2, 0.4]), 0.4)


@numba.njit
def with_break(x, limit):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
        if s > limit:
            break
        s *= 1.1
    return s


def test_break():
    check(with_break, np.array([0.5, 0.6, 0.7, 0.8, 0.9, 1.0]), 1.5)


@numba.njit
def early_return(x, a):
    for i in range(x.shape[0]):
        if x[i] * a > 1.0:
            return math.log(x[i]) * a       # exit inside the loop
    if a > 2.0:
        return a * a                        # second exit
    return x[0] * a                         # third exit


def test_early_return_and_several_exits():
    check(early_return, np.array([0.2, 0.3, 3.0, 0.1]), 0.5)     # exits in the loop
    check(early_return, np.array([0.2, 0.3, 0.3, 0.1]), 2.5)     # second exit
    check(early_return, np.array([0.2, 0.3, 0.3, 0.1]), 1.5)     # third exit


@numba.njit
def loop_carried_product(x):
    p = 1.0
    for i in range(x.shape[0]):
        p = p * x[i] + math.sin(p)          # the carried value is needed in reverse
    return p


def test_loop_carried_nonlinear_recurrence():
    check(loop_carried_product, np.random.default_rng(2).uniform(0.5, 1.5, 10))


@numba.njit
def countdown(x):
    s = 0.0
    for i in range(x.shape[0] - 1, -1, -2):
        s = s * 0.5 + x[i] * x[i]
    return s


def test_loop_with_negative_step():
    check(countdown, np.random.default_rng(3).uniform(-1, 1, 7))


@numba.njit
def swap_phis(x):
    a, b = 1.0, 0.5
    for i in range(x.shape[0]):
        a, b = b * x[i], a + x[i]
    return a * b


def test_parallel_phi_swap():
    check(swap_phis, np.random.default_rng(4).uniform(-1, 1, 5))


@numba.njit
def finite_max(x):
    m = x[0]
    for i in range(1, x.shape[0]):
        if x[i] > m:
            m = x[i]
    return m if math.isfinite(m) else 0.0


@numba.njit
def helper_twice(x):
    return finite_max(x) * finite_max(x * 2.0)


def test_helper_inlined_twice():
    check(helper_twice, np.array([1.0, 3.0, 2.0]))
