"""Text output of a run: the terminal table and RESULTS.md."""
import sys

from .rows import failures, median

COLUMNS = ("implementation", "time", "IQR", "x ref", "grad/obj", "1st call", "cached", "alloc", "check")
LEGEND = """\
time: median of the samples after warm-up, per gradient (per 1000 epochs for seed; per op
for the tape's overhead); IQR: their interquartile range / the median; x ref: time / the
fastest hand-written reference of the same case; grad/obj: gradient time / the same
implementation's objective time; 1st call: first call in this process (includes compiling);
cached: bytes adcore's reverse pass cached (adcore.last_cached_bytes); alloc: peak bytes
allocated through Python/numpy during one call (tracemalloc; PyTorch's and JAX's own
allocators are invisible to it); check: error of the answer against the reference."""


def _time(r):
    return "" if median(r) is None else seconds(median(r))


def spread(stats):
    """The interquartile range relative to the median, as text ("" for fewer than 2 samples)."""
    return "" if stats is None or stats["n"] < 2 else f"{stats['iqr'] / stats['median']:.0%}"


def seconds(s):
    """A duration as text, in s, ms or us."""
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
        return (r["impl"], r["note"], "", "", "", "", "", "", r["check"])
    first = "" if r["first_call_s"] is None else seconds(r["first_call_s"])
    check = (r["check"] + ("  " + r["note"] if r["note"] else "")).strip()
    return (r["impl"], _time(r), spread(r["stats"]), _num(r["vs_ref"], ".2f"), _num(r["grad_obj"], ".2f"),
            first, _bytes(r["cached_bytes"]), _bytes(r["alloc_bytes"]), check)


def groups(rows):
    """``((workload, case), rows)`` in the order the cases first appear."""
    out = {}
    for r in rows:
        out.setdefault((r["workload"], r["case"]), []).append(r)
    return out.items()


def table(rows):
    """The terminal table: one block per (workload, case)."""
    full = [cells(r) for r in rows if not _short(r)]
    width = [max([len(c)] + [len(cs[i]) for cs in full]) for i, c in enumerate(COLUMNS[:-1])]

    def line(cs):
        return "  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                for i, (c, w) in enumerate(zip(cs, width))) + "  " + cs[-1]

    out = [line(COLUMNS), "  " + "-" * (sum(width) + 2 * len(width) + len(COLUMNS[-1]))]
    for (workload, case), block in groups(rows):
        out.append(f"{workload}: {case}")
        for r in block:
            cs = cells(r)
            out.append(f"  {cs[0]:<{width[0]}}  {cs[1]}" + (f"  [{cs[-1]}]" if cs[-1] else "")
                       if _short(r) else line(cs).rstrip())
    return "\n".join(out)


def markdown(rows):
    """The same table in Markdown."""
    out = ["| " + " | ".join(("case",) + COLUMNS) + " |", "|" + "---|" * (len(COLUMNS) + 1)]
    for (workload, case), block in groups(rows):
        for i, r in enumerate(block):
            label = f"**{workload}**: {case}" if i == 0 else ""
            out.append("| " + " | ".join((label,) + cells(r)).replace("\n", " ") + " |")
    return "\n".join(out)


def environment_lines(env):
    """The machine, thread settings and versions of a run, as Markdown list items."""
    c, t, v = env["cpu"], env["threads"], env["versions"]
    pools = ", ".join(f"{p['api']} {p['version']} {p['num_threads']} thread(s)" for p in t["pools"])
    adcore = v["adcore"]["describe"] or v["adcore"]["version"] or "?"
    peers = ", ".join(f"{k} {p or 'not installed'}" for k, p in v["peers"].items())
    mem = f", {c['memory_bytes'] / 2**30:.0f} GiB memory" if c["memory_bytes"] else ""
    load = ", ".join(f"{v:.1f} at the {k}" for k, v in env["load_average"].items() if v is not None)
    return [f"Machine: {c['model']} (LLVM: {c['llvm_name']}), {c['cores']} cores "
            f"({c['usable_cores']} usable){mem}, {env['platform']['system']} {env['platform']['release']}"
            + (f"; load average {load}" if load else ""),
            f"Threads: BLAS/OpenMP {pools or 'none loaded'}; Numba {t['numba']['num_threads']}"
            + ("" if t["torch"] is None else f"; PyTorch {t['torch']}"),
            f"Math: {env.get('math', 'libm')}; no fast-math",
            f"Versions: python {v['python']}, adcore {adcore}, "
            + ", ".join(f"{k} {v[k]}" for k in ("numpy", "scipy", "numba", "llvmlite"))
            + f"; peers: {peers}"]


def results_md(doc, notes):
    """The text of RESULTS.md for a results document (``bench.results.document``)."""
    rows, env = doc["rows"], doc["environment"]
    mem = "\n".join(f"| {w['name']} | {w['seconds']:.1f} s | {_bytes(w['rss_peak_bytes'])} | "
                    f"+{_bytes(max(0, w['rss_peak_bytes'] - (w['rss_start_bytes'] or 0)))} |"
                    for w in doc["workloads"])
    fails = failures(rows)
    sampling = doc["settings"]
    return f"""# Benchmark results

Written by `{doc['command']}` on {env['date']} in {doc['seconds']:.0f} s; {sampling['repeat']}
samples of at least {sampling['min_time'] * 1e3:g} ms per timing.

{chr(10).join('- ' + line for line in environment_lines(env))}
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


def progress(i, n, name, title):
    print(f"[{i}/{n}] {name}: {title} ...", file=sys.stderr, flush=True)
