"""First-compile latency, each case in a fresh process (issue 14's ``compile`` workload).

Every case runs in a new Python process, timed after its imports (adcore's differentiator
included, and numpy.ma and scipy.linalg, which Numba's first ``typeof`` of an array and
its first BLAS call import): the time to the first gradient includes Numba's compile of the primal,
adcore's pipeline and the Numba compiles of the rules it needs, as a user's script pays
them.  It runs twice on one new, empty ``ADCORE_CACHE_DIR``: cold, then in another new
process from the disk cache.  Each row names where adcore's CPU time went (every stage of the compile
reports the call made, ``adcore.timings.compile_reports()``, and the time outside them:
staging a ``Duplicated`` program, the run itself) and divides by references, each also the first call
in a fresh process: Numba's compile of the primal, JAX's ``jit`` of its gradient (when
installed), the tape engine's first gradient (``x ref`` is the first reference); for a
``Duplicated`` model, Numba's primal is the same forward pass and loss written as one njit
function.  Numba's
own cache of adcore's BLAS rules (``cache=True``) is warm after the first run ever.

    python -m bench compile
"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .registry import workload
from .rows import failed, row
from .timing import Timing

ROOT = Path(__file__).resolve().parents[1]
W = "compile"

MODELS = """
import numpy as np, layers, optim
from adcore import Duplicated
def mlp(sizes, act):
    return layers.Chain(*[layers.Dense(a, b, act, rng=k) if k < len(sizes) - 2 else
                          layers.Dense(a, b, rng=k) for k, (a, b) in enumerate(zip(sizes, sizes[1:]))])
def jax_mlp(sizes, x, y, loss):
    import jax, jax.numpy as jnp
    rng = np.random.default_rng(0)
    ps = [(rng.standard_normal((a, b)).astype(np.float32) * 0.1, np.zeros(b, np.float32))
          for a, b in zip(sizes, sizes[1:])]
    def f(ps, x, y):
        h = x
        for k, (w, b) in enumerate(ps):
            h = h @ w + b
            h = jnp.tanh(h) if k < len(ps) - 1 else h
        return loss(h, y)
    return lambda: jax.block_until_ready(jax.jit(jax.grad(f))(ps, x, y))
def numba_mlp(sizes, x, y, loss):
    # the same forward pass and loss written as one njit function, compiled and run once
    import numba
    rng = np.random.default_rng(0)
    ps = [(rng.standard_normal((a, b)).astype(np.float32) * 0.1, np.zeros(b, np.float32))
          for a, b in zip(sizes, sizes[1:])]
    @numba.njit
    def f(w0, b0, w1, b1, x, y):
        return loss(np.tanh(x @ w0 + b0) @ w1 + b1, y)
    return lambda: f(*ps[0], *ps[1], x, y)
"""

# case -> (script, {reference name: what it is}); each script defines ``gradient()`` and
# one function per reference; the harness times one of them as the first call of a new process
CASES = {
    "kernel with a matrix product": ("""
import numba, numpy as np, adcore
@numba.njit
def f(A, x):
    return np.sum(np.tanh(A @ x))
A, x = np.random.rand(30, 20), np.random.rand(20)
numba_primal = lambda: f(A, x)
gradient = lambda: adcore.gradient(adcore.Reverse, f, A, x)
def jax_jit():
    import jax, jax.numpy as jnp
    return jax.block_until_ready(jax.jit(jax.grad(lambda A, x: jnp.sum(jnp.tanh(A @ x)),
                                                  argnums=(0, 1)))(A, x))
""", {"numba_primal": "Numba's compile of the primal", "jax_jit": "JAX's jit of its gradient"}),
    "seed model 1-23-1, Duplicated": (MODELS + """
model = mlp([1, 23, 1], layers.tanh)
x, y = np.linspace(-1, 1, 41, dtype=np.float32)[None, :].T, np.zeros((41, 1), np.float32)
loss = lambda m, x, y: layers.mse(m(x), y)
tape = lambda: layers.gradient(loss, model, x, y)
gradient = lambda: layers.gradient(loss, Duplicated(model), x, y)
def jax_jit():
    return jax_mlp([1, 23, 1], x, y, lambda h, y: ((h - y) ** 2).mean())()
def numba_primal():
    import numba
    return numba_mlp([1, 23, 1], x, y, numba.njit(lambda h, y: ((h - y) ** 2).mean()))()
""", {"tape": "the tape engine's first gradient", "numba_primal": "Numba's compile of the primal",
      "jax_jit": "JAX's jit of its gradient"}),
    "docs MLP 784-32-10, Duplicated": (MODELS + """
model = mlp([784, 32, 10], layers.tanh)
x = np.random.rand(128, 784).astype(np.float32)
y = np.eye(10, dtype=np.float32)[np.random.randint(0, 10, 128)]
loss = lambda m, x, y: layers.logitcrossentropy(m(x), y)
tape = lambda: layers.gradient(loss, model, x, y)
gradient = lambda: layers.gradient(loss, Duplicated(model), x, y)
def jax_jit():
    import jax
    xent = lambda h, y: -(y * jax.nn.log_softmax(h, axis=1)).sum(axis=1).mean()
    return jax_mlp([784, 32, 10], x, y, xent)()
def numba_primal():
    import numba
    @numba.njit
    def xent(h, y):
        total = 0.0
        for i in range(h.shape[0]):
            m = h[i].max()
            total += np.sum(y[i] * (h[i] - m - np.log(np.sum(np.exp(h[i] - m)))))
        return -total / h.shape[0]
    return numba_mlp([784, 32, 10], x, y, xent)()
""", {"tape": "the tape engine's first gradient", "numba_primal": "Numba's compile of the primal",
      "jax_jit": "JAX's jit of its gradient"}),
    "seed model train loop (41 items), Duplicated": (MODELS + """
model = layers.Chain(layers.Dense(1, 23, layers.tanh, rng=0), layers.Dense(23, 1, rng=1), layers.only)
data = [(np.array([v], np.float32), np.float32(2 * v - v ** 3)) for v in np.arange(-2, 2.0001, 0.1)]
loss = lambda m, x, y: (m(x) - y) ** 2
def gradient():
    dup = Duplicated(model)
    return layers.train(loss, dup, data, optim.setup(optim.Adam(), dup))
tape = lambda: layers.train(loss, model, data, optim.setup(optim.Adam(), model))
""", {"tape": "the tape engine's first epoch"}),
}

# the part of a first gradient's time no compile report covers (staging, the run itself)
OUTSIDE = "outside adcore's reports"
HARNESS = """
import json, sys, time
import adcore.api, adcore.timings, numpy.ma, scipy.linalg   # imported by Numba's first typeof of
                                            # an array and its first BLAS call: any Numba program pays them
made = len(adcore.timings.compile_reports())
t0, c0 = time.perf_counter(), time.process_time()
{which}()
seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
stages = {{}}
for report in adcore.timings.compile_reports()[made:] if "{which}" == "gradient" else []:
    for name, sec in report.cpu_seconds.items():
        stages[name] = stages.get(name, 0.0) + sec
if stages:
    stages[{outside!r}] = cpu - sum(stages.values())
print(json.dumps({{"seconds": seconds, "cpu": cpu, "stages": stages}}))
"""


def _fresh(script, which, cache):
    """``{"seconds": ..., "cpu": ..., "stages": {...}}`` of the first ``which()`` in a new
    process (``cpu``: the process's CPU seconds, less sensitive to a busy machine;
    ``stages``: the CPU seconds of each stage)."""
    env = dict(os.environ, ADCORE_CACHE="1", ADCORE_CACHE_DIR=cache,
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = subprocess.run([sys.executable, "-c", script + HARNESS.format(which=which, outside=OUTSIDE)], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        raise RuntimeError(run.stderr.strip().splitlines()[-1] if run.stderr.strip() else
                           f"exit status {run.returncode}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def _seconds(sec):
    """``0.97 s``, or ``1.3 ms`` below a tenth of a second (the tape engine's first gradient)."""
    return f"{sec:.2f} s" if sec >= 0.1 else f"{sec * 1e3:.1f} ms"


def _where(stages):
    """Every stage of ``stages``, largest first."""
    return ", ".join(f"{name} {sec * 1e3:.0f} ms" for name, sec in sorted(stages.items(), key=lambda kv: -kv[1]))


@workload(W, "first-compile latency, each case in a fresh process, cold and from the disk cache")
def run(config):
    rows = []
    for case, (script, references) in CASES.items():
        with tempfile.TemporaryDirectory(prefix="adcore-bench-cache-") as cache:
            try:
                cold = _fresh(script, "gradient", cache)
                warm = _fresh(script, "gradient", cache)
                refs = {name: _fresh(script, name, cache)["seconds"] for name in references
                        if name != "jax_jit" or importlib.util.find_spec("jax") is not None}
            except Exception as exc:                     # a failing case is a row, not a crash
                rows.append(failed(W, case, "first gradient (fresh process)", exc))
                continue
        first = next(iter(refs))
        for impl, got in (("first gradient, cold (fresh process)", cold),
                          ("first gradient from the disk cache (new process)", warm)):
            t = got["seconds"]
            ratios = "; ".join(f"x {t / refs[n]:.3f} vs {references[n]} ({_seconds(refs[n])})"
                               for n in refs)
            rows.append(row(W, case, impl, Timing((t,)), vs_ref=t / refs[first], first_call_s=t,
                            note=f"{ratios}; CPU {got['cpu']:.2f} s; adcore's stages (CPU): {_where(got['stages'])}"))
    return rows
