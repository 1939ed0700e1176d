"""python -m bench [WORKLOAD ...] [--quick] [--json FILE] [--output DIR] | --list | --compare OLD NEW

Runs the benchmark workloads (all, the ``--quick`` set, or those named) and prints one table.
``--json FILE`` keeps every sample, the checks and the environment; ``--output DIR`` writes
RESULTS.md and a chart per workload there (a full run writes them to the current directory).
Exits with status 1 when an implementation's answer fails its check.
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
from pathlib import Path  # noqa: E402

from . import charts, compare, environment, peers, registry, report, results  # noqa: E402
from .measure import peak_rss, reset_peak_rss  # noqa: E402
from .rows import failed, failures  # noqa: E402
from .timing import Sampler, default_sampler  # noqa: E402

NOTES = ["adcore's on-disk cache is off (ADCORE_CACHE=0) but for the compile workload's rows from "
         "it, so each 1st call is a cold compile; Numba's are too (cache=False)",
         "single-threaded throughout: one BLAS/OpenMP thread, torch.set_num_threads(1); "
         "JAX uses XLA's defaults"]


def run(names, config, show_progress=True):
    """``(rows, workloads)``: the rows of each workload, and per workload its name, wall
    seconds, resident bytes at its start and peak resident bytes."""
    for peer in peers.NAMES:  # imported up front, so that no workload's memory counts them
        peers.get(peer)
    rows, workloads = [], []
    for i, name in enumerate(names, 1):
        w = registry.WORKLOADS[name]
        if show_progress:
            report.progress(i, len(names), name, w.title)
        start = reset_peak_rss()
        t0 = time.perf_counter()
        try:
            rows += w.fn(config)
        except Exception as exc:  # a broken workload is a failed row, not a crash of the suite
            rows.append(failed(name, "", name, exc))
        workloads.append(dict(name=name, seconds=time.perf_counter() - t0,
                              rss_start_bytes=start, rss_peak_bytes=peak_rss()))
    return rows, workloads


def _parser():
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[2])
    parser.add_argument("workloads", nargs="*", metavar="WORKLOAD",
                        help="run only these (see --list)")
    parser.add_argument("--quick", action="store_true", help="a subset, smaller, in under a minute")
    parser.add_argument("--size", type=float, default=1.0, help="scale the problem sizes")
    parser.add_argument("--repeat", type=int, metavar="N",
                        help="timed samples per measurement (default: 5 with --quick, else 15)")
    parser.add_argument("--min-time", type=float, metavar="S",
                        help="least seconds per sample; short calls are repeated within a sample "
                             "(default: 0.002 with --quick, else 0.01)")
    parser.add_argument("--json", metavar="FILE", help="write the results, samples and environment")
    parser.add_argument("--output", metavar="DIR",
                        help="write RESULTS.md and the charts there (a full run: the current directory)")
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="the distributed workload on this Dask scheduler's workers "
                             "(default: local clusters of 1 and 2 workers)")
    parser.add_argument("--list", action="store_true", help="list the workloads and exit")
    parser.add_argument("--load", action="append", default=[], metavar="MODULE",
                        help="import a module (name or .py path) that registers workloads")
    parser.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"),
                        help="compare two --json files and exit")
    return parser


def _list():
    for name, w in registry.WORKLOADS.items():
        plugin = w.source.split(".")[0] != "bench"
        tags = ", ".join(t for t in ("quick" if w.quick else "", w.source if plugin else "") if t)
        print(f"{name:<10} {w.title}" + (f"  [{tags}]" if tags else ""))


def _write_outputs(doc, folder):
    """Writes RESULTS.md and the charts into ``folder``; returns the line to print."""
    folder.mkdir(parents=True, exist_ok=True)
    drawn = charts.draw(doc["rows"], folder)
    if isinstance(drawn, str):
        chart_note, done = drawn, f"wrote {folder / 'RESULTS.md'}; {drawn}"
    else:
        chart_note = "charts: " + ", ".join(f"[{p.name}]({p.name})" for p in drawn)
        done = f"wrote {folder / 'RESULTS.md'} and {len(drawn)} chart(s)"
    (folder / "RESULTS.md").write_text(report.results_md(doc, NOTES + [chart_note]))
    return done


def _what_to_run(args, parser):
    """``(workload names, Config)`` from the command line."""
    unknown = set(args.workloads) - set(registry.WORKLOADS)
    if unknown:
        parser.error(f"unknown workload {', '.join(sorted(unknown))}; "
                     f"choose from {', '.join(registry.WORKLOADS)}")
    if args.size <= 0 or (args.repeat is not None and args.repeat < 1) or \
            (args.min_time is not None and args.min_time < 0):
        parser.error("--size must be positive, --repeat at least 1 and --min-time not negative")
    names = args.workloads or (registry.quick_names() if args.quick else tuple(registry.WORKLOADS))
    default = default_sampler(args.quick)
    sampler = Sampler(repeat=args.repeat or default.repeat,
                      min_time=default.min_time if args.min_time is None else args.min_time)
    return names, registry.Config(quick=args.quick, size=args.size, sampler=sampler,
                                 output=args.output, scheduler=args.scheduler)


def main(argv=None):
    parser = _parser()
    args = parser.parse_args(argv)
    if args.compare:
        try:
            old, new = (results.read(p) for p in args.compare)
        except (OSError, ValueError) as exc:
            parser.error(str(exc))
        print(compare.text(old, new, *args.compare))
        return 0
    registry.load(args.load)
    if args.list:
        _list()
        return 0
    names, config = _what_to_run(args, parser)
    warnings.filterwarnings("ignore", module="torch|jax")

    t0, load = time.perf_counter(), environment.load_average()
    rows, workloads = run(names, config)
    sampler = config.sampler
    settings = dict(workloads=list(names), quick=args.quick, size=args.size,
                    repeat=sampler.repeat, min_time=sampler.min_time, warmup=sampler.warmup)
    command = " ".join(["python -m bench"] + (sys.argv[1:] if argv is None else list(argv)))
    doc = results.document(command, settings, environment.collect(load), time.perf_counter() - t0,
                           workloads, rows)
    print()
    print(report.table(rows))
    print()
    print(report.LEGEND)
    print()
    print("  ".join(f"{w['name']}: {w['seconds']:.1f} s, peak RSS {w['rss_peak_bytes'] / 2**20:.0f} MB"
                    for w in workloads))
    if environment.busy(doc["environment"]):
        print(f"note: the machine was busy (load average up to {environment.busy(doc['environment']):.1f} "
              f"on {doc['environment']['cpu']['usable_cores']} cores): the times are noisy")
    full_run = not args.workloads and not args.quick and args.size == 1.0
    if args.output or full_run:
        print(_write_outputs(doc, Path(args.output or ".")))
    if args.json:
        results.write(doc, args.json)
        print(f"wrote {args.json}")
    bad = failures(rows)
    print(f"{len(bad)} failed checks" if bad else "all checks passed", f"({doc['seconds']:.0f} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    # Each 1st call is a cold compile: adcore's disk cache is off (the compile workload turns
    # it on, in a fresh cache directory of its own, for its rows from the cache).
    os.environ.setdefault("ADCORE_CACHE", "0")
    sys.exit(main())
