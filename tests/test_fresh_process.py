"""Every public entry point works as the first call of a fresh process (issue 10, case 1).

Each script below runs in its own interpreter and makes one public call before anything
else is compiled (defining an njit function compiles nothing), then checks the numbers it
got against a closed form or central finite differences (``tests/fdcheck.py``), computed
*after* that call so that they cannot initialise anything first.  A script exits 0; a
script that expects an ``adcore.ADError`` lets it propagate, so the process must end with
that exception's traceback and exit status 1, never with a signal.  The scripts run two at
a time in a module-scoped fixture; each pays Numba's import and first compile.
"""
import os
import pathlib
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
TIMEOUT = 240

# The README's kernel; Enzyme's semantics with a seed s in out's shadow:
# L = sum(sin(a x)) + <s, sin(a x)>  ->  dL/da = sum(x cos(a x) (1 + s)),
# dL/dx = a cos(a x) (1 + s), and out's shadow ends as 0 (out is overwritten).
KERNEL = """
import math
import numba
import numpy as np
import adcore
from adcore import Reverse, ReverseWithPrimal, Active, Duplicated, Const

def f(a, x, out):
    for i in range(x.shape[0]):
        out[i] = math.sin(a * x[i])
    return out.sum()

a = 0.3
x = np.array([0.5, -1.25, 2.0, 0.75])
s = np.array([0.5, -1.0, 2.0, 0.25])
dx, out, dout = np.zeros(4), np.zeros(4), s.copy()

def check_closed_form(da, dx, dout, value=None):
    w = 1.0 + s
    np.testing.assert_allclose(da, np.sum(x * np.cos(a * x) * w), rtol=1e-12)
    np.testing.assert_allclose(dx, a * np.cos(a * x) * w, rtol=1e-12)
    np.testing.assert_allclose(dout, 0.0, atol=0)
    np.testing.assert_allclose(out, np.sin(a * x), rtol=1e-14)
    if value is not None:
        np.testing.assert_allclose(value, np.sum(np.sin(a * x)), rtol=1e-14)
"""

NJIT = KERNEL + "f = numba.njit(f)\n"

ADD_IR = r'''
ADD = "define double @f(double %x, double %y) {\n  %s = fadd double %x, %y\n  ret double %s\n}\n"
'''

# x[0] ** n through llvm.powi: a compiler-runtime builtin (__powidf2) in the JIT.
POWI_IR = r'''
POWI = """
declare double @llvm.powi.f64.i32(double, i32)
define double @p(ptr %x, i32 %n) {
entry:
  %v = load double, ptr %x
  %r = call double @llvm.powi.f64.i32(double %v, i32 %n)
  ret double %r
}
"""
'''

# A call to a symbol no library of the process defines.
UNDEFINED_IR = r'''
UNDEFINED = """
declare double @adcore_no_such_symbol(double)
define double @g(double %x) {
entry:
  %r = call double @adcore_no_such_symbol(double %x)
  ret double %r
}
"""
'''

# One Dense layer and mse, float64, in closed form:
# loss = mean((W x + b - y)^2) over the n outputs; dW = 2/n r x^T, db = 2/n r.
MODEL = """
import numpy as np
import adcore
import layers
import optim
from adcore import Duplicated, Const
from layers import Chain, Dense, mse

rng = np.random.default_rng(0)
W0 = rng.standard_normal((3, 2))
b0 = rng.standard_normal(3)
x = np.array([0.5, -1.5])
y = np.array([1.0, 0.0, -2.0])

def fresh_model():
    return Chain(Dense(W0.copy(), bias=b0.copy()))

def loss(m, x, y):
    return mse(m(x), y)

def closed_form(W=W0, b=b0):
    r = W @ x + b - y
    return np.mean(r ** 2), 2 / 3 * np.outer(r, x), 2 / 3 * r

def check_grad(g, W=W0, b=b0):
    _, dW, db = closed_form(W, b)
    np.testing.assert_allclose(g["layers"][0]["weight"], dW, rtol=1e-12)
    np.testing.assert_allclose(g["layers"][0]["bias"], db, rtol=1e-12)
"""

# Two steps of Descent(0.1) on the same item, in closed form.
TRAIN_CHECK = """
l0, dW, db = closed_form()
W1, b1 = W0 - 0.1 * dW, b0 - 0.1 * db
np.testing.assert_allclose(losses, [l0, closed_form(W1, b1)[0]], rtol=1e-12)
_, dW1, db1 = closed_form(W1, b1)
np.testing.assert_allclose(model.layers[0].weight, W1 - 0.1 * dW1, rtol=1e-12)
np.testing.assert_allclose(model.layers[0].bias, b1 - 0.1 * db1, rtol=1e-12)
"""

# Mutual recursion: Numba compiles is_odd while typing is_even, and is_odd names is_even by
# that compile, which adcore's own lowering of is_even must not leave undefined.
MUTUAL = """
import math
import numba
import numpy as np
import adcore
from adcore import Reverse, Forward, Duplicated

@numba.njit
def is_even(v, n):
    if n == 0:
        return v
    return is_odd(math.sin(v) * 1.1, n - 1)

@numba.njit
def is_odd(v, n):
    if n == 0:
        return v * v
    return is_even(v + 0.5 * v * v, n - 1)

def fd(v, eps=1e-6):
    return (is_even.py_func(v + eps, 5) - is_even.py_func(v - eps, 5)) / (2 * eps)
"""

# name -> (script, name of the ADError subclass it must die with, or None)
SCRIPTS = {
    "autodiff_reverse_njit": (NJIT + """
da, gx, gout = adcore.autodiff(Reverse, f, Active(a), Duplicated(x, dx), Duplicated(out, dout))
assert gx is None and gout is None
check_closed_form(da, dx, dout)
""", None),
    "autodiff_with_primal_njit": (NJIT + """
(da, _, _), value = adcore.autodiff(ReverseWithPrimal, f, Active(a), Duplicated(x, dx),
                                    Duplicated(out, dout))
check_closed_form(da, dx, dout, value)
""", None),
    "autodiff_python_function": (KERNEL + """
da, _, _ = adcore.autodiff(Reverse, f, Active(a), Duplicated(x, dx), Duplicated(out, dout))
check_closed_form(da, dx, dout)
dx[:], out[:], dout[:] = 0.0, 0.0, s
(da, _, _), value = adcore.autodiff(ReverseWithPrimal, f, Active(a), Duplicated(x, dx),
                                    Duplicated(out, dout))
check_closed_form(da, dx, dout, value)
""", None),
    "autodiff_forward_njit": (NJIT + """
from adcore import Forward, ForwardWithPrimal, BatchDuplicated
tx = np.array([1.0, 0.5, -2.0, 0.25])
dy, value = adcore.autodiff(ForwardWithPrimal, f, Duplicated(a, 0.5), Duplicated(x, tx), Duplicated(out, dout))
expected = np.cos(a * x) * (0.5 * x + a * tx)          # d sin(a x) along (0.5, tx)
np.testing.assert_allclose(dout, expected, rtol=1e-13)
np.testing.assert_allclose(dy, expected.sum(), rtol=1e-13)
np.testing.assert_allclose(value, np.sin(a * x).sum(), rtol=1e-14)
dys = adcore.autodiff(Forward, f, a, BatchDuplicated(x, (tx, 2 * tx)), np.zeros(4))
np.testing.assert_allclose(dys, [np.sum(a * np.cos(a * x) * tx) * k for k in (1, 2)], rtol=1e-13)
""", None),
    "jacobian": ("""
import numpy as np
import adcore
from adcore import Forward, Reverse

def g(x):
    return np.sin(x) * x[0]

x = np.array([0.5, -1.0, 2.0])
J = adcore.jacobian(Forward, g, x)
expected = np.diag(np.cos(x) * x[0])
expected[:, 0] += np.sin(x)
np.testing.assert_allclose(J, expected, rtol=1e-13)
np.testing.assert_allclose(adcore.jacobian(Reverse, g, x), expected, rtol=1e-13)
""", None),
    "hvp_hessian": ("""
import numpy as np
import adcore

def f(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] ** 3 * x[0]
    return s

x, v = np.array([0.5, -1.0, 2.0]), np.array([1.0, 2.0, -0.5])
H = 6 * np.diag(x) * x[0]
H[0, :] += 3 * x ** 2
H[:, 0] += 3 * x ** 2
np.testing.assert_allclose(adcore.hvp(f, x, v), H @ v, rtol=1e-13)
np.testing.assert_allclose(adcore.hessian(f, x), H, rtol=1e-13)
""", None),
    "hvp_blas": ("""
import numba
import numpy as np
import adcore

@numba.njit
def f(x, A):
    return np.sum(np.tanh(A @ x))

x, v = np.array([0.5, -1.0, 2.0]), np.array([1.0, 2.0, -0.5])
A = np.array([[0.3, -0.2, 0.1], [0.5, 0.4, -0.6]])
Hv = adcore.hvp(f, x, v, A)
t = np.tanh(A @ x)
np.testing.assert_allclose(Hv, A.T @ np.diag(-2 * t * (1 - t * t)) @ A @ v, rtol=1e-12)
""", None),
    "mutual_recursion_first": (MUTUAL + """
g = adcore.gradient(Reverse, is_even, 0.3, 5)[0]
t = adcore.autodiff(Forward, is_even, Duplicated(0.3, 1.0), 5)
np.testing.assert_allclose([g, t], [fd(0.3), fd(0.3)], rtol=1e-7)
assert is_even(0.3, 5) == is_even.py_func(0.3, 5)      # the primal still runs
""", None),
    "recursion_over_a_read_only_array_first": ("""
import numba
import numpy as np
import adcore
from adcore import Reverse, Duplicated

@numba.njit
def fib(x, n):                  # its calls' slots stay on the stack; x is read again
    if n < 2:
        return x[0] * x[n]
    return fib(x, n - 1) + fib(x, n - 2)

x, dx = np.array([0.9, 1.1]), np.zeros(2)
adcore.autodiff(Reverse, fib, Duplicated(x, dx), 10)
assert adcore.last_cached_bytes() == 0
eps = 1e-6
fd = [(fib.py_func(x + eps * e, 10) - fib.py_func(x - eps * e, 10)) / (2 * eps) for e in np.eye(2)]
np.testing.assert_allclose(dx, fd, rtol=1e-7)
""", None),
    "autodiff_called_past_its_native_caller_first": ("""
import numba
import numpy as np
import adcore
from adcore import Active, Duplicated, Reverse

@numba.njit
def f(a, x, n):
    s = 0.0
    for i in range(x.shape[0]):
        s += a * x[i] ** n
    return s

x, dx = np.array([0.5, 1.5, -2.0]), np.zeros(3)
for _ in range(250):             # the repeat calls' builtin is compiled at the 201st
    da = adcore.autodiff(Reverse, f, Active(0.7), Duplicated(x, dx), 3)[0]
np.testing.assert_allclose(dx, 250 * 0.7 * 3 * x ** 2, rtol=1e-12)
np.testing.assert_allclose(da, np.sum(x ** 3), rtol=1e-12)
""", None),
    "mutual_recursion_after_the_primal": (MUTUAL + """
assert is_even(0.3, 5) == is_even.py_func(0.3, 5)
np.testing.assert_allclose(adcore.gradient(Reverse, is_even, 0.3, 5)[0], fd(0.3), rtol=1e-7)
""", None),
    "gradient": (NJIT + """
from fdcheck import fd_gradient
ga, gx, gout = adcore.gradient(Reverse, f, a, x, Const(out))
assert gout is None
fa, fx, _ = fd_gradient(f.py_func, [a, x, out], {})
np.testing.assert_allclose(ga, fa, rtol=1e-7)
np.testing.assert_allclose(gx, fx, rtol=1e-7)
""", None),
    "parallel_loop_forward_hvp_report": ("""
import math
import numba
import numpy as np
import adcore
from adcore import Const, Duplicated, Forward, Reverse
from numba import prange

@numba.njit(parallel=True)
def g(x, w):
    s = 0.0
    for i in prange(x.shape[0]):
        s += math.sin(w[0] * x[i]) * x[i]
    return s

x, w, v = np.array([0.5, -1.0, 2.0]), np.array([0.7]), np.array([1.0, 0.5, -2.0])
# first call of the process: forward mode; then hvp and the plan report
t = adcore.autodiff(Forward, g, Duplicated(x, v), Const(w))
np.testing.assert_allclose(t, np.sum((np.sin(0.7 * x) + 0.7 * x * np.cos(0.7 * x)) * v), rtol=1e-12)
hv = adcore.hvp(g, x, v, w)
np.testing.assert_allclose(hv, (2 * 0.7 * np.cos(0.7 * x) - 0.49 * x * np.sin(0.7 * x)) * v, rtol=1e-12)
report = str(adcore.cache_report(g, x, Const(w)))
assert "reverse runs on Numba's threads" in report, report
""", None),
    "parallel_array_expression_over_2d_arrays_first": ("""
import numba
import numpy as np
import adcore
from adcore import Reverse

@numba.njit(parallel=True)
def f(A, B):
    C = np.exp(A) * B
    return np.sum(C * C)

A, B = np.linspace(-1, 1, 60).reshape(12, 5), np.linspace(0.5, 2, 60).reshape(12, 5)
dA, dB = adcore.gradient(Reverse, f, A, B)        # its shadows shared between the threads
C = np.exp(A) * B
np.testing.assert_allclose(dA, 2 * C * C, rtol=1e-13)
np.testing.assert_allclose(dB, 2 * C * np.exp(A), rtol=1e-13)
""", None),
    "flat_grid_time_steps_first": ("""
import numba
import numpy as np
from numba import prange
import adcore
from adcore import Const, Reverse

@numba.njit(parallel=True)
def f(u, v, p, steps):
    n = u.shape[0]
    for _ in range(steps):
        for k in prange(n):
            if p <= k < n - p:
                v[k] = 0.5 * (u[k - p] + u[k + p])     # a band of rows on a flat grid
            else:
                v[k] = u[k]
        for k in prange(n):
            u[k] = v[k]                                # a memcpy of each piece's range
    return np.sum(u * np.arange(n))

n, p, steps = 160, 4, 3
u = np.linspace(0.1, 1.0, n)
(du,) = adcore.gradient(Reverse, f, u, Const(np.zeros(n)), Const(p), Const(steps))[:1]
M = np.eye(n)                                          # one step as a matrix: the closed form
M[p:n - p] = 0.0
for k in range(p, n - p):
    M[k, k - p] = M[k, k + p] = 0.5
np.testing.assert_allclose(du, np.linalg.matrix_power(M, steps).T @ np.arange(n), rtol=1e-13, atol=1e-13)
""", None),
    "print_in_a_callee_compiled_before": ("""
import numba
import numpy as np
import adcore

@numba.njit
def prints_its_sum(x):
    print("callee", x[0])
    return np.sum(x ** 2)

@numba.njit
def calls_it(x):
    return 3.0 * prints_its_sum(x)

prints_its_sum(np.ones(2))        # compiled and optimised by Numba before adcore reads it
x = np.array([0.5, -1.5, 2.0])
(gx,) = adcore.gradient(adcore.Reverse, calls_it, x)
np.testing.assert_allclose(gx, 6.0 * x, rtol=1e-12)
""", None),
    "gradient_parallel_loop": (KERNEL + """
from numba import prange

def g(a, x, out):
    for i in prange(x.shape[0]):
        out[i] = math.sin(a * x[i])
    return out.sum()

g = numba.njit(parallel=True)(g)
ga, gx, gout = adcore.gradient(Reverse, g, a, x, Const(out))
assert gout is None
np.testing.assert_allclose(ga, np.sum(x * np.cos(a * x)), rtol=1e-12)
np.testing.assert_allclose(gx, a * np.cos(a * x), rtol=1e-12)
""", None),
    "gradient_taped_parallel_reduction": ("""
import math
import numba
import numpy as np
import adcore
from adcore import Const, Duplicated, Reverse
from numba import prange

@numba.njit(parallel=True)
def g(x, w):
    s = 0.0
    for i in prange(x.shape[0]):
        s += math.sin(w[0] * x[i]) * x[i]
    return s

# first call of the process: the gradient of a never-called kernel with a reduction, whose
# launchers read the thread's number; its pieces keep tapes
x, w = np.linspace(-1.0, 2.0, 50), np.array([0.7])
gx, gw = adcore.gradient(Reverse, g, x, w)
np.testing.assert_allclose(gx, np.sin(0.7 * x) + 0.7 * x * np.cos(0.7 * x), rtol=1e-12)
np.testing.assert_allclose(gw, [np.sum(x * x * np.cos(0.7 * x))], rtol=1e-12)
lines = adcore.compile_gradient(Reverse, g, Duplicated(x, np.zeros(50)), Const(w)).parallel_loops
assert lines and all("tape of its own" in line for line in lines), lines
""", None),
    "gradient_parallel_row_writes": ("""
import math
import numba
import numpy as np
import adcore
from adcore import Const, Reverse
from numba import prange

@numba.njit(parallel=True)
def g(u, v):
    m, p = u.shape
    for i in prange(m):
        for j in range(p):
            v[i, j] = math.sin(u[i, j])
    return np.sum(v * v)

# first call of the process: a loop writing v[i, j] in its row, its checks made at the call
u = np.linspace(-1.0, 2.0, 24).reshape(6, 4)
gu, _ = adcore.gradient(Reverse, g, u, Const(np.zeros((6, 4))))
np.testing.assert_allclose(gu, 2 * np.sin(u) * np.cos(u), rtol=1e-12)
""", None),
    "gradient_parallel_band_reads": ("""
import numba
import numpy as np
import adcore
from adcore import Const, Reverse
from numba import prange

@numba.njit(parallel=True)
def g(u, v):
    m, p = u.shape
    for i in prange(1, m - 1):
        for j in range(p):
            v[i, j] = u[i - 1, j] * u[i + 1, j]
    return np.sum(v)

# first call of the process: u read at the rows beside i, one shared shadow, pieces long
# enough for every other one to run at once (checked at the call)
u = np.linspace(-1.0, 2.0, 400 * 3).reshape(400, 3)
gu, _ = adcore.gradient(Reverse, g, u, Const(np.zeros((400, 3))))
expected = np.zeros_like(u)
expected[:-2] += u[2:]
expected[2:] += u[:-2]
np.testing.assert_allclose(gu, expected, rtol=1e-12)
""", None),
    "compile_gradient_native_from_python": (NJIT + """
g = adcore.compile_gradient(Reverse, f, Active(a), Duplicated(x, dx), Duplicated(out, dout))
assert g.shadowed == [1, 2]
value, da, cached = g.native(a, x, out, dx, dout)
check_closed_form(da, dx, dout, value)
assert cached >= 0
""", None),
    "compile_gradient_native_from_njit": (NJIT + """
g = adcore.compile_gradient(ReverseWithPrimal, f, Active(a), Duplicated(x, dx),
                            Duplicated(out, dout))
native = g.native

@numba.njit
def twice(a, x, out, dx, dout, s):
    total = 0.0
    for _ in range(2):
        dout[:] = s
        value, da, _ = native(a, x, out, dx, dout)
        total += da
    return value, total

value, total = twice(a, x, out, dx, dout, s)
check_closed_form(total / 2, dx / 2, dout, value)
""", None),
    "primal_ir": (NJIT + """
import llvmlite.binding as llvm
text = adcore.primal_ir(f, Active(a), Duplicated(x, dx), Duplicated(out, dout))
llvm.parse_assembly(text).verify()
assert "sin" in text and "define" in text, text
da, _, _ = adcore.autodiff(Reverse, f, Active(a), Duplicated(x, dx), Duplicated(out, dout))
check_closed_form(da, dx, dout)
""", None),
    "cache_report": (NJIT + """
report = adcore.cache_report(f, Active(a), Duplicated(x, dx), Duplicated(out, dout), lines=True)
assert str(report).startswith("cached by the reverse pass of f"), str(report)
da, _, _ = adcore.autodiff(Reverse, f, Active(a), Duplicated(x, dx), Duplicated(out, dout))
check_closed_form(da, dx, dout)
""", None),
    "adjoint_ir": (NJIT + """
import llvmlite.binding as llvm
args = (Active(a), Duplicated(x, dx), Duplicated(out, dout))
text = adcore.adjoint_ir(Reverse, f, *args)
for t in (text, adcore.adjoint_ir(Reverse, f, *args, optimised=True)):
    llvm.parse_assembly(t).verify()
assert "cos" in text, text                  # the reverse of sin
da, _, _ = adcore.autodiff(Reverse, f, *args)
check_closed_form(da, dx, dout)
""", None),
    "from_llvm_call": ("import adcore\n" + ADD_IR + POWI_IR + """
import numpy as np
f = adcore.from_llvm(ADD, "f")
assert f(1.3, -0.7) == 1.3 + -0.7
p = adcore.from_llvm(POWI, "p")
assert p(np.array([1.5]), 3) == 1.5 ** 3
""", None),
    "from_llvm_autodiff": ("import adcore\nfrom adcore import Reverse, Active\n" + ADD_IR + """
f = adcore.from_llvm(ADD, "f")
assert adcore.autodiff(Reverse, f, Active(1.3), Active(-0.7)) == (1.0, 1.0)
""", None),
    "from_llvm_gradient_powi": ("import adcore\nfrom adcore import Reverse\n" + POWI_IR + """
import numpy as np
p = adcore.from_llvm(POWI, "p")
(gx, gn), value = adcore.gradient(adcore.ReverseWithPrimal, p, np.array([1.5, 9.0]), 3)
assert gn is None and value == 1.5 ** 3
np.testing.assert_allclose(gx, [3 * 1.5 ** 2, 0.0], rtol=1e-14)
""", None),
    "custom_rule": ("""
import numba
import numpy as np
import adcore
from adcore import Reverse

@numba.njit
def weighted_square(x, a):
    return a * x[0] ** 2

@adcore.rule(weighted_square)
@numba.njit
def weighted_square_reverse(x, a, dx, dret):
    dx[0] += dret * 2.0 * a * x[0]
    return (dret * x[0] ** 2,)

@numba.njit
def k(x, a):
    return weighted_square(x, a) + a * x[1]

x = np.array([0.75, -2.0])
gx, ga = adcore.gradient(Reverse, k, x, 1.5)
np.testing.assert_allclose(gx, [2 * 1.5 * 0.75, 1.5], rtol=1e-14)
np.testing.assert_allclose(ga, 0.75 ** 2 - 2.0, rtol=1e-14)
""", None),
    "make_zero": (MODEL + """
z = adcore.make_zero(fresh_model())
assert isinstance(z, Chain)
assert np.array_equal(z.layers[0].weight, np.zeros((3, 2)))
assert np.array_equal(z.layers[0].bias, np.zeros(3))
""", None),
    "tape_gradient": ("""
import numpy as np
from adcore import tape
from fdcheck import fd_gradient
rng = np.random.default_rng(1)
w, x = rng.standard_normal((3, 2)), rng.standard_normal((4, 3))
f = lambda w, x: np.sum(np.tanh(x @ w) ** 2)
dw, dx = tape.gradient(f, w, x)
fw, fx = fd_gradient(f, [w, x], {})
np.testing.assert_allclose(dw, fw, rtol=1e-7)
np.testing.assert_allclose(dx, fx, rtol=1e-7)
""", None),
    "tape_withgradient": ("""
import numpy as np
from adcore import tape, Const
x, y = np.array([0.5, -1.0, 2.0]), np.array([1.5, 0.25, -1.0])
val, (dx, dy) = tape.withgradient(lambda x, y: np.sum(np.sin(x) * y), x, Const(y))
assert dy is None
np.testing.assert_allclose(val, np.sum(np.sin(x) * y), rtol=1e-14)
np.testing.assert_allclose(dx, np.cos(x) * y, rtol=1e-14)
""", None),
    "layers_gradient_tape": (MODEL + """
gm, gx, gy = layers.gradient(loss, fresh_model(), x, y)
check_grad(gm)
val, (gm, _, _) = layers.withgradient(loss, fresh_model(), x, y)
np.testing.assert_allclose(val, closed_form()[0], rtol=1e-14)
check_grad(gm)
""", None),
    "layers_gradient_duplicated": (MODEL + """
gm, gx, gy = layers.gradient(loss, Duplicated(fresh_model()), Const(x), Const(y))
assert gx is None and gy is None
check_grad(gm)
""", None),
    "layers_withgradient_duplicated": (MODEL + """
dup = Duplicated(fresh_model())
val, (gm, gx, gy) = layers.withgradient(lambda m, x, y: (loss(m, x, y), "aux"), dup, x, y)
assert val[1] == "aux" and gx is None
np.testing.assert_allclose(val[0], closed_form()[0], rtol=1e-12)
check_grad(gm)
assert gm["layers"][0]["weight"] is dup.dval.layers[0].weight or \\
    np.shares_memory(gm["layers"][0]["weight"], dup.dval.layers[0].weight)
""", None),
    "layers_train_tape": (MODEL + """
model = fresh_model()
state = optim.setup(optim.Descent(0.1), model)
losses = layers.train(loss, model, [(x, y), (x, y)], state)
""" + TRAIN_CHECK, None),
    "layers_train_duplicated": (MODEL + """
model = fresh_model()
dup = Duplicated(model)
state = optim.setup(optim.Descent(0.1), dup)
losses = layers.train(loss, dup, [(x, y), (x, y)], state)
""" + TRAIN_CHECK, None),
    "optim_setup_update": (MODEL + """
model = fresh_model()
state = optim.setup(optim.Adam(0.01), model)
g = {"layers": ({"weight": np.full((3, 2), 0.5), "bias": np.array([-2.0, 1e-3, 4.0])},)}
optim.update(state, model, g)
# Adam's first step moves each parameter by eta * g / (|g| + eps'), i.e. eta * sign(g)
np.testing.assert_allclose(model.layers[0].weight, W0 - 0.01, rtol=1e-6)
np.testing.assert_allclose(model.layers[0].bias, b0 - 0.01 * np.array([-1, 1, 1]), rtol=1e-4)
""", None),
    "optim_update_duplicated_fused": (MODEL + """
dup = Duplicated(fresh_model())
state = optim.setup(optim.Adam(0.01), dup)
dup.dval.layers[0].weight[...] = 0.5
dup.dval.layers[0].bias[...] = [-2.0, 1e-3, 4.0]
optim.update(state, dup)                      # one native call through optim.fused
np.testing.assert_allclose(dup.val.layers[0].weight, W0 - 0.01, rtol=1e-6)
np.testing.assert_allclose(dup.val.layers[0].bias, b0 - 0.01 * np.array([-1, 1, 1]), rtol=1e-4)
""", None),
    "last_compile_report": ("""
import adcore, numpy as np
assert adcore.last_compile_report() is None            # nothing compiled yet
f = lambda x: np.sum(x * x)
g, = adcore.gradient(adcore.Reverse, f, np.arange(3.0))
np.testing.assert_allclose(g, [0.0, 2.0, 4.0])
report = adcore.last_compile_report()
assert {"capture", "clean", "read", "analyse", "generate", "compile"} <= set(report.seconds)
assert "stub" not in report.seconds                     # Python calls the gradient's entry
native = adcore.compile_gradient(adcore.Reverse, f, adcore.Duplicated(np.arange(3.0))).native
assert set(adcore.last_compile_report().seconds) == {"stub"}     # made when first asked for
""", None),
    "activity_error": ("""
import numba
import numpy as np
import adcore
from adcore import Reverse, Active

@numba.njit
def f(x):
    return x[0]

adcore.autodiff(Reverse, f, Active(np.ones(3)))      # Active on an array
""", "ActivityError"),
    "gradient_declared_signature": ("""
import math
import numba
import numpy as np
import adcore
from adcore import Reverse

@numba.njit("f8(f8[:], f8)")
def f(x, a):
    s = 0.0
    for i in range(x.shape[0]):
        s += math.sin(a * x[i])
    return s

x = np.array([0.5, -1.25, 2.0])
gx, ga = adcore.gradient(Reverse, f, x, 0.3)     # a C array for the declared f8[:]
np.testing.assert_allclose(gx, 0.3 * np.cos(0.3 * x), rtol=1e-12)
np.testing.assert_allclose(ga, np.sum(x * np.cos(0.3 * x)), rtol=1e-12)
""", None),
    "compile_error_not_a_function": ("""
import numpy as np
import adcore
adcore.gradient(adcore.Reverse, np.sum, np.ones(3))
""", "CompileError"),
    "link_error_direct_call": ("import adcore\n" + UNDEFINED_IR + """
adcore.from_llvm(UNDEFINED, "g")(1.0)
""", "LinkError"),
    "link_error_symbol_with_rule": ("""
import numba
import numpy as np
import adcore
from adcore import Reverse, Duplicated

UNDEFINED_PTR = '''
declare void @adcore_no_such_symbol_inplace(ptr, i64)
define double @h(ptr %x, i64 %n) {
entry:
  call void @adcore_no_such_symbol_inplace(ptr %x, i64 %n)
  %v = load double, ptr %x
  ret double %v
}
'''

@adcore.rule("adcore_no_such_symbol_inplace")
@numba.njit
def reverse(x, n, dx):
    pass

h = adcore.from_llvm(UNDEFINED_PTR, "h")
adcore.autodiff(Reverse, h, Duplicated(np.ones(2), np.zeros(2)), 2)
""", "LinkError"),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Every script run once, two at a time; name -> CompletedProcess."""
    cache = tmp_path_factory.mktemp("adcore-cache")

    def run(item):
        name, (code, _) = item
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT), str(ROOT / "tests")] + [p for p in [env.get("PYTHONPATH")] if p])
        env["ADCORE_CACHE_DIR"] = str(cache / name)     # no compiled gradient from elsewhere
        return name, subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                                    capture_output=True, text=True, timeout=TIMEOUT)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(run, SCRIPTS.items()))


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_first_call_of_a_fresh_process(results, name):
    proc = results[name]
    expected_error = SCRIPTS[name][1]
    report = f"exit status {proc.returncode}\n--- stderr ---\n{proc.stderr}\n--- stdout ---\n{proc.stdout}"
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}\n{report}"
    if expected_error is None:
        assert proc.returncode == 0, report
    else:
        last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
        assert proc.returncode == 1 and last.startswith(f"adcore.errors.{expected_error}"), report
