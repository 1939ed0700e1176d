"""What the forward pass pushes on the value stack, block by block.

Decided after the reverse bodies are written (they decide, through
:class:`adcore.plan.values.Values`, which values are kept in registers): a kept value
defined in a loop is pushed before it is overwritten, unless the reverse pass can run it
backwards (a loop counter with a constant step, or a phi that advances by a nested loop's
trips, :mod:`adcore.plan.advances`); a block with several predecessors pushes which one
entered it.  Loops from which nothing is pushed may have their reverse count up
(:mod:`adcore.plan.loop_order`).

An innermost loop whose trip count its exit test tells before it runs
(:mod:`adcore.analysis.exit_values`), and which calls nothing but math functions, has the
room for all its pushes reserved at the end of its preheader (trips x the bytes one
iteration may push; Enzyme sizes its loop caches by the trip count too): its pushes then
store without a capacity check, so the forward loop keeps the stack's top in a register
and LLVM may vectorise it.
"""
from ..analysis.cfg import InductionVariable, step_of
from ..analysis.exit_values import exit_test
from ..reverse.value_stack import SIZES, size_of
from ..rules.scalar import is_pure_call
from .advances import availability, find_advance


def pred_type(block):
    """The integer type that records which predecessor ``block`` was entered from."""
    return "i8" if len(block.preds) < 128 else "i32"


def counters(defs, registers, header, iv):
    """``{phi: step instr}``: the kept header phis ``p = phi [init, outside], [p + C,
    latch]`` of the loop with counter ``iv`` (``defs``: the header's values in order)."""
    out = {}
    for phi in defs:
        if phi.opcode != "phi" or phi not in registers:
            continue
        step = phi.operands[phi.incoming.index(iv.latch)].defn
        if step is not None and step_of(step, phi) is not None:
            out[phi] = step
    return out


class Pushes:
    """The pushes of one gradient function (``gen``: its
    :class:`adcore.reverse.generator.AdjointGenerator`, after its reverse bodies):

    - ``inverted``: ``{phi: InductionVariable}``, kept counters the reverse runs backwards;
    - ``advanced``: ``{phi: advances.Advance}``, kept phis advancing by a nested loop's trips;
    - ``by_block``: ``{block: [(kind, value, segment)]}`` in push order, kind "pred", "reg"
      or "iv", the segment counting the calls differentiated as calls before the push;
    - ``forward_order``: the headers of counted loops whose reverse counts up;
    - ``reserves``: ``{preheader: Reserve}``, the loops whose pushes are reserved before they
      run, and ``reserved``: the blocks of those loops."""

    def __init__(self, gen):
        cfg, registers = gen.cfg, gen.values.registers
        self.inverted = {phi: InductionVariable(phi, None, iv.outside, iv.latch, step)
                         for header, iv in cfg.ivs.items()
                         for phi, step in counters(gen.defs(header), registers, header, iv).items()}
        available = availability(gen.values, self.inverted)
        self.advanced = {}
        for header in cfg.ivs:
            for phi in header.phis:
                if phi in registers and phi not in self.inverted:
                    advance = find_advance(phi, cfg, available)
                    if advance is not None:
                        self.advanced[phi] = advance
        self.by_block = {b: self._saves(gen, b) for b in cfg.rpo}
        self.forward_order = {h for h in gen.limits if self._nothing_kept_in(gen, cfg.loop_at[h])}
        self.reserves = {}
        for loop in cfg.loops:
            reserve = self._reserve(gen, loop)
            if reserve is not None:
                self.reserves[reserve.test.outside] = reserve
        self.reserved = {b for r in self.reserves.values() for b in r.test.loop.blocks}

    def _saves(self, gen, block):
        cfg = gen.cfg
        cyclic = block in cfg.cyclic
        events = []
        if len(block.preds) > 1 and block not in cfg.ivs and block not in cfg.branch_merges:
            events.append(("pred", None, 0))
        segment = 0
        for instr in gen.defs(block):
            segment += gen.is_callee(instr)
            if instr in gen.values.registers and cyclic and instr not in self.inverted \
                    and instr not in self.advanced:
                events.append(("reg", instr, segment))
        for phi, iv in self.inverted.items():
            if iv.outside is block and cyclic and phi.block not in gen.exit_tests:
                events.append(("iv", phi, segment))
        for phi, advance in self.advanced.items():
            if advance.outside is block and cyclic:
                events.append(("iv", phi, segment))
        return events

    def _nothing_kept_in(self, gen, loop):
        """No value, record or array is pushed per iteration of ``loop``."""
        latch = loop.latches[0]
        return not any(self.by_block[b] for b in loop.blocks) and latch not in gen.snapshots.at \
            and latch not in gen.replays

    def _reserve(self, gen, loop):
        """The :class:`Reserve` of ``loop`` when its pushes can be reserved before it runs
        (as in the module's docstring), else None."""
        cfg = gen.cfg
        if any(lp is not loop and lp.header in loop.blocks for lp in cfg.loops) or not _one_pass(loop):
            return None
        outside = [p for p in loop.header.preds if p not in loop.blocks]
        if len(outside) != 1 or outside[0].term.opcode != "br" or outside[0].term.succ != [loop.header]:
            return None
        test = exit_test(loop, outside[0])
        if test is None or test.counter.type != "i64":
            return None
        for block in loop.blocks:
            if block in gen.snapshots.at or block in gen.replays:
                return None
            if any(i.opcode == "call" and not is_pure_call(i) for i in block.instrs):
                return None
        events = [(kind, v, b) for b in loop.blocks for kind, v, _ in self.by_block[b]]
        types = [pred_type(b) if kind == "pred" else v.type for kind, v, b in events]
        if not types or not all(t in SIZES or t.startswith("<") for t in types):
            return None
        return Reserve(test, sum(size_of(t) for t in types))

    def per_iteration(self, snapshots, replays):
        """``(block, kind, value)`` for each push, and for each array copied at the end of an
        iteration: kind "snapshot" (``value`` the array ``(data, nitems, itemsize)``),
        "refill" (an array the reverse pass may refill instead, :mod:`adcore.plan.replays`)
        or "choice" (``value`` the :class:`adcore.plan.replays.Replay` whose choice is pushed)."""
        out = [(b, kind, v) for b, plan in self.by_block.items() for kind, v, _ in plan]
        for latch, arrays in snapshots.at.items():
            refilled = replays[latch].arrays if latch in replays else ()
            out += [(latch, "refill" if array in refilled else "snapshot", array) for array in arrays]
            if refilled:
                out.append((latch, "choice", replays[latch]))
        return out


def _one_pass(loop):
    """Whether each block of ``loop`` runs at most once an iteration: its blocks without the
    edges back to its header form no cycle (an irreducible one included)."""
    inside = set(loop.blocks)
    succ = {b: [s for s in b.succ if s in inside and s is not loop.header] for b in inside}
    entering = {b: 0 for b in inside}
    for b in inside:
        for s in succ[b]:
            entering[s] += 1
    ready = [b for b in inside if entering[b] == 0]
    seen = 0
    while ready:
        b = ready.pop()
        seen += 1
        for s in succ[b]:
            entering[s] -= 1
            if entering[s] == 0:
                ready.append(s)
    return seen == len(inside)


class Reserve:
    """The room an innermost counted loop's pushes need, reserved at the end of its
    preheader: ``test`` (its :class:`adcore.analysis.exit_values.ExitTest`) tells its trip
    count, each iteration pushes at most ``bytes`` bytes."""

    def __init__(self, test, bytes_):
        self.test, self.bytes = test, bytes_

    def emit(self, e, stack):
        """Reserve the room on ``stack`` (with the :class:`adcore.ir.writer.Emitter` ``e``,
        in the forward pass, where the primal's values have their own names)."""
        test = self.test
        last = test.end_values(e, lambda op: op.ref, {})[test.counter]
        first = test.start.ref
        span = e(f"sub i64 {last}, {first}", "span")
        trips = e(f"add i64 {e(f'sdiv i64 {span}, {test.step}')}, 1", "trips")
        e.declare("llvm.smax.i64", "declare i64 @llvm.smax.i64(i64, i64)")
        trips = e(f"call i64 @llvm.smax.i64(i64 {trips}, i64 0)")
        e.line(f"call void @ad.stack.reserve(ptr {stack}, i64 {e(f'mul i64 {trips}, {self.bytes}')})")
