"""Scratch arrays refilled in the reverse pass instead of snapshotted (rematerialisation).

:mod:`adcore.plan.snapshots` copies a scratch array at the end of each iteration of the loop R
that overwrites it, so that the reverse of the iteration can load it again: bytes per
iteration in proportion to the array (ADBench's GMM: n·K·d values).  When R's iteration
fills the whole array from values the reverse pass still has, the copy is not needed: the
reverse of the iteration first runs R's body once more (its *replay*), keeping only the
stores into the refilled arrays, the values they depend on and the branches, and the arrays
then hold what the snapshot would have put back.  A replay is taken only when it provably
gives the same memory, else the snapshot stays:

- *Cover*: a loop W inside R stores ``a[j]`` on every iteration (``a``'s data pointer
  indexed by W's counter ``j``, which starts at 0, steps by 1 and ends W when it reaches a
  bound ``U`` fixed during W).  Whether ``U`` elements cover the whole array
  (``U·size >= nitems·itemsize``) is checked at run time, per iteration of R: when they do
  not, the forward pass copies the array as before and the reverse pass restores it.
- *Written before read*: every load of a refilled array that the reverse pass repeats or the
  replay runs comes after W (W's header dominates it and it is outside W), or right after a
  store of the cover to the same address in the same block.
- *Same inputs*: everything else the replay reads is a value the reverse pass has at the
  start of the iteration's reverse (loop counters, values kept or recomputed), or a load of
  memory no later write may touch (:meth:`adcore.analysis.memory.Clobbers.can_reload`, which counts
  aliasing arguments); the replay calls only math functions, writes only the refilled
  arrays, and R's iteration leaves R only through its latch.

Where the replay may be taken, the forward pass still decides per iteration which is
cheaper (:meth:`Replay.snapshot_taken`): a snapshot of more than ``SNAPSHOT_MIN`` bytes (the
refilled arrays together) is copied while the call's tape holds at most ``SNAPSHOT_BUDGET``
bytes with it (a copy of a few values costs less than re-running the loop nest that filled
them, and the budget bounds the memory it takes), else the arrays are refilled; one byte per
iteration on the tape tells the reverse pass which.
"""
from ..analysis.cfg import dominates
from ..analysis.exit_values import exit_test
from ..analysis.memory import MEMORY_WRITERS
from ..analysis.pointers import UNKNOWN
from ..ir.model import Arg, rename, strip_metadata
from ..reverse.value_stack import SIZES, STACK_TYPE
from .values import PURE_OPS, is_pure_call

CONTROL = ("br", "switch", "unreachable")
SNAPSHOT_MIN = 32            # bytes: arrays this small are refilled (a copy costs more)
SNAPSHOT_BUDGET = 8 << 20    # bytes of tape up to which larger ones are copied instead


class Cover:
    """Loop ``loop`` stores element ``j`` of ``array`` (``(data, nitems, itemsize)``) for
    every ``j`` in ``[0, bound + extra)``, ``size`` bytes each, through ``store``;
    ``skips`` the edges ``(block, successor)`` of the refilling loop taken only when that
    range is empty (the guard around ``loop``: the run-time check then fails unless the
    array is empty)."""

    def __init__(self, array, loop, store, bound, extra, size, skips):
        self.array, self.loop, self.store = array, loop, store
        self.bound, self.extra, self.size, self.skips = bound, extra, size, skips

    def before(self, load, outer):
        """True when ``load`` runs, in an iteration of loop ``outer``, only after this cover
        wrote its address."""
        if load.block in self.loop.blocks:
            block = self.store.block
            return load.block is block and load.operands[0].defn is self.store.operands[1].defn \
                and block.instrs.index(self.store) < block.instrs.index(load)
        seen, stack = {outer.header}, [outer.header]
        while stack:                      # the blocks an iteration reaches without the cover
            block = stack.pop()
            if block is load.block:
                return False
            for s in block.succ:
                if s in outer.blocks and s is not self.loop.header and s not in seen \
                        and (block, s) not in self.skips:
                    seen.add(s)
                    stack.append(s)
        return True


class Replay:
    """The replay of loop ``loop``'s body that refills ``covers``' arrays; ``instrs`` the
    instructions it runs, ``inputs`` the values it takes from the reverse pass (``loop``'s
    header phis and values defined outside ``loop``)."""

    def __init__(self, loop, covers, instrs, inputs, blocks):
        self.loop, self.covers, self.instrs, self.inputs = loop, covers, instrs, inputs
        self.blocks = blocks             # the loop's blocks in reverse post-order
        self.latch = loop.latches[0]

    @property
    def arrays(self):
        return [c.array for c in self.covers]

    def condition(self, e, value_of):
        """Emit the test that every cover spans its whole array this iteration (an ``i1``);
        ``value_of(operand)`` names an operand where the code runs."""
        ok = "true"
        for c in self.covers:
            data, nitems, itemsize = c.array
            u = value_of(c.bound)
            if c.bound.type != "i64":
                u = e(f"sext {c.bound.type} {u} to i64", "u")
            if c.extra:
                u = e(f"add i64 {u}, {c.extra}", "u")
            written = e(f"mul i64 {u}, {c.size}", "wb")
            whole = e(f"mul i64 {nitems.ref}, {itemsize.ref}", "ab")
            ok = e(f"and i1 {ok}, {e(f'icmp sge i64 {written}, {whole}', 'cov')}", "cov")
        return ok

    def snapshot_taken(self, e, value_of, stack):
        """Emit the forward pass's choice for this iteration (an ``i1``): copy the arrays
        when a cover misses its array, or when they hold more than ``SNAPSHOT_MIN`` bytes
        and the tape ``stack`` (``{base, top, end}``) stays within ``SNAPSHOT_BUDGET``
        with them."""
        covered = self.condition(e, value_of)
        size = "0"
        for data, nitems, itemsize in self.arrays:
            whole = e(f"mul i64 {value_of(nitems)}, {value_of(itemsize)}", "ab")
            size = e(f"add i64 {size}, {whole}", "ab")
        topp = e(f"getelementptr inbounds {STACK_TYPE}, ptr {stack}, i32 0, i32 1", "tp")
        top = e(f"ptrtoint ptr {e(f'load ptr, ptr {topp}', 'tp')} to i64", "tp")
        base = e(f"ptrtoint ptr {e(f'load ptr, ptr {stack}', 'tp')} to i64", "tp")
        after = e(f"add i64 {e(f'sub i64 {top}, {base}', 'used')}, {size}", "used")
        fits = e(f"icmp ule i64 {after}, {SNAPSHOT_BUDGET}", "fits")
        worth = e(f"icmp ugt i64 {size}, {SNAPSHOT_MIN}", "fits")
        missed = e(f"xor i1 {covered}, true", "cov")
        cheap = e(f"and i1 {fits}, {worth}", "fits")
        return e(f"or i1 {missed}, {cheap}", "snap")

    def clone(self, e, inputs, done, hinted):
        """Emit the replay, a copy of the loop's body that ends by branching to label
        ``done``; ``inputs`` names each input value in the reverse pass; ``hinted(block,
        text)`` gives the branch ending a copied ``block`` as the copy writes it.  Returns
        the label of its first block."""
        mapping = {b.ref: e.fresh("rp") for b in self.loop.blocks}
        mapping.update({i.ref: e.fresh("rp") for i in self.instrs if i.ref})
        mapping.update({v.ref: ref for v, ref in inputs.items()})
        for block in self.blocks:
            e.label(mapping[block.ref])
            for instr in block.instrs:
                if instr is self.latch.term:
                    e.line(f"br label {done}")
                elif instr in self.instrs:
                    text = strip_metadata(rename(instr.text, mapping))
                    e.line(hinted(block, text) if instr is block.term else text)
        return mapping[self.loop.header.ref]


def find_replays(cfg, pointers, clobbers, snapshots):
    """``{latch: Replay}`` for the loops whose snapshotted arrays can be refilled instead."""
    out = {}
    for latch, arrays in snapshots.at.items():
        loop = next(lp for lp in cfg.loops if lp.latches == [latch])
        covers = [c for c in (_cover(cfg, loop, a, pointers) for a in arrays) if c is not None]
        if not covers:
            continue
        restored = [ld for ld, lp in snapshots.loop_of.items() if lp is loop]
        replay = _replay(cfg, loop, covers, restored, pointers, clobbers)
        if replay is not None:
            out[latch] = replay
    return out


def _cover(cfg, loop, array, pointers):
    """The :class:`Cover` of ``array`` in ``loop`` (a loop nested in it writing the whole
    array from element 0), or None."""
    data = array[0]
    for inner in cfg.loops:
        iv = cfg.ivs.get(inner.header)
        if inner is loop or inner.header not in loop.blocks or iv is None:
            continue
        test = exit_test(inner, iv.outside)
        if test is None or test.step != 1 or test.predicate not in ("ne", "slt", "ult"):
            continue
        start = test.counter.operands[test.counter.incoming.index(iv.outside)]
        if start.defn is not None or start.ref != "0" or not _fixed_before(cfg, test.bound, loop):
            continue
        for block in inner.blocks:
            if not dominates(cfg.idom, block, inner.latches[0]):
                continue                                   # not run on every iteration
            for store in block.instrs:
                size = _indexed_store(store, data, test.counter, pointers)
                if size is not None:
                    extra = 0 if test.on_next else 1
                    skips = _empty_range_edges(loop, test.bound) if extra == 0 else set()
                    return Cover(array, inner, store, test.bound, extra, size, skips)
    return None


_NOT_POSITIVE = {("sgt", "0"): 0, ("sge", "1"): 0, ("slt", "1"): 1, ("sle", "0"): 1}   # -> succ index


def _empty_range_edges(loop, bound):
    """The edges of ``loop`` taken when ``bound <= 0`` (``br (icmp sgt bound, 0), ...``)."""
    out = set()
    for block in loop.blocks:
        term = block.term
        cond = term.operands[0].defn if term.opcode == "br" and len(term.succ) == 2 else None
        if getattr(cond, "opcode", None) != "icmp" or cond.operands[0].defn is not bound.defn \
                or cond.operands[0].ref != bound.ref:
            continue
        side = _NOT_POSITIVE.get((cond.predicate, cond.operands[1].ref))
        if side is not None:                   # succ is (false, true), as cfg reads a br
            out.add((block, term.succ[side]))
    return out


def _indexed_store(store, data, counter, pointers):
    """The element size when ``store`` writes ``data[counter]`` (a one-index GEP of the data
    pointer over elements of the stored type), else None."""
    if store.opcode != "store" or pointers.bases(store.operands[1]) != {data}:
        return None
    gep = store.operands[1].defn
    if getattr(gep, "opcode", None) != "getelementptr" or len(gep.operands) != 2:
        return None
    base, index = gep.operands
    element = gep.element_type
    if base.defn is not data or index.defn is not counter or element != store.operands[0].type:
        return None
    return SIZES.get(element)


def _fixed_before(cfg, op, loop):
    """True when ``op`` is a constant, an argument, or defined where it dominates ``loop``'s
    latch (the forward pass has it when it copies or not)."""
    d = op.defn
    return d is None or isinstance(d, Arg) or dominates(cfg.idom, d.block, loop.latches[0])


def _replay(cfg, loop, covers, restored, pointers, clobbers):
    """The :class:`Replay` of ``loop`` refilling ``covers``' arrays, or None when it could
    differ from the forward pass (see the module's conditions)."""
    latch = loop.latches[0]
    if latch is loop.header or any(s not in loop.blocks for b in loop.blocks if b is not latch
                                   for s in b.succ):
        return None
    by_data = {c.array[0]: c for c in covers}
    refilled = frozenset(by_data)
    roots = [b.term for b in loop.blocks]
    for block in loop.blocks:
        for pos, written in clobbers.written.get(block, ()):
            if written == UNKNOWN:
                return None
            if written & refilled:
                if block.instrs[pos].opcode != "store" or not written <= refilled:
                    return None
                roots.append(block.instrs[pos])

    def read_ok(load):
        bases = pointers.bases(load.operands[0])
        if load.atomic or load.volatile or bases == UNKNOWN:
            return False
        if bases & refilled:
            return len(bases) == 1 and by_data[next(iter(bases))].before(load, loop)
        return clobbers.can_reload(load)

    if not all(read_ok(load) for load in restored if pointers.bases(load.operands[0]) != UNKNOWN
               and pointers.bases(load.operands[0]) & refilled):
        return None
    instrs, inputs, todo = set(), set(), list(roots)
    while todo:
        instr = todo.pop()
        if instr in instrs or instr in inputs:
            continue
        if instr.block is loop.header and instr.opcode == "phi":
            inputs.add(instr)
            continue
        if not _repeatable(instr, roots) or instr.opcode == "load" and not read_ok(instr):
            return None
        instrs.add(instr)
        for op in instr.operands:
            d = op.defn
            if d is None or isinstance(d, Arg):
                continue
            if d.block in loop.blocks:
                todo.append(d)
            else:
                inputs.add(d)
    return Replay(loop, covers, instrs, inputs, [b for b in cfg.rpo if b in loop.blocks])


def _repeatable(instr, roots):
    """True for what a replay may run: arithmetic, phis, math calls, loads, branches and
    the stores into refilled arrays."""
    op = instr.opcode
    if op == "store" or op in MEMORY_WRITERS:
        return instr in roots
    if op == "call":
        return is_pure_call(instr)
    return op in PURE_OPS or op in ("phi", "load") or op in CONTROL
