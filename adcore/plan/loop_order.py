"""Innermost loops whose reverse may run its iterations in the forward order.

The reverse of a loop runs its counter down: a loop over points ``i`` becomes, once LLVM
vectorises it, vector loads of consecutive elements each followed by a reversal of its lanes
(ADBench's GMM written across points: the reverse of ``z[i] += l * (xt[c, i] - mu)`` spent
five times the forward pass's time at d = 64). When the iterations do not depend on one
another, their reverses commute, and the reverse pass may count up instead. A loop qualifies
(:func:`commuting`) when it is innermost; its header's only phi is its counter, starting at a
constant or an argument (no reduction or recurrence is carried); it has no branch but its
exit test and calls only math functions; every write in it stores a ``T`` through ``gep T,
base, counter`` with ``base`` fixed in the loop, and every other access to memory such a store may
alias is the same address and type (a read-modify-write of the same element); and nothing of it but
the counter is used after it (the adjoint of the last iteration's value, or a branch on it,
would go to the first). The reverse of each iteration then touches its own elements, and
what it adds into shared adjoints (of values fixed in the loop, of read-only memory) are
sums, whose order adcore already leaves free (``reassoc``). The generator also requires that
nothing is pushed per iteration of the loop (its pops would come out in the wrong order) and
no snapshot or replay sits at its latch.
"""
from ..analysis.memory import MEMORY_WRITERS, is_memory_intrinsic
from ..analysis.pointers import UNKNOWN
from ..ir.model import Arg, gep_element_type
from . import enabled
from .values import is_pure_call


def commuting(cfg, loop, iv, pointers, distinct_arrays, data_args):
    """True when the iterations of ``loop`` (counter ``iv``) are independent, as above
    (False when the ``loop_order`` pass is off)."""
    if not enabled("loop_order"):
        return False
    if any(lp is not loop and lp.header in loop.blocks for lp in cfg.loops):
        return False
    if [p for p in loop.header.phis] != [iv.phi] or not _fixed(iv.init):
        return False
    if sum(1 for b in loop.blocks for s in b.succ if s not in loop.blocks) != 1:
        return False
    stores, stored, accesses, loaded = [], [], [], []
    for block in loop.blocks:
        if block is not loop.header and block.phis:
            return False
        if len([s for s in block.succ if s in loop.blocks]) > 1:
            return False
        for instr in block.instrs:
            if instr.opcode == "store":
                stores.append(instr.operands[1])
                stored.append(instr.operands[0].type)
            elif instr.opcode in MEMORY_WRITERS or is_memory_intrinsic(instr):
                return False
            elif instr.opcode == "call" and not is_pure_call(instr):
                return False
            elif instr.opcode == "load":
                accesses.append(instr.operands[0])
                loaded.append(instr.type)
    if not all(_per_iteration(p, t, iv.phi, loop) for p, t in zip(stores, stored)) or _used_after(cfg, loop, iv):
        return False
    for s, t in zip(stores, stored):
        for p, u in zip(accesses + stores, loaded + stored):
            if p is not s and _may_alias(pointers, s, p, distinct_arrays, data_args) \
                    and not (_same_address(s, p) and u == t):
                return False
    return True


def _used_after(cfg, loop, iv):
    """Some value of ``loop`` but its counter and the counter's step is used outside it (the
    last iteration's value: its adjoint, or a branch taken on it, belongs to that iteration)."""
    counting = {iv.phi, iv.phi.operands[iv.phi.incoming.index(iv.latch)].defn}
    for block in cfg.rpo:
        if block in loop.blocks:
            continue
        for instr in block.instrs:
            for op in instr.operands:
                d = op.defn
                if getattr(d, "block", None) in loop.blocks and d not in counting:
                    return True
    return False


def _fixed(op):
    return op.defn is None or isinstance(op.defn, Arg)


def _per_iteration(ptr, stored, counter, loop):
    """``ptr`` is ``gep T, base, counter`` with ``base`` defined outside ``loop`` and ``T``
    the ``stored`` type (a wider store would reach the next iteration's element)."""
    gep = ptr.defn
    if getattr(gep, "opcode", None) != "getelementptr" or len(gep.operands) != 2 or \
            gep_element_type(gep).strip() != stored:
        return False
    base, index = gep.operands
    return index.defn is counter and (base.defn is None or isinstance(base.defn, Arg)
                                      or base.defn.block not in loop.blocks)


def _may_alias(pointers, a, b, distinct_arrays, data_args):
    x, y = pointers.bases(a), pointers.bases(b)
    if x == UNKNOWN or y == UNKNOWN or x & y:
        return True
    return not distinct_arrays and bool(x & data_args) and bool(y & data_args)


def _same_address(a, b):
    """Both pointers are the same ``gep`` (one instruction, or two with the same operands
    and text)."""
    if a.defn is b.defn:
        return True
    ga, gb = a.defn, b.defn
    if getattr(ga, "opcode", None) != "getelementptr" or getattr(gb, "opcode", None) != "getelementptr":
        return False
    same_ops = [(o.defn, o.ref) for o in ga.operands] == [(o.defn, o.ref) for o in gb.operands]
    return same_ops and ga.text.split("=", 1)[1] == gb.text.split("=", 1)[1]
