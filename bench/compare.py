"""``python -m bench --compare OLD.json NEW.json``: the ratio of each row's median time, marked
where the change is larger than the spread of the two runs (like ``pyperf compare_to``).

A change is marked when both rows have at least ``MIN_SAMPLES`` samples and their
interquartile ranges do not overlap: the new median then lies outside the spread of the old
samples and the other way round. Otherwise the ratio is shown as within the spread.
"""
from .environment import busy
from .report import groups, seconds, spread

MIN_SAMPLES = 3
ENVIRONMENT_PARTS = ("platform", "cpu", "threads", "versions")


def change(old, new):
    """``"slower"``, ``"faster"``, or None when the two rows' spreads overlap (or either has
    fewer than MIN_SAMPLES samples)."""
    a, b = old["stats"], new["stats"]
    if min(a["n"], b["n"]) < MIN_SAMPLES:
        return None
    if b["q1"] > a["q3"]:
        return "slower"
    if b["q3"] < a["q1"]:
        return "faster"
    return None


def compare_rows(old_rows, new_rows):
    """Per timed row (matched on workload, case and implementation), in the new run's order:
    ``dict(old=, new=, ratio=new/old median or None, change=)``; rows in one run only have
    the other as None and ``change`` ``"only in old"``/``"only in new"``."""
    key = lambda r: (r["workload"], r["case"], r["impl"])  # noqa: E731
    old_by_key = {key(r): r for r in old_rows if r["stats"]}
    new_keys = {key(r) for r in new_rows if r["stats"]}
    out = []
    for r in new_rows:
        if not r["stats"]:
            continue
        o = old_by_key.get(key(r))
        if o is None:
            out.append(dict(old=None, new=r, ratio=None, change="only in new"))
        else:
            out.append(dict(old=o, new=r, ratio=r["stats"]["median"] / o["stats"]["median"],
                            change=change(o, r)))
    out += [dict(old=o, new=None, ratio=None, change="only in old")
            for k, o in old_by_key.items() if k not in new_keys]
    return out


def _flat(tree, prefix=""):
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in _flat(sub, f"{prefix}{key}.").items()}
    return {prefix[:-1]: tree}


def environment_changes(old_env, new_env):
    """``(field, old, new)`` for every fact of the machine, threads or versions that differs."""
    old = _flat({p: old_env.get(p) for p in ENVIRONMENT_PARTS})
    new = _flat({p: new_env.get(p) for p in ENVIRONMENT_PARTS})
    return [(k, old.get(k), new.get(k)) for k in sorted(old.keys() | new.keys())
            if old.get(k) != new.get(k)]


def _time(r):
    if r is None:
        return "-"
    return seconds(r["stats"]["median"]) + (f" IQR {spread(r['stats'])}" if r["stats"]["n"] > 1 else "")


def _mark(c):
    if c["ratio"] is None:
        return c["change"]
    if c["change"] is None:
        return f"{c['ratio']:.2f}x (within the spread)"
    factor = c["ratio"] if c["change"] == "slower" else 1 / c["ratio"]
    return f"{c['ratio']:.2f}x  * {factor:.2f}x {c['change']}"


def _check(c):
    """A note when a row's check changed between the runs."""
    o, n = c["old"], c["new"]
    if o is None or n is None or o["ok"] == n["ok"]:
        return ""
    return f"  check: {o['check'] or o['ok']} -> {n['check'] or n['ok']}"


def _describe(label, name, doc):
    """The line naming one run, with a warning when its machine was busy."""
    env = doc["environment"]
    line = f"{label}: {name} ({doc['command']}, {env['date']})"
    load = busy(env)
    if load:
        line += (f"\n  {label} ran on a busy machine (load average up to {load:.1f} on "
                 f"{env['cpu']['usable_cores']} cores): a mark may be the load, not the code")
    return line


def text(old, new, old_name="old", new_name="new"):
    """The comparison of two results documents, as printed."""
    lines = [_describe(label, name, doc) for label, name, doc in (("old", old_name, old),
                                                                    ("new", new_name, new))]
    for field, a, b in environment_changes(old["environment"], new["environment"]):
        if field == "cpu.flags" and a and b:
            a, b = sorted(set(a) - set(b)) or "", sorted(set(b) - set(a)) or ""
        lines.append(f"  environment differs: {field}: {a} -> {b}")
    compared = compare_rows(old["rows"], new["rows"])
    rows = [c["new"] or c["old"] for c in compared]
    by_row = {id(c["new"] or c["old"]): c for c in compared}
    width = max([len(r["impl"]) for r in rows] + [14])
    lines.append(f"\n  {'implementation':<{width}}  {'old':>20}  {'new':>20}  new/old")
    for (workload, case), block in groups(rows):
        lines.append(f"{workload}: {case}")
        for r in block:
            c = by_row[id(r)]
            lines.append(f"  {r['impl']:<{width}}  {_time(c['old']):>20}  {_time(c['new']):>20}  "
                         f"{_mark(c)}{_check(c)}")
    counts = {k: sum(c["change"] == k for c in compared) for k in ("slower", "faster")}
    lines.append(f"\ntimed rows: {len(compared)}; beyond the spread (*): {counts['slower']} slower, "
                 f"{counts['faster']} faster; IQR: interquartile range / median")
    return "\n".join(lines)
