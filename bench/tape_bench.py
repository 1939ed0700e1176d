"""Speed of adcore.tape next to HIPS autograd (when installed).

    python -m bench.tape_bench [--quick]

Rows: per-op overhead (µs per recorded op, forward + backward, on 8-element
arrays) for a chain of elementwise ops and for a mix of shape ops, and the time
of one gradient of a 784-32-10 tanh MLP with a softmax cross-entropy loss on a
batch of 128.  Each number is the median of samples (alternating between the engines)
after a warm-up; the ratio is adcore / autograd (below 1 means adcore is faster).  Both engines run the same
numpy code (autograd through ``autograd.numpy``).
"""
import argparse

import numpy as np

from adcore import Const, tape

from .timing import default_sampler

try:
    import autograd
    import autograd.numpy as anp
except ImportError:  # optional: pip install adcore[peers]
    autograd = anp = None


# ---------------------------------------------------------------- workloads (numpy module as a parameter)

def elementwise_chain(xp, x, n=50):
    """3 ops per step: multiply, add, tanh; then a sum."""
    for _ in range(n):
        x = xp.tanh(x * 1.01 + 0.1)
    return xp.sum(x)


def mixed_chain(xp, x, n=25):
    """11 ops per step: indexing with None (x2), broadcast multiply, transpose, sum over an axis,
    reversed slice, scalar multiplies, negation, exp, subtract."""
    for _ in range(n):
        m = x[:, None] * x[None, :]
        x = xp.sum(m.T, axis=0)[::-1] * 0.1
        x = xp.exp(-x) - x * 0.5
    return xp.sum(x)


def mlp_loss(xp, params, x, y):
    """784-32-10 tanh MLP, softmax cross-entropy written with plain numpy ops."""
    w1, b1, w2, b2 = params
    h = xp.tanh(x @ w1 + b1)
    z = h @ w2 + b2
    z = z - xp.max(z, axis=1, keepdims=True)
    logp = z - xp.log(xp.sum(xp.exp(z), axis=1, keepdims=True))
    return -xp.mean(xp.sum(logp * y, axis=1))


def mlp_loss_fused(params, x, y):
    """The same MLP with the tape's fused, stable ``tape.logsoftmax``."""
    w1, b1, w2, b2 = params
    z = np.tanh(x @ w1 + b1) @ w2 + b2
    return -np.mean(np.sum(tape.logsoftmax(z, axis=1) * y, axis=1))


def _count_ops(f, *args):
    return sum(r.op != "input" for r in tape.record(f, *args).tape.records)


def run(sampler):
    """Run the benchmarks with ``sampler`` (samples alternate between the engines); returns
    rows (dicts) whose ``adcore.tape`` and ``autograd`` are Timings in seconds per ``per``
    (an op, or a call), and whose ``ratio`` is adcore.tape / autograd of the medians."""
    rng = np.random.default_rng(0)
    rows = []

    def add_row(name, per, n, ours, theirs):
        rows.append({"benchmark": name, "per": per, "adcore.tape": ours.scaled(1 / n),
                     "autograd": None if theirs is None else theirs.scaled(1 / n),
                     "ratio": None if theirs is None else ours.median / theirs.median})

    x8 = rng.standard_normal(8)
    for name, work in (("elementwise op overhead", elementwise_chain), ("mixed op overhead", mixed_chain)):
        n_ops = _count_ops(lambda x: work(np, x), x8)
        theirs = None
        if autograd is not None:
            g = autograd.grad(lambda x: work(anp, x))
            theirs = lambda: g(x8)  # noqa: E731
        ours, theirs = sampler.interleaved([lambda: tape.gradient(lambda x: work(np, x), x8), theirs])
        add_row(f"{name} ({n_ops} ops, 8 elements)", "op", n_ops, ours, theirs)

    params = (rng.standard_normal((784, 32)) * 0.05, np.zeros(32),
              rng.standard_normal((32, 10)) * 0.2, np.zeros(10))
    xb = rng.standard_normal((128, 784))
    yb = np.eye(10)[rng.integers(0, 10, 128)]
    theirs = None
    if autograd is not None:
        g = autograd.grad(lambda p: mlp_loss(anp, p, xb, yb))
        theirs = lambda: g(params)  # noqa: E731
    ours, fused, theirs = sampler.interleaved(
        [lambda: tape.gradient(lambda p: mlp_loss(np, p, xb, yb), params),
         lambda: tape.gradient(mlp_loss_fused, params, Const(xb), Const(yb)), theirs])
    add_row("MLP 784-32-10 gradient, batch 128", "call", 1, ours, theirs)
    add_row("  same, with tape.logsoftmax", "call", 1, fused, theirs)
    return rows


def report(rows):
    """The rows as text: µs per op, ms per call."""
    unit = {"op": ("µs/op", 1e6), "call": ("ms", 1e3)}
    lines = [f"{'benchmark':44s} {'unit':>6s} {'adcore.tape':>12s} {'autograd':>10s} {'ratio':>7s}"]
    for r in rows:
        name, scale = unit[r["per"]]
        theirs = "-" if r["autograd"] is None else f"{r['autograd'].median * scale:10.2f}"
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:7.2f}"
        lines.append(f"{r['benchmark']:44s} {name:>6s} {r['adcore.tape'].median * scale:12.2f} "
                     f"{theirs:>10s} {ratio:>7s}")
    if autograd is None:
        lines.append("autograd is not installed (pip install autograd, or adcore[peers]): no comparison")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter samples")
    print(report(run(default_sampler(parser.parse_args().quick))))
