"""First-compile latency, each case in a fresh process (issue 14's ``compile`` workload).

Every case runs in a new Python process: the time to the first gradient includes Numba's
compile of the primal, adcore's pipeline and the Numba compiles of the rules it needs, as a
user's script pays them.  Each row also names where adcore's time went (the three largest
stages of ``adcore.last_compile_report()``) and compares with Numba's compile of the primal
alone, or with the tape engine's first gradient of the same model (``x ref``).

    python -m bench compile
"""
import json
import os
import subprocess
import sys
from pathlib import Path

from .registry import workload
from .rows import failed, row
from .timing import Timing

ROOT = Path(__file__).resolve().parents[1]
W = "compile"

# case -> (script, what ``reference()`` is); each script defines ``gradient()`` and
# ``reference()``, and the harness times one of them as the first call of a new process
CASES = {
    "kernel with a matrix product": ("Numba's compile of the primal", """
import numba, numpy as np, adcore
@numba.njit
def f(A, x):
    return np.sum(np.tanh(A @ x))
A, x = np.random.rand(30, 20), np.random.rand(20)
reference = lambda: f(A, x)
gradient = lambda: adcore.gradient(adcore.Reverse, f, A, x)
"""),
    "seed model 1-23-1, Duplicated": ("the tape engine's first gradient", """
import numpy as np, layers
from adcore import Duplicated
model = layers.Chain(layers.Dense(1, 23, layers.tanh), layers.Dense(23, 1))
x, y = np.linspace(-1, 1, 41, dtype=np.float32)[None, :].T, np.zeros((41, 1), np.float32)
loss = lambda m, x, y: layers.mse(m(x), y)
reference = lambda: layers.gradient(loss, model, x, y)
gradient = lambda: layers.gradient(loss, Duplicated(model), x, y)
"""),
    "docs MLP 784-32-10, Duplicated": ("the tape engine's first gradient", """
import numpy as np, layers
from adcore import Duplicated
model = layers.Chain(layers.Dense(784, 32, layers.tanh), layers.Dense(32, 10))
x = np.random.rand(128, 784).astype(np.float32)
y = np.eye(10, dtype=np.float32)[np.random.randint(0, 10, 128)]
loss = lambda m, x, y: layers.logitcrossentropy(m(x), y)
reference = lambda: layers.gradient(loss, model, x, y)
gradient = lambda: layers.gradient(loss, Duplicated(model), x, y)
"""),
}

HARNESS = """
import json, sys, time
t0 = time.perf_counter()
{which}()
seconds = time.perf_counter() - t0
stages = {{}}
if "{which}" == "gradient":
    import adcore
    report = adcore.last_compile_report()
    stages = dict(report.seconds) if report is not None else {{}}
print(json.dumps({{"seconds": seconds, "stages": stages}}))
"""


def _fresh(script, which):
    """``{"seconds": ..., "stages": {...}}`` of the first ``which()`` in a new process."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = subprocess.run([sys.executable, "-c", script + HARNESS.format(which=which)], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        raise RuntimeError(run.stderr.strip().splitlines()[-1] if run.stderr.strip() else
                           f"exit status {run.returncode}")
    return json.loads(run.stdout.strip().splitlines()[-1])


@workload(W, "first-compile latency, each case in a fresh process")
def run(config):
    rows = []
    for case, (reference, script) in CASES.items():
        try:
            grad = _fresh(script, "gradient")
            ref = _fresh(script, "reference")
        except Exception as exc:                         # a failing case is a row, not a crash
            rows.append(failed(W, case, "first gradient (fresh process)", exc))
            continue
        top = sorted(grad["stages"].items(), key=lambda kv: -kv[1])[:3]
        where = ", ".join(f"{name} {sec:.2f} s" for name, sec in top)
        rows.append(row(W, case, "first gradient (fresh process)", Timing((grad["seconds"],)),
                        vs_ref=grad["seconds"] / ref["seconds"], first_call_s=grad["seconds"],
                        note=f"x ref: vs {reference} ({ref['seconds']:.2f} s); "
                             f"adcore's largest stages: {where}"))
    return rows
