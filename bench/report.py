"""Output of a run: the terminal table, bench/RESULTS.md and the seed workload's chart."""
import datetime
import os
import platform
import subprocess
import sys
from pathlib import Path

from . import peers

HERE = Path(__file__).resolve().parent
COLUMNS = ("implementation", "time", "x ref", "grad/obj", "1st call", "cached", "alloc", "check")
LEGEND = """\
time: median after warm-up, per gradient (per 1000 epochs for seed); x ref: time / the
hand-written Numba reference of the same case; grad/obj: gradient time / the same
implementation's objective time; 1st call: first call in this process (includes compiling);
cached: bytes adcore's reverse pass cached (adcore.last_cached_bytes); alloc: peak bytes
allocated through Python/numpy during one call (tracemalloc; PyTorch's and JAX's own
allocators are invisible to it); check: error of the answer against the reference."""


def _time(r):
    if r.get("text"):
        return r["text"]
    ms = r["ms"]
    if ms is None:
        return ""
    return _seconds(ms / 1e3)


def _seconds(s):
    if s >= 1:
        return f"{s:.2f} s"
    return f"{s * 1e3:.2f} ms" if s >= 1e-3 else f"{s * 1e6:.1f} us"


def _bytes(b):
    if b is None:
        return ""
    for unit in ("B", "KB", "MB", "GB"):
        if b < 1024 or unit == "GB":
            return f"{b:.0f} {unit}" if unit == "B" else f"{b:.1f} {unit}"
        b /= 1024


def _num(v, fmt):
    return "" if v is None else format(v, fmt)


def _short(r):
    """A skipped implementation, or one that raised: shown as its note only."""
    return r["note"].startswith("skipped") or (r["ok"] is False and r["err"] is None)


def cells(r):
    """The table cells of one row."""
    if _short(r):
        return (r["impl"], r["note"], "", "", "", "", "", r["check"])
    first = "" if r["first_s"] is None else _seconds(r["first_s"])
    check = (r["check"] + ("  " + r["note"] if r["note"] else "")).strip()
    return (r["impl"], _time(r), _num(r["vs_ref"], ".2f"), _num(r["grad_obj"], ".2f"), first,
            _bytes(r["cached"]), _bytes(r["alloc"]), check)


def _groups(rows):
    groups = {}
    for r in rows:
        groups.setdefault((r["workload"], r["case"]), []).append(r)
    return groups.items()


def table(rows):
    """The terminal table: one block per (workload, case)."""
    full = [cells(r) for r in rows if not _short(r)]
    width = [max([len(c)] + [len(cs[i]) for cs in full]) for i, c in enumerate(COLUMNS[:-1])]

    def line(cs):
        return "  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                for i, (c, w) in enumerate(zip(cs, width))) + "  " + cs[-1]

    out = [line(COLUMNS), "  " + "-" * (sum(width) + 2 * len(width) + len(COLUMNS[-1]))]
    for (workload, case), block in _groups(rows):
        out.append(f"{workload}: {case}")
        for r in block:
            cs = cells(r)
            out.append(f"  {cs[0]:<{width[0]}}  {cs[1]}" + (f"  [{cs[-1]}]" if cs[-1] else "")
                       if _short(r) else line(cs).rstrip())
    return "\n".join(out)


def markdown(rows):
    """The same table in Markdown."""
    out = ["| " + " | ".join(("case",) + COLUMNS) + " |", "|" + "---|" * (len(COLUMNS) + 1)]
    for (workload, case), block in _groups(rows):
        for i, r in enumerate(block):
            label = f"**{workload}**: {case}" if i == 0 else ""
            out.append("| " + " | ".join((label,) + cells(r)).replace("\n", " ") + " |")
    return "\n".join(out)


def failures(rows):
    return [r for r in rows if r["ok"] is False]


def machine():
    """CPU model, cores and memory of this machine."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            mem = f", {int(f.readline().split()[1]) / 2**20:.0f} GiB memory"
    except (OSError, ValueError):
        pass
    return f"{cpu}, {os.cpu_count()} cores{mem}, {platform.system()} {platform.release()}"


def versions():
    import llvmlite
    import numba
    import numpy
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=HERE,
                            capture_output=True, text=True).stdout.strip() or "?"
    out = {"python": platform.python_version(), "adcore": commit, "numpy": numpy.__version__,
           "numba": numba.__version__, "llvmlite": llvmlite.__version__}
    for name in peers.NAMES:
        out[name] = peers.version(name) or "not installed"
    return out


def results_md(rows, memory, notes, command, seconds):
    """The text of bench/RESULTS.md."""
    vs = ", ".join(f"{k} {v}" for k, v in versions().items())
    mem = "\n".join(f"| {w} | {s:.1f} s | {_bytes(p)} | +{_bytes(max(0, p - start))} |"
                    for w, s, start, p in memory)
    fails = failures(rows)
    return f"""# Benchmark results

Written by `{command}` on {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')} in {seconds:.0f} s.

- Machine: {machine()}
- Versions: {vs}
- Checks: {len(fails)} failed{''.join(f'; {r["workload"]} / {r["impl"]}: {r["note"] or r["check"]}' for r in fails)}

## Results

{markdown(rows)}

{LEGEND}

## Time and peak resident memory per workload

| workload | wall time | peak RSS | over RSS at its start |
|---|---|---|---|
{mem}

## Notes

{chr(10).join('- ' + n for n in notes) or '- none'}
"""


def seed_chart(rows, path):
    """A bar chart of the seed workload's times (PNG); returns a note when it cannot be drawn."""
    rows = [r for r in rows if r["workload"] == "seed" and r["ms"] and r["case"].startswith("time per")]
    if not rows:
        return "no seed timings: chart not drawn"
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return 'matplotlib not installed (pip install -e ".[plot]"): seed chart not drawn'
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(rows) + 1.5))
    secs = [r["ms"] / 1e3 for r in rows]
    names = [r["impl"] for r in rows]
    bars = ax.barh(names[::-1], secs[::-1], color="tab:blue")
    ax.bar_label(bars, labels=[_seconds(s) for s in secs[::-1]], padding=3)
    ax.set_xscale("log")
    ax.set_xlim(min(secs) / 2, max(secs) * 4)
    ax.set_xlabel("seconds (log scale)")
    ax.set_title(f"seed workload: {rows[0]['case']}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


def progress(i, n, name, title):
    print(f"[{i}/{n}] {name}: {title} ...", file=sys.stderr, flush=True)
