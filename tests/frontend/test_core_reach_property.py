"""Generated kernels over what outside code mixes in its loops (calls of njit functions,
prints, slices and slice assignments, BLAS products, branches, allocations): adcore either
differentiates a kernel, and then its gradient agrees with central differences, or refuses
it with an ``ADError``. Any other exception escaping adcore is a defect."""
import math  # noqa: F401  (the generated kernels use it)

import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import adcore
from fdcheck import check


@numba.njit
def weighted(a, b):
    return np.sum(a * b)


@numba.njit
def product(A, v):
    return A @ v


@numba.njit
def report(t, value):
    if t < 0:                     # never true: the call, not the output, is what is tried
        print("step", t, value)


@numba.njit
def rows_of(H, t):
    return H[t, 1:] - H[t, :-1]


@numba.njit
def listed(H, t):
    parts = [H[t], H[t] * 2.0]          # a list of arrays: refused, with this line
    return parts[0] + parts[1]


# one step of the time loop each; ``t`` the step, ``s`` the running sum
ATOMS = {
    "tanh_product": "H[t + 1, :] = np.tanh(A @ H[t])",
    "affine_slice": "H[t + 1, :] = 0.5 * H[t] + x",
    "callee_sum": "s += weighted(H[t + 1], x)",
    "shifted_slices": "s += np.sum(H[t + 1, 1:] * x[:-1])",
    "callee_product": "out[:] = product(A, H[t + 1])",
    "accumulate_out": "out += np.sin(x) * H[t + 1]",
    "branch": "if H[t + 1, 0] > 0.0:\n            s += x[0] * x[1]\n        else:\n            s -= x[1]",
    "print_callee": "report(t, s)",
    "print_in_kernel": "if t < 0:\n            print(t)",
    "strided_copy": "tmp = x.copy()\n        tmp[::2] = 0.0\n        s += np.sum(tmp * H[t + 1])",
    "dot_rows": "s += np.dot(H[t + 1], A[:, 0])",
    "callee_rows": "s += np.sum(rows_of(H, t + 1) ** 2)",
    "inner_loop": "for j in range(x.shape[0]):\n            H[t + 1, j] = H[t + 1, j] * 0.9 + x[j] * A[j, j]",
}

LIST_LINE = next(k for k, line in enumerate(open(__file__), 1) if "parts = [H[t]" in line)
# constructs adcore refuses, and what the refusal must say
REFUSED = {
    "list_in_callee": ("s += np.sum(listed(H, t + 1))",
                       ["a list", f"line {LIST_LINE}"]),
    "list_in_kernel": ("parts = [x, x * 2.0]\n        s += np.sum(parts[1])", ["a list", "line 5"]),
}
STEPS = {**ATOMS, **{name: text for name, (text, _) in REFUSED.items()}}
_compiled = {}


def kernel(atoms, steps):
    """The njit kernel running ``atoms`` in each of ``steps`` steps (compiled once per
    combination)."""
    key = (tuple(atoms), steps)
    if key not in _compiled:
        body = "\n        ".join(STEPS[a] for a in atoms)
        source = (f"def k(x, A, H, out):\n"
                  f"    s = 0.0\n"
                  f"    H[0, :] = x\n"
                  f"    for t in range({steps}):\n"
                  f"        {body}\n"
                  f"    return s + np.sum(H[{steps}] ** 2) + np.sum(out * x)\n")
        scope = dict(globals())
        exec(source, scope)
        _compiled[key] = numba.njit(scope["k"])
    return _compiled[key]


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(atoms=st.lists(st.sampled_from(sorted(STEPS)), min_size=1, max_size=4),
       steps=st.integers(1, 3), n=st.integers(3, 5), seed=st.integers(0, 2 ** 16))
def test_every_generated_kernel_differentiates_or_is_refused_with_an_aderror(atoms, steps, n, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * 0.5
    A = rng.standard_normal((n, n)) * 0.3
    H = rng.standard_normal((steps + 1, n))      # rows a step does not write stay as given
    out = np.zeros(n)
    f = kernel(atoms, steps)
    try:
        check(f, x, A, H, out, rtol=1e-5, atol=1e-6)
    except adcore.ADError:
        pass                       # a refusal in adcore's words is an allowed answer


@pytest.mark.parametrize("atom", sorted(ATOMS))
def test_each_construct_alone_differentiates(atom):
    """Each construct by itself is differentiated (not refused) and agrees with central
    differences."""
    rng = np.random.default_rng(1)
    x, A = rng.standard_normal(4) * 0.5, rng.standard_normal((4, 4)) * 0.3
    check(kernel([atom], 2), x, A, rng.standard_normal((3, 4)), np.zeros(4), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_refused_construct_is_named_with_its_line(name):
    """The refusal names the construct and its line in the user's words, not an LLVM value."""
    rng = np.random.default_rng(2)
    x, A = rng.standard_normal(4), rng.standard_normal((4, 4))
    with pytest.raises(adcore.ADError) as info:
        adcore.gradient(adcore.Reverse, kernel([name], 2), x, A, adcore.Const(np.ones((3, 4))),
                        adcore.Const(np.zeros(4)))
    message = str(info.value)
    assert all(part in message for part in REFUSED[name][1]) and "%" not in message, message
