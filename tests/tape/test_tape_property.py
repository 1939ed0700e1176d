"""Random expression graphs over the tape's ops, with random shapes and broadcasting,
checked against central finite differences."""
import numpy as np
from hypothesis import given, settings, strategies as st

from adcore import tape
from test_tape_rules import numeric_grad

# unary ops (smooth, or with kinks that random inputs do not hit); all keep the shape
UNARY = {
    "tanh": np.tanh,
    "sin": np.sin,
    "cos": np.cos,
    "square": np.square,
    "neg": lambda a: -a,
    "abs": np.abs,
    "arctan": np.arctan,
    "exp_tanh": lambda a: np.exp(np.tanh(a)),
    "log1p_square": lambda a: np.log1p(a * a),
    "sqrt": lambda a: np.sqrt(1.0 + a ** 2),
    "sigmoid": tape.sigmoid,
    "softplus": tape.softplus,
    "scale": lambda a: 0.5 * a - 1.5,
    "rdiv": lambda a: 1.0 / (2.0 + np.cos(a)),
    "flip": lambda a: a[..., ::-1] if np.ndim(a) else a,
    "softmax": lambda a: tape.softmax(a) if np.ndim(a) else a,
    "logsoftmax": lambda a: tape.logsoftmax(a) if np.ndim(a) else a,
    # shape ops, arranged to give back the operand's shape
    "reverse_flat": lambda a: a.reshape(-1)[::-1].reshape(np.shape(a)),
    "transpose_twice": lambda a: np.transpose(np.tanh(a.T) * 1.5),
    "expand_squeeze": lambda a: np.squeeze(np.expand_dims(a, 0) * 2.0, axis=0),
    "gather": lambda a: a[..., _repeats(a)] if np.ndim(a) else a,
    "take": lambda a: np.take(a, _repeats(a), axis=-1) if np.ndim(a) else a,
    # coverage of issue 17: more elementwise functions, running sums, reordering
    "arcsinh": np.arcsinh,
    "arctan_of_tanh": lambda a: np.arcsin(np.tanh(a) * 0.9) + np.arccos(np.tanh(a) * 0.8),
    "sinc": np.sinc,
    "cumsum_last": lambda a: np.cumsum(a, axis=-1) if np.ndim(a) else a,
    "cumprod_last": lambda a: np.cumprod(np.tanh(a), axis=-1) if np.ndim(a) else a,
    "sort_last": lambda a: np.sort(a, axis=-1) if np.ndim(a) else a,
    "roll_flip": lambda a: np.roll(np.flip(a), 1) if np.ndim(a) else a,
    "complex_roundtrip": lambda a: np.abs(np.exp(1j * a) * (a + 2j)),
    "array_of_slices": lambda a: np.moveaxis(np.array([a[..., i] for i in range(np.shape(a)[-1])]), 0, -1)
    if np.ndim(a) else a,
}


def _repeats(a):
    """Indices along the last axis with repeats, as many as the axis is long."""
    n = np.shape(a)[-1]
    return np.array([(i * i + 1) % n for i in range(n)])


def _common(a, b):
    """a and b broadcast to their common shape."""
    shape = np.broadcast_shapes(np.shape(a), np.shape(b))
    return np.broadcast_to(a, shape), np.broadcast_to(b, shape)


def _concat(a, b):
    if not np.ndim(a) and not np.ndim(b):
        return a * b
    a, b = _common(a, b)
    n = np.shape(a)[-1]
    c = np.concatenate([a, b], axis=-1)
    return c[..., :n] * np.sin(c[..., n:])


def _stack(a, b):
    a, b = _common(a, b)
    s = np.stack([a, b, a * b])
    return np.max(s, axis=0) + s[1]


def _matmul(a, b):
    a, b = _common(a, b)
    if np.ndim(a) == 0:
        return a * b
    if np.ndim(a) == 1:
        return (a @ b) * a
    return (a @ np.swapaxes(b, -1, -2)) @ b / np.shape(a)[-1]



# binary ops with numpy broadcasting
BINARY = {
    "add": np.add,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / (1.0 + b * b),
    "pow": lambda a, b: (1.0 + a * a) ** np.tanh(b),
    "maximum": np.maximum,
    "minimum": np.minimum,
    "logaddexp": np.logaddexp,
    "where": lambda a, b: np.where(a > b, a, 2 * b),
    "clip": lambda a, b: np.clip(a, -0.5, 0.5) * b,
    "concatenate": _concat,
    "stack": _stack,
    "matmul": _matmul,
    "hypot": np.hypot,
    "arctan2": np.arctan2,
    "fmax": np.fmax,
    "logaddexp2": np.logaddexp2,
    "einsum": lambda a, b: np.einsum("...,...->...", a, b),
}
# reductions over one axis with keepdims (so results still broadcast against the rest)
REDUCE = {
    "sum": lambda a, ax: np.sum(a, axis=ax, keepdims=True),
    "mean": lambda a, ax: a.mean(axis=ax, keepdims=True),
    "max": lambda a, ax: np.max(a, axis=ax, keepdims=True),
    "min": lambda a, ax: a.min(axis=ax, keepdims=True),
    "logsumexp": lambda a, ax: tape.logsumexp(a, axis=ax, keepdims=True),
    "prod": lambda a, ax: np.prod(np.tanh(a), axis=ax, keepdims=True),
    "std": lambda a, ax: np.std(a, axis=ax, keepdims=True),
    "norm": lambda a, ax: np.linalg.norm(a, axis=ax, keepdims=True),
}


@st.composite
def programs(draw):
    base = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=3)))
    n_in = draw(st.integers(1, 3))
    shapes = []
    for _ in range(n_in):
        drop = draw(st.integers(0, len(base)))
        shapes.append(tuple(n if draw(st.booleans()) else 1 for n in base[drop:]))
    steps = []
    for k in range(draw(st.integers(1, 8))):
        n_vals = n_in + k
        kind = draw(st.sampled_from(["unary", "unary", "binary", "binary", "reduce", "matmul"]))
        a = draw(st.integers(0, n_vals - 1))
        if kind == "unary":
            steps.append(("unary", draw(st.sampled_from(sorted(UNARY))), a))
        elif kind == "binary":
            steps.append(("binary", draw(st.sampled_from(sorted(BINARY))), a, draw(st.integers(0, n_vals - 1))))
        elif kind == "reduce":
            steps.append(("reduce", draw(st.sampled_from(sorted(REDUCE))), a, draw(st.integers(-3, 2))))
        else:
            steps.append(("matmul", None, a))
    return shapes, steps, draw(st.integers(0, 2 ** 32 - 1))


def run(steps, consts, *inputs):
    """Evaluate a program and return all its values; the same code runs on plain and tracked arrays."""
    vals = list(inputs)
    for (kind, name, a, *rest), c in zip(steps, consts):
        x = vals[a]
        if kind == "unary":
            vals.append(UNARY[name](x))
        elif kind == "binary":
            vals.append(BINARY[name](x, vals[rest[0]]))
        elif kind == "reduce":
            nd = np.ndim(x.value if isinstance(x, tape.Tracked) else x)
            vals.append(REDUCE[name](x, rest[0] % nd) if nd else x)
        else:
            vals.append(x @ c if c is not None else x)
    return vals


@settings(max_examples=60, deadline=None)
@given(programs())
def test_random_graphs_match_finite_differences(program):
    shapes, steps, seed = program
    rng = np.random.default_rng(seed)
    inputs = [rng.uniform(-1.5, 1.5, s) for s in shapes]
    # matmul constants: square matrices on the operand's last axis
    consts, plain = [], list(inputs)
    for kind, name, a, *rest in steps:
        c = None
        if kind == "matmul" and np.ndim(plain[a]):
            n = np.shape(plain[a])[-1]
            c = rng.standard_normal((n, n)) / n
        consts.append(c)
        plain.append(run([(kind, name, a, *rest)], [c], *plain)[-1])
    weights = [rng.standard_normal(np.shape(v)) for v in plain]

    def loss(*xs):
        """Every value of the program contributes, so every step's gradient is checked."""
        return sum(np.sum(v * w) for v, w in zip(run(steps, consts, *xs), weights))

    val, grads = tape.withgradient(loss, *inputs)
    assert np.isclose(val, loss(*inputs))
    for k, (x, g) in enumerate(zip(inputs, grads)):
        assert g.shape == x.shape and g.dtype == x.dtype
        np.testing.assert_allclose(g, numeric_grad(loss, inputs, k), rtol=1e-4, atol=1e-6)


@settings(max_examples=20, deadline=None)
@given(programs())
def test_random_graphs_keep_float32(program):
    shapes, steps, seed = program
    rng = np.random.default_rng(seed)
    inputs = [rng.uniform(-1.5, 1.5, s).astype(np.float32) for s in shapes]
    consts = [None] * len(steps)
    grads = tape.gradient(lambda *xs: np.sum(run(steps, consts, *xs)[-1]), *inputs)
    for x, g in zip(inputs, grads):
        assert g.dtype == np.float32 and g.shape == x.shape
