"""Random shapes, axes, keepdims and subscripts for the functions of issue 17, checked against
numpy's values and central finite differences (``ADCORE_PROPERTY_EXAMPLES`` raises the budget)."""
import os

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from test_tape_coverage import check

EXAMPLES = int(os.environ.get("ADCORE_PROPERTY_EXAMPLES", 25))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def arrays(draw, min_dims=0, max_dims=3, complex_ok=False):
    shape = tuple(draw(st.lists(st.integers(1, 3), min_size=min_dims, max_size=max_dims)))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    x = rng.uniform(0.3, 1.5, shape) * rng.choice([-1.0, 1.0], shape)
    if complex_ok and draw(st.booleans()):
        x = x + 1j * rng.uniform(-1.0, 1.0, shape)
    return x


def axis_of(draw, x, allow_none=True):
    nd = np.ndim(x)
    choices = ([None] if allow_none else []) + list(range(-nd, nd))
    return draw(st.sampled_from(choices)) if choices else None


REDUCTIONS = {
    "sum": lambda x, ax, kd: np.sum(x, axis=ax, keepdims=kd),
    "prod": lambda x, ax, kd: np.prod(x, axis=ax, keepdims=kd),
    "mean": lambda x, ax, kd: np.mean(x, axis=ax, keepdims=kd),
    "var": lambda x, ax, kd: np.var(x, axis=ax, keepdims=kd),
    "std": lambda x, ax, kd: np.std(x, axis=ax, keepdims=kd),
    "nansum": lambda x, ax, kd: np.nansum(x, axis=ax, keepdims=kd),
    "norm": lambda x, ax, kd: np.linalg.norm(x, axis=ax, keepdims=kd),
    "norm1": lambda x, ax, kd: np.linalg.norm(x, 1, axis=ax if ax is not None else -1, keepdims=kd),
    "norm3": lambda x, ax, kd: np.linalg.norm(x, 3, axis=ax if ax is not None else -1, keepdims=kd),
    "norm_inf": lambda x, ax, kd: np.linalg.norm(x, np.inf, axis=ax if ax is not None else -1, keepdims=kd),
}


@SETTINGS
@given(st.data())
def test_reductions_with_random_axes_and_keepdims(data):
    name = data.draw(st.sampled_from(sorted(REDUCTIONS)))
    x = data.draw(arrays(min_dims=1, complex_ok=name in ("sum", "prod", "mean", "var", "std", "norm")))
    ax, kd = axis_of(data.draw, x), data.draw(st.booleans())
    check(lambda a: REDUCTIONS[name](a, ax, kd), x, rtol=1e-4, atol=1e-6)


ALONG_AXIS = {
    "cumsum": lambda x, ax: np.cumsum(x, axis=ax),
    "cumprod": lambda x, ax: np.cumprod(x, axis=ax),
    "sort": lambda x, ax: np.sort(x, axis=ax),
    "flip": lambda x, ax: np.flip(x, axis=ax),
    "roll": lambda x, ax: np.roll(x, 2, axis=ax),
    "repeat": lambda x, ax: np.repeat(x, 2, axis=ax),
    "diff": lambda x, ax: np.diff(x, axis=-1 if ax is None else ax, prepend=0.5),
    "split": lambda x, ax: np.array_split(x, 2, axis=0 if ax is None else ax)[0],
    "concat": lambda x, ax: np.concatenate([x, 2 * x], axis=ax),
    "stack": lambda x, ax: np.stack([x, x * x], axis=0 if ax is None else ax),
    "gradient": lambda x, ax: np.gradient(x, 0.5, axis=ax) if x.shape[ax or 0] > 1 else x,
    "pad": lambda x, ax: np.pad(x, 1, mode="reflect" if min(np.shape(x)) > 1 else "edge"),
    "tile": lambda x, ax: np.tile(x, (2,) * (1 + (ax or 0) % 2)),
}


@SETTINGS
@given(st.data())
def test_axis_functions_with_random_shapes(data):
    name = data.draw(st.sampled_from(sorted(ALONG_AXIS)))
    x = data.draw(arrays(min_dims=1))
    ax = axis_of(data.draw, x, allow_none=name not in ("gradient",))
    if name == "sort":  # distinct values: no ties
        x = x + np.arange(x.size).reshape(x.shape) * 0.01
    check(lambda a: ALONG_AXIS[name](a, ax), x, rtol=1e-4, atol=1e-6)


@st.composite
def einsum_problems(draw):
    """Random operands with random (possibly repeated, summed, broadcast) subscripts."""
    letters = "abcd"
    size = {c: draw(st.integers(1, 3)) for c in letters}
    n_ops = draw(st.integers(1, 3))
    subs = [draw(st.lists(st.sampled_from(letters), min_size=0, max_size=3)) for _ in range(n_ops)]
    used = sorted(set(c for s in subs for c in s))
    out = draw(st.permutations(used)) [:draw(st.integers(0, len(used)))]
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    ops = [rng.standard_normal([size[c] for c in s]) for s in subs]
    explicit = draw(st.booleans())
    spec = ",".join("".join(s) for s in subs) + ("->" + "".join(out) if explicit else "")
    return spec, ops


@SETTINGS
@given(einsum_problems())
def test_einsum_random_subscripts(problem):
    spec, ops = problem
    check(lambda *xs: np.einsum(spec, *xs), *ops, rtol=1e-4, atol=1e-6)


@SETTINGS
@given(st.data())
def test_linalg_random_batches(data):
    n = data.draw(st.integers(1, 3))
    batch = tuple(data.draw(st.lists(st.integers(1, 2), max_size=2)))
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    a = rng.standard_normal(batch + (n, n)) + 2 * n * np.eye(n)
    b = rng.standard_normal(batch + (n, data.draw(st.integers(1, 2))))
    name = data.draw(st.sampled_from(["inv", "solve", "det", "slogdet", "pinv", "matrix_norm"]))
    order = data.draw(st.sampled_from([None, "nuc", 1, -1, np.inf]))
    f = {"inv": np.linalg.inv, "solve": lambda a: np.linalg.solve(a, b), "det": np.linalg.det,
         "slogdet": lambda a: np.linalg.slogdet(a)[1], "pinv": np.linalg.pinv,
         "matrix_norm": lambda a: np.linalg.norm(a, order, axis=(-2, -1))}[name]
    check(f, a, rtol=1e-4, atol=1e-6)
