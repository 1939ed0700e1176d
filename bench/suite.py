"""The workloads of ``python -m bench``: each runs as ``fn(quick, size)`` and returns table rows
(``measure.row``). The other engineers' benchmark modules are adapted to those rows here."""
import contextlib
import importlib
import io

import numpy as np

from . import gmm, mlp, seed_peers
from .measure import failed, first_call, median_seconds, rel_err, row, skipped


def _seed(quick, size):
    """bench/seed.py's rows, then the peers trained for the same epochs from the same weights."""
    try:
        seed = importlib.import_module("bench.seed")
    except ImportError:
        return [skipped("seed", "", "bench/seed.py", "not written yet: seed workload not run")]
    return seed_rows(seed.run(quick), quick, size)


def seed_rows(rows, quick, size):
    raise NotImplementedError  # filled in once bench/seed.py's rows are known


def _kernels(quick, size):
    """bench/kernels.py: primal, adcore gradient and hand-written gradient of each kernel."""
    kernels = importlib.import_module("bench.kernels")
    out = []
    for r in kernels.run(quick or size < 1):
        case = f"{r['workload']}, {r['size']}"
        out += [row("kernels", case, "Numba primal", r["primal_ms"]),
                row("kernels", case, "hand-written Numba gradient", r["hand_ms"], vs_ref=1.0,
                    grad_obj=r["hand_ms"] / r["primal_ms"], note="reference"),
                row("kernels", case, "adcore gradient", r["adcore_ms"], vs_ref=r["adcore_over_hand"],
                    grad_obj=r["grad_over_primal"], first_s=r["first_call_s"],
                    cached=r["cached_bytes"])]
    return out


def _tape(quick, size):
    """bench/tape_bench.py: the tape engine's per-op overhead and MLP gradient next to autograd."""
    tape_bench = importlib.import_module("bench.tape_bench")
    with contextlib.redirect_stdout(io.StringIO()):
        rows = tape_bench.run(quick or size < 1)
    out = []
    for r in rows:
        for impl in ("adcore.tape", "autograd"):
            if r[impl] is None:
                out.append(skipped("tape", r["benchmark"], impl, "autograd not installed"))
                continue
            ms = r[impl] if r["unit"] == "ms" else None
            text = None if ms is not None else f"{r[impl]:.2f} {r['unit']}"
            note = f"adcore.tape / autograd = {r['ratio']:.2f}" if impl == "autograd" else ""
            out.append(row("tape", r["benchmark"].strip(), impl, ms, text=text, note=note))
    return out


WORKLOADS = {
    "seed": ("seed training: per-sample Adam on a 1-23-1 tanh network", _seed),
    "mlp": ("Flux docs MLP 784-32-10, one gradient", mlp.run),
    "gmm": ("ADBench GMM objective: gradient/objective ratios and checks", gmm.run),
    "kernels": ("kernel set: gradient/primal and adcore/hand-written", _kernels),
    "tape": ("tape engine overhead next to HIPS autograd", _tape),
}
QUICK = ("seed", "mlp", "gmm", "kernels")
