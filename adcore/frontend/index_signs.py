"""Indices proven nonnegative, and Numba's negative-index tests on them removed.

Numba wraps a negative index around: ``a[i]`` addresses ``i + (i < 0 ? n : 0)``.  LLVM
removes the test where it can prove ``i >= 0``, but not for a counter that starts at
another counter (``for r in range(c + 1, d)``): the select then stays in the primal's
loop, keeps LLVM from seeing consecutive addresses (no vectorisation), and the reverse
pass repeats it for every shadow address.  This module proves more indices nonnegative
and replaces their ``i < 0`` tests with ``false``.

A value is nonnegative (a greatest fixed point over the function: assumed of every
integer, dropped where no rule below holds, until nothing changes; sound because each
value is computed from earlier ones) when it is

- an integer constant >= 0, or an array argument's size or shape (``sizes``);
- ``add nsw``/``mul nsw`` of nonnegatives; ``udiv``/``urem``/``sdiv``/``srem`` of a
  nonnegative; ``lshr`` by a nonzero constant; ``and`` with a nonnegative; ``zext``;
  ``sext`` of a nonnegative; ``smax`` or ``umin`` with a nonnegative; ``select``/``phi``
  of nonnegatives;
- a *counted* header phi ``p`` stepping ``p + 1`` (no flag needed): the loop has one
  latch, which goes back to the header only while a countdown ``q > 1`` (signed), where
  ``q = phi [b - s (nsw), outside], [q - 1, latch]`` and ``s`` is where ``p`` starts:
  ``p`` stays in ``[s, max(s, b - 1)]``, so it is nonnegative with ``s`` and ``b``; or
  whose latch leaves the loop when ``p + 1 == b`` and which is entered only when
  ``s < b`` (a branch into the preheader, or from it): ``p`` stays in ``[s, b)``.
  These are Numba's ``range`` loops after LLVM has rotated them.
"""
import re

from ..ir.model import Operand
from ..numba_abi import NITEMS, SHAPE

_FLAGGED = ("add", "mul")                       # nonnegative with nsw and nonnegative operands
_OF_FIRST = ("udiv", "urem", "sdiv", "srem")    # nonnegative when the dividend is (both for sdiv/srem)
_NEGATIVE_TESTS = {("slt", "0"): "false", ("sge", "0"): "true", ("sgt", "-1"): "true", ("sle", "-1"): "false"}


def array_sizes(groups, arrays):
    """The LLVM arguments holding the sizes and shapes of array arguments ``arrays``
    (``groups[k]``: argument k's flattened parameters)."""
    out = []
    for k in arrays:
        g = groups[k]
        out += [g[NITEMS]] + list(g[SHAPE:SHAPE + (len(g) - SHAPE) // 2])
    return out


def remove_negative_index_tests(func, cfg, sizes):
    """Replace every ``icmp slt i, 0`` (and its negations) on a proven-nonnegative ``i``
    by its constant; ``sizes`` are the arguments known nonnegative.  Returns how many."""
    nonneg = NonNegative(func, cfg, sizes)
    done = 0
    for instr in func.instructions():
        if instr.opcode != "icmp" or len(instr.operands) != 2:
            continue
        x, c = instr.operands
        value = _NEGATIVE_TESTS.get((instr.predicate, c.ref)) if c.is_const else None
        if value is not None and nonneg.holds(x):
            instr.text = f"{instr.ref} = icmp eq i1 {value}, true"
            instr.operands = [Operand(value, "i1"), Operand("true", "i1")]
            done += 1
    return done


class NonNegative:
    """Which integer values of ``func`` are nonnegative (see the module docstring)."""

    def __init__(self, func, cfg, sizes):
        self.sizes = set(sizes)
        self.counted = _counted_phis(cfg)
        self.known = {i for i in func.instructions() if _is_int(i.type)} | self.sizes
        changed = True
        while changed:
            changed = False
            for v in list(self.known):
                if v not in self.sizes and not self._rule(v):
                    self.known.discard(v)
                    changed = True

    def holds(self, op):
        if op.is_const:
            return _const_nonneg(op)
        return op.defn in self.known

    def _rule(self, instr):
        ops, op = instr.operands, instr.opcode
        if instr in self.counted:
            return all(self.holds(o) for o in self.counted[instr])
        if op in _FLAGGED:
            return "nsw" in instr.flags and all(map(self.holds, ops))
        if op in _OF_FIRST:
            return self.holds(ops[0]) and (op[0] == "u" or self.holds(ops[1]))
        if op == "lshr":
            return ops[1].is_const and _const_nonneg(ops[1]) and ops[1].ref != "0"
        if op == "and":
            return any(map(self.holds, ops))
        if op == "zext":
            return True
        if op == "sext":
            return self.holds(ops[0])
        if op in ("select", "phi"):
            return all(map(self.holds, ops[1:] if op == "select" else ops))
        if op == "call" and instr.callee and re.match(r"llvm\.(smax|umin)\.", instr.callee):
            return any(map(self.holds, ops))
        return False


def _counted_phis(cfg):
    """``{counter phi: the values its nonnegativity needs}`` for Numba's range loops as LLVM
    leaves them (see the module docstring)."""
    out = {}
    for loop in cfg.loops:
        header = loop.header
        outside = [b for b in header.preds if b not in loop.blocks]
        if len(loop.latches) != 1 or len(outside) != 1:
            continue
        latch, outside = loop.latches[0], outside[0]
        term = latch.term
        if term.opcode != "br" or len(term.succ) != 2 or header not in term.succ:
            continue
        back_on_true = term.succ[1] is header           # succ is (false, true)
        q = _countdown(term.operands[0], header, latch) if back_on_true else None
        q0 = q.operands[q.incoming.index(outside)].defn if q is not None else None
        counted_down = getattr(q0, "opcode", None) == "sub" and "nsw" in q0.flags
        for p in header.phis:
            if p is q or not _is_int(p.type):
                continue
            start, step = p.operands[p.incoming.index(outside)], p.operands[p.incoming.index(latch)].defn
            if not _plus_one(step, p):
                continue
            if counted_down and _same(start, q0.operands[1]):
                out[p] = (start, q0.operands[0])
            bound = _exit_bound(term.operands[0].defn, step, back_on_true)
            if bound is not None and _entered_below(header, outside, start, bound):
                out[p] = (start, bound)
    return out


def _exit_bound(test, step, back_on_true):
    """``b`` of a latch test ``step == b`` that leaves the loop (``!=`` that goes back)."""
    if getattr(test, "opcode", None) != "icmp" or test.predicate != ("ne" if back_on_true else "eq"):
        return None
    a, b = test.operands
    return b if a.defn is step else a if b.defn is step else None


def _entered_below(header, outside, start, bound):
    """True when the loop is entered only if ``start < bound``: a conditional branch into
    ``outside`` (or from it into the header) that requires it."""
    for block, dest in ((outside, header), (outside.preds[0] if len(outside.preds) == 1 else None, outside)):
        term = block.term if block is not None else None
        if term is None or term.opcode != "br" or len(term.succ) != 2 or term.succ[0] is term.succ[1] \
                or dest not in term.succ or getattr(term.operands[0].defn, "opcode", None) != "icmp":
            continue
        test = term.operands[0].defn
        less = _LESS.get((test.predicate, term.succ[1] is dest))
        if less is not None:
            low, high = test.operands[::less]
            if _same(low, start) and _same(high, bound):
                return True
    return False


_LESS = {(p, taken): order for p, taken, order in (
    ("slt", True, 1), ("ult", True, 1), ("sgt", True, -1), ("ugt", True, -1),
    ("sge", False, 1), ("uge", False, 1), ("sle", False, -1), ("ule", False, -1))}
"""(predicate of ``icmp x, y``, branch taken when it holds) -> 1 when that means x < y,
-1 when it means y < x."""


def _countdown(cond, header, latch):
    """The header phi ``q`` of ``cond = icmp sgt q, 1`` (or ``samesign ugt``) that steps
    ``q - 1`` on the latch; else None."""
    test = cond.defn
    if getattr(test, "opcode", None) != "icmp" or not test.operands[1].is_const or test.operands[1].ref != "1":
        return None
    predicate = test.predicate
    if not (predicate == "sgt" or predicate == "ugt" and "samesign" in test.flags):
        return None
    q = test.operands[0].defn
    if q is None or getattr(q, "opcode", None) != "phi" or q.block is not header or latch not in q.incoming:
        return None
    step = q.operands[q.incoming.index(latch)].defn
    ok = getattr(step, "opcode", None) == "add" and step.operands[0].defn is q and step.operands[1].ref == "-1"
    return q if ok else None


def _plus_one(step, p):
    return getattr(step, "opcode", None) == "add" and step.operands[0].defn is p and step.operands[1].ref == "1"


def _same(a, b):
    return a.defn is b.defn if not a.is_const else b.is_const and a.ref == b.ref


def _is_int(type_):
    return re.fullmatch(r"i(8|16|32|64)", type_ or "") is not None


def _const_nonneg(op):
    try:
        return int(op.ref) >= 0
    except ValueError:
        return False
