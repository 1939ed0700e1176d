"""Forward mode (issue 16): tangents against central finite differences on the constructs
reverse mode covers, vector mode against scalar passes, jacobians of both modes, Hessian-
vector products (forward over adcore's reverse IR) and the errors."""
import math
import os

import numba
import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

import adcore
from adcore import (ActivityError, Active, BatchDuplicated, Const, Duplicated, Forward,
                    ForwardWithPrimal, Reverse, UnsupportedError)
from bench.kernels import logsumexp, stencil     # stencil: in place, every step overwrites u
from fdcheck import check_forward
from reverse.test_core_property import compile_kernel, kernels

EXAMPLES = int(os.environ.get("ADCORE_PROPERTY_EXAMPLES", 25))
F32 = dict(eps=1e-3, rtol=2e-2, atol=1e-3)


def rand(*shape, dtype=np.float64, lo=0.2, hi=0.9, seed=1):
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(dtype)


# -- kernels: the constructs of the reverse-mode tests -------------------------------------
@numba.njit
def readme(a, x, out):
    for i in range(x.shape[0]):
        out[i] = math.sin(a * x[i])
    return out.sum()


@numba.njit
def branchy(x, a):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > 0.5:
            s += math.exp(a * x[i])
        elif x[i] > 0.3:
            s += math.sqrt(x[i]) * a
        else:
            s -= math.log(x[i]) / a
    return s


@numba.njit
def until(x, a):                       # a data-dependent trip count and an early exit
    s, i = 0.0, 0
    while s < 2.0 and i < x.shape[0]:
        s += a * x[i] * x[i]
        i += 1
    if s > 10.0:
        return s
    return s * math.tanh(s)


@numba.njit
def allocating(a, b):
    t = np.tanh(a * b + 0.5)
    u = np.empty_like(t)
    for i in range(t.shape[0]):
        u[i] = t[i] ** 3 / (1.0 + b[i])
    return np.sum(t * u)


@numba.njit
def products(A, B, x, out):            # BLAS: gemm, gemv, dot, nrm2
    C = A @ B
    y = C @ x
    out[:] = y
    return np.dot(y, out) + np.linalg.norm(C[0]) + np.sum(C * C)


@numba.njit
def mixed32(x, a):                     # float32 arrays, float64 scalar
    s = np.float32(0.0)
    for i in range(x.shape[0]):
        x[i] = x[i] * np.float32(a) + np.float32(math.cos(x[i]))
        s += x[i] * x[i]
    return s


@numba.njit
def minmax_pow(x, y):
    s = 0.0
    for i in range(x.shape[0]):
        s += max(x[i], y[i]) ** 2.5 + min(x[i], 0.6) * abs(y[i] - 0.5) + math.atan2(x[i], y[i])
    return s


@numba.njit
def no_return(x, out):
    for i in range(x.shape[0]):
        out[i] = math.hypot(x[i], 1.0) * math.expm1(x[i])


CASES = [
    ("readme", readme, lambda: (0.3, rand(5), np.zeros(5)), {}),
    ("branches", branchy, lambda: (rand(9, lo=0.1, hi=0.95), 0.7), {}),
    ("while-early-return", until, lambda: (rand(8), 1.3), {}),
    ("while-long", until, lambda: (rand(8, lo=2, hi=3), 1.3), {}),
    ("in-place-stencil", stencil, lambda: (rand(9), 4), {}),
    ("allocation", allocating, lambda: (rand(6), rand(6, seed=2)), {}),
    ("blas", products, lambda: (rand(3, 4), rand(4, 5, seed=2), rand(5, seed=3), np.zeros(3)),
     dict(rtol=1e-6)),
    ("float32", mixed32, lambda: (rand(6, dtype=np.float32), 0.8), F32),
    ("min-max-pow-atan2", minmax_pow, lambda: (rand(7), rand(7, seed=2)), {}),
    ("no-return", no_return, lambda: (rand(5, lo=-1, hi=1), np.zeros(5)), {}),
    ("logsumexp", logsumexp, lambda: (rand(7, lo=-2, hi=2),), {}),
]


@pytest.mark.parametrize("f,args,opts", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_tangents_match_finite_differences(f, args, opts):
    check_forward(f, *args(), **opts)


VECTOR_CASES = [CASES[0], CASES[4], CASES[5]]


@pytest.mark.parametrize("f,args,opts", [c[1:] for c in VECTOR_CASES], ids=[c[0] for c in VECTOR_CASES])
def test_vector_mode_matches_finite_differences(f, args, opts):
    check_forward(f, *args(), lanes=3, **opts)


def test_readme_closed_form_and_primal():
    a, x = 0.3, rand(5)
    dx, out, dout = rand(5, seed=4), np.zeros(5), np.zeros(5)
    dy, y = adcore.autodiff(ForwardWithPrimal, readme, Duplicated(a, 1.0), Duplicated(x, dx),
                            Duplicated(out, dout))
    expected = np.cos(a * x) * (x + a * dx)
    np.testing.assert_allclose(dout, expected, rtol=1e-14)
    np.testing.assert_allclose(dy, expected.sum(), rtol=1e-14)
    np.testing.assert_allclose(y, np.sin(a * x).sum(), rtol=1e-14)
    np.testing.assert_allclose(out, np.sin(a * x), rtol=1e-15)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(st.floats(-2, 2), min_size=4, max_size=4), st.sampled_from([2, 3]), st.integers(0, 10**6))
def test_vector_mode_equals_scalar_passes(xs, k, seed):
    x = np.array(xs)
    rng = np.random.default_rng(seed)
    vs = tuple(rng.standard_normal(4) for _ in range(k))
    batch = adcore.autodiff(Forward, logsumexp, BatchDuplicated(x, vs))
    assert isinstance(batch, tuple) and len(batch) == k
    for v, dy in zip(vs, batch):
        assert dy == pytest.approx(adcore.autodiff(Forward, logsumexp, Duplicated(x, v)), rel=1e-12, abs=1e-14)


@settings(max_examples=max(5, EXAMPLES // 2), deadline=None)
@given(st.lists(st.floats(0.05, 1.0), min_size=9, max_size=9), st.integers(0, 10**6))
def test_branch_tangents_over_inputs(xs, seed):
    rng = np.random.default_rng(seed)
    x = np.array(xs)
    if np.min(np.abs(x - 0.5)) < 1e-3 or np.min(np.abs(x - 0.3)) < 1e-3:
        return                                      # a branch boundary: no derivative
    v, a, da = rng.standard_normal(9), 0.7, float(rng.standard_normal())
    dy = adcore.autodiff(Forward, branchy, Duplicated(x, v), Duplicated(a, da))
    eps = 1e-6
    fd = (branchy(x + eps * v, a + eps * da) - branchy(x - eps * v, a - eps * da)) / (2 * eps)
    assert dy == pytest.approx(fd, rel=1e-5, abs=1e-6)


def test_sqrt_at_zero_has_zero_tangent_not_nan():
    @numba.njit
    def root(x):
        return math.sqrt(x[0]) + x[1]
    dy = adcore.autodiff(Forward, root, Duplicated(np.array([0.0, 1.0]), np.array([0.0, 1.0])))
    assert dy == 1.0


# -- jacobians -----------------------------------------------------------------------------
@numba.njit
def softmax(x, w):
    out = np.empty(x.shape[0])
    total = 0.0
    for i in range(x.shape[0]):
        out[i] = math.exp(w * x[i])
        total += out[i]
    for i in range(x.shape[0]):
        out[i] /= total
    return out


def test_jacobian_forward_equals_reverse_and_closed_form():
    x, w = rand(10, lo=-1, hi=1), 1.5              # 10 inputs: two batches of 8 directions
    s = softmax(x, w)
    J = adcore.jacobian(Forward, softmax, x, w)
    assert J.shape == (10, 10)
    np.testing.assert_allclose(J, w * (np.diag(s) - np.outer(s, s)), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(adcore.jacobian(Reverse, softmax, x, w), J, rtol=1e-12, atol=1e-15)


# -- Hessian-vector products: forward over reverse -----------------------------------------
@numba.njit
def quartic(x, c):
    s = 0.0
    for i in range(x.shape[0]):
        s += c * x[i] ** 4 + math.sin(x[i]) * x[(i + 1) % x.shape[0]]
    return s


def quartic_hessian(x, c):
    n = x.shape[0]
    H = np.zeros((n, n))
    for i in range(n):
        j = (i + 1) % n
        H[i, i] += 12 * c * x[i] ** 2 - math.sin(x[i]) * x[j]
        H[i, j] += math.cos(x[i])
        H[j, i] += math.cos(x[i])
    return H


def grad_of(f, x, *const):
    return adcore.gradient(Reverse, f, x, *[Const(c) for c in const])[0]


@numba.njit
def tanh_layer(x, A):                  # BLAS gemv: the gradient calls its reverse
    return np.sum(np.tanh(A @ x))


@numba.njit
def matrix_input(X, c):                # gemv with the matrix differentiated
    return np.sum(np.sin(X @ c)) + 0.3 * np.sum(X * X)


@numba.njit
def gram(x, B):                        # gemm: both operands from x, and a product with a constant
    X = x.reshape((3, 4))
    return np.sum((X @ X.T) ** 2) + np.sum(np.sin(X @ B))


@numba.njit
def dots_and_norm(x, c):               # BLAS dot (an operand twice) and nrm2
    return 0.1 * np.dot(x, x) + np.sin(np.dot(x, c)) + np.linalg.norm(x) ** 3


HVP_CASES = [
    ("quartic", quartic, lambda: (rand(6, lo=-1, hi=1), 0.7)),
    ("logsumexp", logsumexp, lambda: (rand(7, lo=-2, hi=2),)),
    ("stencil", stencil, lambda: (rand(8), 3)),
    ("allocation", lambda a, b: allocating(a, b), lambda: (rand(6), rand(6, seed=2))),
    ("branches", branchy, lambda: (rand(9, lo=0.1, hi=0.95), 0.7)),
    ("gemv", tanh_layer, lambda: (rand(3, lo=-1, hi=1), rand(4, 3, lo=-1, hi=1))),
    ("gemv-matrix", matrix_input, lambda: (rand(2, 4, lo=-1, hi=1), rand(4, seed=2))),
    ("gemm", gram, lambda: (rand(12, lo=-1, hi=1), rand(4, 5, seed=2))),
    ("dot-nrm2", dots_and_norm, lambda: (rand(5, lo=-1, hi=1), rand(5, seed=2))),
]


@pytest.mark.parametrize("f,args", [c[1:] for c in HVP_CASES], ids=[c[0] for c in HVP_CASES])
def test_hvp_matches_finite_differences_of_the_gradient(f, args):
    x, *const = args()
    v = np.random.default_rng(3).standard_normal(x.shape)
    Hv = adcore.hvp(f, x, v, *const)
    eps = 1e-6
    fd = (grad_of(f, x + eps * v, *const) - grad_of(f, x - eps * v, *const)) / (2 * eps)
    np.testing.assert_allclose(Hv, fd, rtol=1e-5, atol=1e-6)


def test_hvp_and_hessian_closed_form():
    x, c = rand(6, lo=-1, hi=1), 0.7
    v = np.random.default_rng(5).standard_normal(6)
    H = adcore.hessian(quartic, x, c)
    np.testing.assert_allclose(H, quartic_hessian(x, c), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(adcore.hvp(quartic, x, v, c), H @ v, rtol=1e-12, atol=1e-14)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(st.floats(-3, 3), min_size=6, max_size=6), st.lists(st.floats(-1, 1), min_size=6, max_size=6))
@example([0.0] * 6, [0.0] * 5 + [1.0])      # adjoints exactly 0: the reverse rules' zero guards
def test_hvp_over_inputs_and_directions(xs, vs):
    x, v = np.array(xs), np.array(vs)
    np.testing.assert_allclose(adcore.hvp(quartic, x, v, 0.7), quartic_hessian(x, 0.7) @ v,
                               rtol=1e-10, atol=1e-10)


def test_hessian_of_many_inputs_is_symmetric_and_matches_hvp():
    x = rand(10, lo=-2, hi=2)
    H = adcore.hessian(logsumexp, x)
    p = np.exp(x - x.max())
    p /= p.sum()
    np.testing.assert_allclose(H, np.diag(p) - np.outer(p, p), rtol=1e-10, atol=1e-14)


# -- errors --------------------------------------------------------------------------------
def test_active_in_forward_mode_is_refused():
    with pytest.raises(ActivityError, match="argument 0: Active is reverse mode"):
        adcore.autodiff(Forward, readme, Active(0.3), rand(5), np.zeros(5))


@pytest.mark.parametrize("tangent,match", [
    (np.zeros(4), r"tangent is float64\[4\] but its primal is float64\[5\]"),
    (np.zeros(5, np.float32), "tangent is float32"),
    ("x", "tangent is str"),
])
def test_tangent_of_the_wrong_shape_or_dtype(tangent, match):
    with pytest.raises(ActivityError, match=match):
        adcore.autodiff(Forward, readme, 0.3, Duplicated(rand(5), tangent), np.zeros(5))


def test_repeated_calls_are_checked_natively_as_the_first():
    """Calls after the first of a kind check their arguments in native code: the same
    tangents, and what the Python checks refuse or copy is still refused or copied."""
    x, t, eps = rand(5), rand(5, seed=3), 1e-6
    fd = (readme(0.3, x + eps * t, np.zeros(5)) - readme(0.3, x - eps * t, np.zeros(5))) / (2 * eps)
    calls = [adcore.autodiff(Forward, readme, 0.3, Duplicated(x, t), np.zeros(5)) for _ in range(3)]
    np.testing.assert_allclose(calls, fd, rtol=1e-6)
    assert calls[1] == calls[2] == calls[0]
    wide = np.zeros(10)
    wide[::2] = t                      # laid out unlike x: copied, as in the first call
    assert adcore.autodiff(Forward, readme, 0.3, Duplicated(x, wide[::2]), np.zeros(5)) == calls[0]
    out = np.zeros(10)[::-2]           # its internal shadow laid out as it: backwards
    assert adcore.autodiff(Forward, readme, 0.3, Duplicated(x, t), out) == pytest.approx(calls[0], rel=1e-12)
    for tangent, match in [(x, "shares memory with its own array"), (np.zeros(4), r"float64\[4\]"),
                           (np.zeros(5, np.float32), "tangent is float32"), (t[::-1].copy(), None)]:
        tangent.flags.writeable = match is not None
        with pytest.raises(ActivityError, match=match or "read-only"):
            adcore.autodiff(Forward, readme, 0.3, Duplicated(x, tangent), np.zeros(5))
    with pytest.raises(ActivityError, match="the tangent of a float is a float"):
        adcore.autodiff(Forward, readme, Duplicated(0.3, True), Duplicated(x, t), np.zeros(5))


def test_batches_of_different_widths_and_shared_tangents():
    x = rand(5)
    with pytest.raises(ActivityError, match="different numbers of tangents"):
        adcore.autodiff(Forward, readme, BatchDuplicated(0.3, (1.0, 0.0)),
                        BatchDuplicated(x, (x * 0, x * 0, x * 0)), np.zeros(5))
    t = np.zeros(5)
    with pytest.raises(ActivityError, match="tangents of two directions share memory"):
        adcore.autodiff(Forward, readme, 0.3, BatchDuplicated(x, (t, t)), np.zeros(5))
    with pytest.raises(ActivityError, match="not available here"):
        adcore.gradient(Forward, logsumexp, x)


def test_custom_rule_without_forward_is_refused():
    @numba.njit
    def inner(v):
        return v[0] * 2.0

    @adcore.rule(inner)
    @numba.njit
    def inner_reverse(v, dv, dret):
        dv[0] += 2.0 * dret

    @numba.njit
    def outer(v):
        return inner(v) + 1.0

    with pytest.raises(UnsupportedError, match="has no forward rule"):
        adcore.autodiff(Forward, outer, Duplicated(rand(2), np.ones(2)))


@numba.njit
def scaled(v, a):
    return v[0] * a + v[1]


@numba.njit
def scaled_reverse(v, a, dv, dret):
    dv[0] += a * dret
    dv[1] += dret
    return (v[0] * dret,)


@numba.njit
def scaled_forward(v, a, dv, da):
    return dv[0] * a + v[0] * da + dv[1]


adcore.register_rule(scaled, scaled_reverse, forward=scaled_forward)


@numba.njit
def through_rule(v, a):
    return math.sin(scaled(v, a))


def test_custom_rule_with_forward():
    check_forward(through_rule, rand(2), 0.4)


def test_hvp_through_blas_reverses_closed_form():
    x, A, v = rand(3, lo=-1, hi=1), rand(4, 3, lo=-1, hi=1), rand(3, seed=4)
    t = np.tanh(A @ x)
    H = A.T @ np.diag(-2 * t * (1 - t * t)) @ A          # sum(tanh(A x))
    np.testing.assert_allclose(adcore.hvp(tanh_layer, x, v, A), H @ v, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(adcore.hessian(tanh_layer, x, A), H, rtol=1e-12, atol=1e-14)


@numba.njit
def tanh_layer_and_dot(x, A):          # float32: BLAS's 's' routines
    return np.sum(np.tanh(A @ x)) + np.float32(0.1) * np.dot(x, x)


def test_hvp_through_float32_blas_closed_form():
    x, A, v = rand(3, dtype=np.float32), rand(4, 3, dtype=np.float32, seed=2), rand(3, dtype=np.float32, seed=3)
    x64, A64 = x.astype(np.float64), A.astype(np.float64)
    t = np.tanh(A64 @ x64)
    H = A64.T @ np.diag(-2 * t * (1 - t * t)) @ A64 + 0.2 * np.eye(3)
    Hv = adcore.hvp(tanh_layer_and_dot, x, v, A)
    assert Hv.dtype == np.float32
    np.testing.assert_allclose(Hv, H @ v.astype(np.float64), rtol=1e-5, atol=1e-6)


@numba.njit
def cubes(x):
    return np.sum(x ** 3)


@numba.njit
def cubes_forward(x, tx):
    return np.sum(3.0 * x ** 2 * tx)


@adcore.rule(cubes, forward=cubes_forward)
@numba.njit
def cubes_reverse(x, dx, dret):
    for i in range(x.shape[0]):
        dx[i] += 3.0 * x[i] ** 2 * dret


@numba.njit
def sin_of_cubes(x):
    return np.sin(cubes(x))


def test_hvp_differentiates_an_njit_rules_reverse():
    x, v = rand(4), rand(4, seed=6)
    s = np.sum(x ** 3)
    H = -np.sin(s) * np.outer(3 * x ** 2, 3 * x ** 2) + np.cos(s) * np.diag(6 * x)
    np.testing.assert_allclose(adcore.hvp(sin_of_cubes, x, v), H @ v, rtol=1e-12, atol=1e-14)


# -- foreign IR: C compiled by clang (tests/ll/kernels.c), vectorised at -O2 ----------------
FOREIGN = [("sinsum", "-O2", lambda: (rand(5), np.zeros(5), 5, 0.7), {}),
           ("vla_logsumexp", "-O0", lambda: (rand(6, lo=-2, hi=2), 6), {}),
           ("scatter_axpy", "-O2", lambda: (0.7, rand(5, dtype=np.float32), np.array([0, 2, 2, 1, 0], np.int32),
                                             rand(3, dtype=np.float32), 5), F32)]


@pytest.mark.parametrize("name,opt,args,opts", FOREIGN, ids=[c[0] for c in FOREIGN])
def test_foreign_c_kernels(name, opt, args, opts):
    from test_foreign import clang_ir
    check_forward(adcore.from_llvm(clang_ir(opt), name), *args(), **opts)


@pytest.mark.parametrize("file,name,args", [("vector.ll", "vscale", lambda: (rand(2), 0.7)),
                                            ("stack.ll", "stackbuf", lambda: (np.array([1.5]), 1, 1)),
                                            ("math.ll", "mathfns", lambda: (rand(39), rand(39, seed=2), np.zeros(39))),
                                            ("control.ll", "piecewise", lambda: (0.8, 1))])
def test_foreign_ll_files(file, name, args):
    """Vector IR, a stack buffer, every math function, and a primal whose first block is
    named ``entry`` (the tangent function's own entry block takes another name)."""
    from test_foreign import fn
    check_forward(fn(file, name), *args())



@numba.njit
def shift_add(a, b):                   # a and b may be views of one array
    for i in range(b.shape[0]):
        b[i] += math.sin(a[i])


def test_aliased_arguments_need_mirrored_tangents():
    z, t = rand(6), rand(6, seed=7)
    eps = 1e-6
    plus, minus = z + eps * t, z - eps * t
    shift_add(plus[:-1], plus[1:])     # each step reads the element the previous one wrote
    shift_add(minus[:-1], minus[1:])
    dz = t.copy()
    adcore.autodiff(Forward, shift_add, Duplicated(z[:-1], dz[:-1]), Duplicated(z[1:], dz[1:]))
    np.testing.assert_allclose(dz, (plus - minus) / (2 * eps), rtol=1e-6, atol=1e-8)
    with pytest.raises(ActivityError, match="share memory"):        # tangents not mirrored
        adcore.autodiff(Forward, shift_add, BatchDuplicated(z[:-1], (np.zeros(5), np.zeros(5))),
                        BatchDuplicated(z[1:], (np.zeros(5), np.zeros(5))))


def test_argument_errors_of_jacobian_hvp_and_forward_autodiff():
    with pytest.raises(ActivityError, match="x must be a float32 or float64 array"):
        adcore.jacobian(Forward, softmax, [1.0, 2.0], 1.0)
    with pytest.raises(ActivityError, match="first argument must be a mode"):
        adcore.jacobian("Forward", softmax, rand(3), 1.0)
    with pytest.raises(ActivityError, match="v must be an array of x's shape"):
        adcore.hvp(logsumexp, rand(3), np.ones(4))
    with pytest.raises(ActivityError, match="dret seeds reverse mode"):
        adcore.autodiff(Forward, logsumexp, Duplicated(rand(3), np.ones(3)), dret=np.ones(3))
    with pytest.raises(ActivityError, match="is reverse mode"):
        adcore.autodiff(Forward, logsumexp, Active, Duplicated(rand(3), np.ones(3)))


@numba.njit
def allocates_in_a_loop(x):
    s = 0.0
    for k in range(3):
        t = np.tanh(x * (k + 1.0))
        s += np.sum(t * t)
    return s


def test_hvp_of_an_allocation_in_a_loop_closed_form():
    # the gradient keeps the loop's array pointers on its value stack; their shadows follow
    x, v = rand(4, lo=-1, hi=1), rand(4, seed=5)
    diagonal = 0.0
    for a in (1.0, 2.0, 3.0):
        t = np.tanh(a * x)
        diagonal = diagonal + 2 * a * a * (1 - t * t) * (1 - 3 * t * t)
    np.testing.assert_allclose(adcore.hvp(allocates_in_a_loop, x, v), diagonal * v, rtol=1e-12, atol=1e-14)


# -- generated programs: test_core_property's random kernels in forward mode ------------------
@settings(max_examples=max(3, EXAMPLES // 8), deadline=None)
@given(source=kernels(), seed=st.integers(0, 2 ** 16))
def test_random_kernels_in_forward_mode(source, seed):
    rng = np.random.default_rng(seed)
    x, y, a = rng.uniform(-1, 1, 4), rng.uniform(-1, 1, 4), float(rng.uniform(-1, 1))
    try:
        check_forward(compile_kernel(source), x, y, a, np.zeros(4), rtol=1e-4, atol=1e-6, seed=seed)
    except AssertionError:
        print(source)
        raise
