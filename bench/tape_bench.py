"""Speed of adcore.tape next to HIPS autograd and PyTorch eager (each when installed).

    python bench/tape_bench.py [--quick]

Rows: per-op overhead (µs per recorded op, forward + backward, on 8-element
arrays) for a chain of elementwise ops, for a mix of shape ops and for a mix of the
ops added for numpy coverage (complex values, inverse hyperbolic functions, hypot,
running sums, einsum), and the time of one gradient of a 784-32-10 tanh MLP with a
softmax cross-entropy loss on a batch of 128.  Each number is the median of samples
(alternating between the engines) after a warm-up; the ratio is adcore / autograd (below
1 means adcore is faster).  adcore and autograd run the same numpy code (autograd through
``autograd.numpy``); PyTorch runs the same operations written with ``torch``.
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
try:
    import torch
except ImportError:  # optional: pip install adcore[peers]
    torch = None


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


def coverage_chain(xp, x, n=10):
    """12 ops per step, from the coverage of issue 17: complex multiply, exp, abs, arcsinh,
    hypot, cumsum, einsum, reversal, scalar multiplies and an add."""
    for _ in range(n):
        z = xp.exp((x * 0.1) * (0.5 + 1j))
        y = xp.hypot(xp.abs(z), xp.arcsinh(x))
        x = (xp.cumsum(y) * 0.05)[::-1] + xp.einsum("i,i->i", x, y) * 0.1
    return xp.sum(x)


def torch_elementwise_chain(x, n=50):
    for _ in range(n):
        x = torch.tanh(x * 1.01 + 0.1)
    return torch.sum(x)


def torch_mixed_chain(x, n=25):
    for _ in range(n):
        m = x[:, None] * x[None, :]
        x = torch.flip(torch.sum(m.T, dim=0), (0,)) * 0.1
        x = torch.exp(-x) - x * 0.5
    return torch.sum(x)


def torch_mlp_loss(params, x, y):
    w1, b1, w2, b2 = params
    h = torch.tanh(x @ w1 + b1)
    z = h @ w2 + b2
    z = z - torch.max(z, dim=1, keepdim=True).values
    logp = z - torch.log(torch.sum(torch.exp(z), dim=1, keepdim=True))
    return -torch.mean(torch.sum(logp * y, dim=1))


def _torch_gradient(loss, *arrays, consts=()):
    """A callable running one PyTorch eager gradient of ``loss`` (None without PyTorch)."""
    if torch is None or loss is None:
        return None
    leaves = [torch.tensor(a, requires_grad=True) for a in arrays]
    fixed = [torch.tensor(c) for c in consts]

    def grad():
        for t in leaves:
            t.grad = None
        loss(leaves if len(leaves) > 1 else leaves[0], *fixed).backward()
        return [t.grad for t in leaves]
    return grad


def _count_ops(f, *args):
    return sum(r.op != "input" for r in tape.record(f, *args).tape.records)


def run(sampler):
    """Run the benchmarks with ``sampler`` (samples alternate between the engines); returns
    rows (dicts) whose ``adcore.tape`` and ``autograd`` are Timings in seconds per ``per``
    (an op, or a call), and whose ``ratio`` is adcore.tape / autograd of the medians."""
    rng = np.random.default_rng(0)
    rows = []

    def add_row(name, per, n, ours, theirs, torch_time):
        rows.append({"benchmark": name, "per": per, "adcore.tape": ours.scaled(1 / n),
                     "autograd": None if theirs is None else theirs.scaled(1 / n),
                     "torch": None if torch_time is None else torch_time.scaled(1 / n),
                     "ratio": None if theirs is None else ours.median / theirs.median})

    x8 = rng.standard_normal(8)
    for name, work, torch_work in (("elementwise op overhead", elementwise_chain, torch_elementwise_chain),
                                   ("mixed op overhead", mixed_chain, torch_mixed_chain),
                                   ("coverage op overhead", coverage_chain, None)):
        n_ops = _count_ops(lambda x: work(np, x), x8)
        theirs = None
        if autograd is not None:
            g = autograd.grad(lambda x: work(anp, x))
            theirs = lambda: g(x8)  # noqa: E731
        ours, theirs, torch_time = sampler.interleaved(
            [lambda: tape.gradient(lambda x: work(np, x), x8), theirs, _torch_gradient(torch_work, x8)])
        add_row(f"{name} ({n_ops} ops, 8 elements)", "op", n_ops, ours, theirs, torch_time)

    params = (rng.standard_normal((784, 32)) * 0.05, np.zeros(32),
              rng.standard_normal((32, 10)) * 0.2, np.zeros(10))
    xb = rng.standard_normal((128, 784))
    yb = np.eye(10)[rng.integers(0, 10, 128)]
    theirs = None
    if autograd is not None:
        g = autograd.grad(lambda p: mlp_loss(anp, p, xb, yb))
        theirs = lambda: g(params)  # noqa: E731
    ours, fused, theirs, torch_time = sampler.interleaved(
        [lambda: tape.gradient(lambda p: mlp_loss(np, p, xb, yb), params),
         lambda: tape.gradient(mlp_loss_fused, params, Const(xb), Const(yb)), theirs,
         _torch_gradient(torch_mlp_loss, *params, consts=(xb, yb))])
    add_row("MLP 784-32-10 gradient, batch 128", "call", 1, ours, theirs, torch_time)
    add_row("  same, with tape.logsoftmax", "call", 1, fused, theirs, torch_time)
    return rows


def report(rows):
    """The rows as text: µs per op, ms per call."""
    unit = {"op": ("µs/op", 1e6), "call": ("ms", 1e3)}
    lines = [f"{'benchmark':44s} {'unit':>6s} {'adcore.tape':>12s} {'autograd':>10s} {'ratio':>7s} "
             f"{'torch':>8s}"]
    for r in rows:
        name, scale = unit[r["per"]]
        theirs = "-" if r["autograd"] is None else f"{r['autograd'].median * scale:10.2f}"
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:7.2f}"
        torch_time = "-" if r["torch"] is None else f"{r['torch'].median * scale:8.2f}"
        lines.append(f"{r['benchmark']:44s} {name:>6s} {r['adcore.tape'].median * scale:12.2f} "
                     f"{theirs:>10s} {ratio:>7s} {torch_time:>8s}")
    for name, module in (("autograd", autograd), ("PyTorch", torch)):
        if module is None:
            lines.append(f"{name} is not installed (pip install adcore[peers]): no comparison")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter samples")
    print(report(run(default_sampler(parser.parse_args().quick))))
