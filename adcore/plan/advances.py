"""Header phis that advance by what a nested counted loop adds: run backwards by the reverse
pass instead of kept per iteration.

A loop over a packed triangle (ADBench's GMM: ``li`` starts each column where the last one
ended) has, after LLVM's loop rotation,

    h = phi [init, outside], [x, latch]                  header of loop L
    br i1 cond, ...                                      block S: skip L2, or enter it
    g = phi [h, L2's preheader], [g + t, L2's latch]     inner loop L2 (its exit block E)
    x = phi [h, S], [y, E]                               y = g + t (or g) of L2's last trip

so ``x - h`` is ``t`` times L2's trips, or zero when ``cond`` skipped L2.  When ``cond`` and
L2's trip count (from its exit test, :mod:`adcore.analysis.exit_values`) depend only on L's header,
L's counters and values fixed during L, the reverse pass recomputes them for the previous
iteration once L's counters have run back, and takes ``h`` back from the ``h`` of the
iteration after (which is that iteration's ``x``): ``h = x - delta``.  The forward pass
then keeps ``h`` once per run of L, not once per iteration.
"""
from ..analysis.exit_values import exit_test, step_constant
from ..ir.model import Arg


class Advance:
    """How ``phi`` (a header phi of a loop entered from ``outside``) runs backwards:
    ``runs`` the condition that enters the inner loop (``enters_when`` its value then),
    ``test`` the inner loop's :class:`adcore.analysis.exit_values.ExitTest`, ``counter`` its phi
    started at ``phi`` and ``step`` that phi's step instruction, ``plus_step`` whether the
    latch value is the counter after its step."""

    def __init__(self, phi, outside, runs, enters_when, test, counter, step, plus_step):
        self.phi, self.outside = phi, outside
        self.runs, self.enters_when, self.test = runs, enters_when, test
        self.counter, self.step, self.plus_step = counter, step, plus_step

    def previous(self, emit, value_of, now):
        """Emit the value ``phi`` had one iteration earlier, given its value ``now``;
        ``value_of`` names operands as of that earlier iteration."""
        t = self.phi.type
        relative = lambda op: "0" if op.defn is self.phi else value_of(op)      # noqa: E731
        delta = self.test.end_values(emit, relative, {self.counter: self.step})[self.counter]
        if self.plus_step:
            delta = emit(f"add {t} {delta}, {step_constant(self.step, self.counter)[0]}", "delta")
        cond = value_of(self.runs)
        if not self.enters_when:
            cond = emit(f"xor i1 {cond}, true", "enters")
        return emit(f"sub {t} {now}, {emit(f'select i1 {cond}, {t} {delta}, {t} 0', 'advance')}", "hprev")


def find_advance(phi, cfg, available):
    """The :class:`Advance` of header phi ``phi``, or None.  ``available(op, loop)`` tells
    whether the reverse pass can name ``op`` at the end of an iteration of ``loop`` (once
    its counters ran back) without keeping anything new."""
    header = phi.block
    iv, loop = cfg.ivs.get(header), cfg.loop_at.get(header)
    if iv is None or not phi.type.startswith("i") or len(phi.operands) != 2:
        return None
    x = phi.operands[phi.incoming.index(iv.latch)].defn
    if getattr(x, "opcode", None) != "phi" or len(x.operands) != 2 or x.block not in loop.blocks:
        return None
    skip = [k for k, op in enumerate(x.operands) if op.defn is phi]
    if len(skip) != 1:
        return None
    s, e = x.incoming[skip[0]], x.incoming[1 - skip[0]]
    y = x.operands[1 - skip[0]].defn
    term = s.term
    if term is None or term.opcode != "br" or len(term.succ) != 2 or x.block not in term.succ:
        return None
    false_dest, true_dest = term.succ
    enter = true_dest if false_dest is x.block else false_dest
    inner = next((lp for lp in cfg.loops if lp.header in cfg.ivs and cfg.ivs[lp.header].outside is enter
                  and lp.header in loop.blocks and lp is not loop), None)
    if inner is None or enter.preds != [s] or e.succ != [x.block] or \
            not any(b in inner.blocks for b in e.preds):
        return None
    counter = next((c for c in inner.header.phis if enter in c.incoming
                    and c.operands[c.incoming.index(enter)].defn is phi), None)
    if counter is None or len(counter.operands) != 2:
        return None
    step = counter.operands[1 - counter.incoming.index(enter)].defn
    if getattr(y, "opcode", None) == "phi" and y.block is e and len(y.operands) == 1:
        y = y.operands[0].defn
    constant = step_constant(step, counter) if step is not None else None
    if y is not step and y is not counter or constant is None or constant[1] is not None:
        return None
    test = exit_test(inner, enter)
    if test is None or test.counter is counter:
        return None
    needed = [term.operands[0], test.bound, test.counter.operands[test.counter.incoming.index(enter)]]
    if not all(available(op, loop) for op in needed):
        return None
    return Advance(phi, iv.outside, term.operands[0], enter is true_dest, test, counter, step,
                   y is step)


def availability(values, inverted):
    """``available(op, loop)`` for :func:`find_advance`, from the reverse pass's
    :class:`adcore.plan.values.Values` and the loop counters it runs backwards (``inverted``)."""
    def available(op, loop):
        d = op.defn
        if d is None or isinstance(d, Arg):
            return True
        inside = d.block in loop.blocks
        if d in inverted:                         # run back already, or fixed during ``loop``
            return not inside or d.block is loop.header
        if inside and (d.block is not loop.header or d.opcode == "phi") or d.opcode == "load":
            return False
        if values.recomputable(d) and not values.cheaper_to_keep(d):
            return all(available(o, loop) for o in d.operands)
        return d in values.registers
    return available
