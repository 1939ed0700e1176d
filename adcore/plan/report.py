"""A researcher's view of the save-or-recompute decision: what the reverse pass caches per
iteration of each loop (``adcore.cache_report(f, *args)``)."""
import re

from .replays import SNAPSHOT_BUDGET, SNAPSHOT_MIN
from ..reverse import value_stack as runtime
from ..rules.scalar import math_name


class CachedItem:
    """One thing the forward pass pushes each iteration of a loop: ``what`` (in words),
    ``type`` (LLVM), ``bytes`` per iteration (a string for a snapshot: ``n·size``, its nitems
    times itemsize; ``0|n·size`` for an array refilled or copied, as the forward pass chooses) and
    the source ``line`` it comes from, when known."""

    def __init__(self, what, type_, bytes_, line):
        self.what, self.type, self.bytes, self.line = what, type_, bytes_, line

    def __repr__(self):
        where = f" (line {self.line})" if self.line else ""
        return f"{self.bytes!s:>6} B  {self.type:<7} {self.what}{where}"


class LoopCache:
    """The items pushed per iteration of one loop (``line``: its source line; ``depth``:
    1 for an outermost loop)."""

    def __init__(self, line, depth):
        self.line, self.depth, self.items = line, depth, []

    @property
    def scalar_bytes(self):
        """Bytes per iteration of the scalar items (snapshots excluded)."""
        return sum(i.bytes for i in self.items if isinstance(i.bytes, int))

    @property
    def snapshots(self):
        return [i for i in self.items if i.type == "array"]

    @property
    def refills(self):
        """The arrays refilled in the reverse pass instead of snapshotted."""
        return [i for i in self.items if i.type == "refill"]


class CacheReport:
    """Per loop, what the reverse pass of ``function`` caches each iteration, and the loops
    whose reverse counts up (:mod:`adcore.plan.loop_order`); ``str()`` is a table."""

    def __init__(self, function, loops, upward=(), parallel=()):
        self.function, self.loops = function, loops
        self.upward = list(upward)       # source lines (or None) of loops reversed counting up
        self.parallel = list(parallel)   # how each parallel loop's reverse runs, and why

    def __str__(self):
        out = [f"cached by the reverse pass of {self.function}, per loop iteration:"]
        if not self.loops:
            out.append("  nothing inside loops (only values outside loops, once per call)")
        if self.upward:
            where = ", ".join(f"line {line}" if line else "#?" for line in self.upward)
            out.append(f"  reversed counting up, their iterations independent: {len(self.upward)} "
                       f"loop(s) ({where})")
        out += [f"  {line}" for line in self.parallel]
        for k, loop in enumerate(self.loops, 1):
            where = f"at line {loop.line}" if loop.line else f"#{k}"
            out.append(f"  loop {where} (depth {loop.depth}): "
                       f"{loop.scalar_bytes} B of values per iteration")
            out += [f"    {item!r}" for item in loop.items]
        return "\n".join(out)


def build_report(generator):
    """The :class:`CacheReport` of a built :class:`adcore.reverse.generator.AdjointGenerator`."""
    cfg = generator.cfg
    loops = {}
    for block, kind, value in generator.pushes.per_iteration(generator.snapshots, generator.replays):
        owner = [lp for lp in cfg.loops if block in lp.blocks]
        if not owner:
            continue
        loop = min(owner, key=lambda lp: len(lp.blocks))
        if loop not in loops:
            loops[loop] = LoopCache(_line(loop.header), len(owner))
        loops[loop].items.append(_item(kind, value, block))
    order = {b: k for k, b in enumerate(cfg.rpo)}
    upward = [_line(h) for h in sorted(generator.pushes.forward_order, key=order.get)]
    return CacheReport(generator.spec.pyname,
                       [loops[lp] for lp in sorted(loops, key=lambda lp: order[lp.header])], upward,
                       getattr(generator, "parallel_loops", ()))


def _item(kind, value, block):
    if kind == "snapshot":
        data = value[0]
        return CachedItem(f"snapshot of array {_variable(data.name) or data.name} (restored in "
                          f"the reverse pass instead of caching its loads)", "array", "n·size",
                          _line(block))
    if kind == "refill":
        data = value[0]
        return CachedItem(f"array {_variable(data.name) or data.name} refilled in the reverse pass, or "
                          f"copied where its fill misses part of it, or while the tape stays within "
                          f"{SNAPSHOT_BUDGET >> 20} MiB with refilled arrays of over {SNAPSHOT_MIN} B",
                          "refill", "0|n·size", _line(block))
    if kind == "choice":
        return CachedItem("whether the iteration's refilled arrays were copied instead", "i8", 1,
                          _line(block))
    if kind == "pred":
        return CachedItem("which predecessor entered a block", "i8", 1, _line(block))
    name = _variable(value.name or "")
    what = {"iv": "a loop counter's start", "reg": f"{value.opcode}"}[kind]
    if kind == "reg" and value.opcode == "call":
        what += f" of {math_name(value.callee) or value.callee}"
    if name:
        what += f" of {name}"
    return CachedItem(what, value.type, runtime.kept_bytes(value.type), _line(value))


def _variable(llvm_name):
    """The Python variable in a Numba value name (``li.3.2873.us`` -> ``li``,
    ``arg.xc.4`` -> ``xc``), if any."""
    m = re.match(r"(?:arg\.)?([A-Za-z_][A-Za-z0-9_]*)", llvm_name)
    return m.group(1) if m else None


def _line(where):
    """The source line of an instruction or block (its first located instruction)."""
    loc = getattr(where, "location", None)
    if loc is None and hasattr(where, "instrs"):
        loc = next((i.location for i in where.instrs if i.location), None)
    return loc[1] if loc else None
