"""Scratch memory restored per loop iteration instead of caching each of its loads.

A kernel that, like hand-written C, reuses a scratch array for every iteration of a loop
(fills it, then reads it in nested loops) makes each read a load the reverse pass cannot
repeat: the next iteration overwrites the memory.  Caching every such load costs bytes per
iteration of the *innermost* loop (ADBench's GMM: n·K·d² values).  Instead the forward pass
copies the array once at the end of each iteration of the loop that overwrites it (the
*snapshot*, taken just before the latch branches back), and the reverse of that iteration
starts by copying it back: every load of the array in the iteration that no later write of
the iteration can clobber is then loaded again, as if the memory had never changed.

A load qualifies for loop ``R`` when, from the load to the end of ``R``'s iteration, nothing
may write the array and the iteration cannot leave ``R`` except through its latch.  The
outermost such loop is chosen (fewest snapshots); the array is snapshotted there only when
it is written in ``R`` and some qualifying load the reverse pass needs sits in a loop nested
in ``R`` (else caching the loads costs less than copying the array).  At worst (an iteration
that writes a large array and reads a few of its elements) a snapshot costs bytes in
proportion to the writes the primal makes anyway, as a tape would.  Only contiguous array
arguments of a kernel whose arrays are distinct are snapshotted (their size is known at
every point: ``nitems · itemsize``).  After the reverse pass each snapshotted array gets its
final forward contents back, so the caller sees the primal's memory.  Where the iteration
refills the array from values the reverse pass still has, :mod:`adcore.plan.replays` runs the
fill again in the reverse pass instead of copying the array, where a copy costs more (a few
bytes) or the tape has grown past its budget.
"""
from ..analysis.pointers import UNKNOWN
from . import enabled


class Snapshots:
    """For one gradient function: ``at[latch]`` the array arguments (data pointer,
    ``nitems``, ``itemsize`` :class:`adcore.ir.model.Arg`) copied at the end of each iteration of
    the loop with that latch; ``loop_of[load]`` the loop whose snapshot makes ``load``
    repeatable in the reverse pass."""

    def __init__(self, func, cfg, pointers, clobbers, active, extents, distinct):
        self.cfg, self.clobbers = cfg, clobbers
        self.at, self.loop_of = {}, {}
        if not distinct or not extents or not enabled("snapshots"):
            return
        needed = _needed_loads(func, active)
        candidates = {}
        for load in needed:
            if load.block not in cfg.cyclic or clobbers.can_reload(load):
                continue
            bases = pointers.bases(load.operands[0])
            if bases == UNKNOWN or len(bases) != 1 or next(iter(bases)) not in extents:
                continue
            base = next(iter(bases))
            loop = self._outermost_loop(load, base)
            if loop is not None:
                candidates.setdefault((loop, base), []).append(load)
        for (loop, base), loads in candidates.items():
            if any(self._nested_in(load.block, loop) for load in loads):
                self.at.setdefault(loop.latches[0], []).append((base, *extents[base]))
                for load in loads:
                    self.loop_of[load] = loop

    def bases(self):
        """Every snapshotted array, once: ``(data, nitems, itemsize)``."""
        out = []
        for arrays in self.at.values():
            out += [a for a in arrays if a not in out]
        return out

    def _outermost_loop(self, load, base):
        loops = sorted((lp for lp in self.cfg.loops if load.block in lp.blocks),
                       key=lambda lp: -len(lp.blocks))
        return next((lp for lp in loops if self._qualifies(load, base, lp)), None)

    def _qualifies(self, load, base, loop):
        """Nothing may write ``base`` from ``load`` to the end of ``loop``'s iteration, the
        iteration leaves ``loop`` only through its single latch, and ``loop`` writes
        ``base``."""
        if len(loop.latches) != 1 or not self._writes(loop.blocks, base):
            return False
        latch, start = loop.latches[0], load.block
        pos = start.instrs.index(load)
        if any(self._hits(ws, base) for p, ws in self.clobbers.written.get(start, ()) if p > pos):
            return False
        seen, stack = set(), [start]
        while stack:
            block = stack.pop()
            if block is not latch and any(s not in loop.blocks for s in block.succ):
                return False
            for s in block.succ:
                if s in loop.blocks and s is not loop.header and s not in seen:
                    seen.add(s)
                    stack.append(s)
        return not self._writes(seen, base)

    def _writes(self, blocks, base):
        return any(self._hits(ws, base) for b in blocks for _, ws in self.clobbers.written.get(b, ()))

    @staticmethod
    def _hits(written, base):
        return written == UNKNOWN or base in written

    def _nested_in(self, block, loop):
        return any(lp is not loop and block in lp.blocks and lp.header in loop.blocks
                   for lp in self.cfg.loops)


def _needed_loads(func, active):
    """Loads whose value an active instruction uses (the reverse pass needs them)."""
    out = {}
    for instr in func.instructions():
        if instr in active:
            out.update((o.defn, None) for o in instr.operands if getattr(o.defn, "opcode", None) == "load")
    return list(out)
