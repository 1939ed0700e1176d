"""python -m bench [--quick] [--size S] [WORKLOAD ...]

Runs the benchmark workloads (seed, mlp, gmm, kernels, tape; ``--quick``: a subset, smaller
and with fewer repeats), prints the table and, on a full run, rewrites bench/RESULTS.md and
bench/seed.png. Exits with status 1 when an implementation's answer fails its check.
"""
import os

# One BLAS/OpenMP thread, like the Numba kernels: on a shared 2-core machine OpenBLAS's
# spinning threads made numpy's matmul times vary 50-fold. Set before numpy loads.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

from . import peers, report  # noqa: E402
from .measure import failed, peak_rss, reset_peak_rss
from .suite import QUICK, WORKLOADS


def run(names, quick=False, size=1.0, show_progress=True):
    """``(rows, memory)``: the rows of each workload, and per workload
    ``(name, seconds, resident bytes at its start, peak resident bytes)``."""
    for peer in peers.NAMES:  # imported up front, so that no workload's memory counts them
        peers.get(peer)
    rows, memory = [], []
    for i, name in enumerate(names, 1):
        title, fn = WORKLOADS[name]
        if show_progress:
            report.progress(i, len(names), name, title)
        start = reset_peak_rss() or 0
        t0 = time.perf_counter()
        try:
            rows += fn(quick, size)
        except Exception as exc:  # a broken workload is a failed row, not a crash of the suite
            rows.append(failed(name, "", name, exc))
        memory.append((name, time.perf_counter() - t0, start, peak_rss()))
    return rows, memory


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[2])
    parser.add_argument("workloads", nargs="*", metavar="WORKLOAD",
                        help=f"run only these ({', '.join(WORKLOADS)})")
    parser.add_argument("--quick", action="store_true", help="a subset in under a minute")
    parser.add_argument("--size", type=float, default=1.0, help="scale the problem sizes")
    args = parser.parse_args(argv)
    unknown = set(args.workloads) - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workload {', '.join(sorted(unknown))}; choose from {', '.join(WORKLOADS)}")
    names = args.workloads or (QUICK if args.quick else tuple(WORKLOADS))
    warnings.filterwarnings("ignore", module="torch|jax")
    t0 = time.perf_counter()
    rows, memory = run(names, args.quick, args.size)
    seconds = time.perf_counter() - t0
    print()
    print(report.table(rows))
    print()
    print(report.LEGEND)
    print()
    print("  ".join(f"{n}: {s:.1f} s, peak RSS {p / 2**20:.0f} MB" for n, s, _, p in memory))
    notes = ["adcore keeps compiled gradients in memory only (no on-disk cache), so each 1st call "
             "is a cold compile; Numba's are too (cache=False)",
             "single-threaded throughout: one BLAS/OpenMP thread, torch.set_num_threads(1); "
             "JAX uses XLA's defaults"]
    if not args.workloads and not args.quick and args.size == 1.0:
        chart = report.seed_chart(rows, report.HERE / "seed.png")
        notes.append(chart or "chart of the seed workload: bench/seed.png")
        command = "python -m bench"
        (report.HERE / "RESULTS.md").write_text(report.results_md(rows, memory, notes, command, seconds))
        print("wrote bench/RESULTS.md" + ("" if chart else " and bench/seed.png"))
    for note in notes[2:]:
        if not note.startswith("chart"):
            print(note)
    bad = report.failures(rows)
    print(f"{len(bad)} failed checks" if bad else "all checks passed", f"({seconds:.0f} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
