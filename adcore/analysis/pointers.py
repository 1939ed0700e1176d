"""Pointer-base analysis: which objects each pointer value may point into.

Every pointer is traced through GEPs, casts, phis, selects, stack slots, the value stack
of a gradient read back by ``hvp`` (a pointer popped may be any pushed) and the pointer
fields of Numba's array structs to the set of objects it may point into: arguments,
allocations (the NRT call or alloca that made them), meminfo headers.  ``UNKNOWN`` when
it cannot be told; ``NOWHERE`` (the empty set) for constants, null and globals.
"""
import re

from ..ir.model import Arg
from ..known_functions import ALLOCATORS, MEMINFO_DATA_READERS, RAW_ALLOCATORS

UNKNOWN = "unknown"
NOWHERE = frozenset()

PURE_CASTS = ("bitcast", "addrspacecast")
PUSH_POINTER, POP_POINTER = "adg.push.ptr", "adg.pop.ptr"     # a gradient's value stack in hvp


class MemInfo:
    """The base of a pointer to the Numba meminfo header of allocation ``alloc``
    (the array data itself has the allocation call as its base)."""

    def __init__(self, alloc):
        self.alloc = alloc


def is_allocation(base):
    """Heap allocations (NRT calls) and stack allocations (allocas)."""
    return getattr(base, "callee", None) in ALLOCATORS + RAW_ALLOCATORS \
        or getattr(base, "opcode", None) == "alloca"


def is_heap_allocation(base):
    return is_allocation(base) and getattr(base, "opcode", None) != "alloca"


def stack_slot(op):
    """``(alloca, byte offset)`` when pointer ``op`` is an alloca or a constant byte offset
    into one (Numba keeps array structs there when they escape to C helpers), else None."""
    d = op.defn
    if d is None or isinstance(d, Arg):
        return None
    if d.opcode == "alloca":
        return d, 0
    if d.opcode == "getelementptr" and len(d.operands) == 2 and d.operands[1].is_const \
            and d.element_type == "i8" and getattr(d.operands[0].defn, "opcode", None) == "alloca":
        return d.operands[0].defn, int(d.operands[1].ref)
    return None


def return_slot(op, retptr):
    """The byte offset into the return slot ``retptr`` that pointer ``op`` addresses, or None."""
    d = op.defn
    if d is retptr:
        return 0
    if getattr(d, "opcode", None) == "getelementptr" and len(d.operands) == 2 \
            and d.operands[0].defn is retptr and d.operands[1].is_const and d.element_type == "i8":
        return int(d.operands[1].ref)
    return None


def aggregate_index(text):
    """The first index of an extractvalue/insertvalue (``..., 4`` or ``..., 5, 0`` -> 4)."""
    return int(re.search(r",\s*([0-9]+)(?:\s*,\s*[0-9]+)*\s*$", text).group(1))


def _stack_key(op):
    return op.defn if op.defn is not None else op.ref


def join(sets):
    """The union of base sets, ``UNKNOWN`` if any is."""
    if any(s == UNKNOWN for s in sets):
        return UNKNOWN
    return frozenset().union(*sets)


class PointerBases:
    """The bases of every pointer value of ``func`` (a fixed point over its instructions)
    and of the pointer fields of its struct values."""

    def __init__(self, func):
        self.func = func
        self.base = {a: frozenset([a]) for a in func.args if a.type == "ptr"}
        self.fields = {}                 # aggregate value -> {top-level index: bases}
        self._meminfo = {}
        self._slot_values = {}           # pointers stored in stack slots, by slot
        self._pushed = {}                # pointers pushed on a gradient's value stack, by stack
        for instr in func.instructions():
            if instr.opcode == "store" and instr.operands[0].type == "ptr":
                slot = stack_slot(instr.operands[1])
                if slot is not None:
                    self._slot_values.setdefault(slot, []).append(instr.operands[0])
            elif instr.opcode == "call" and instr.callee == PUSH_POINTER:
                self._pushed.setdefault(_stack_key(instr.operands[0]), []).append(instr.operands[1])
        changed = True
        while changed:
            changed = False
            for instr in func.instructions():
                if instr.type.startswith("{") and self._track_aggregate(instr):
                    changed = True
                if instr.type == "ptr" and self._update(instr):
                    changed = True

    def bases(self, op):
        """The objects pointer operand ``op`` may point into (a frozenset), or UNKNOWN."""
        return self.base.get(op.defn, NOWHERE)   # pointers into nothing traceable are not stored

    def aggregate_bases(self, value):
        """``{field index: bases}`` of the pointer fields of struct value ``value``."""
        return self.fields.get(value, {})

    # -- the fixed point ------------------------------------------------------------------
    def _of(self, op):
        """The bases known so far for an operand; None while its definition has none yet."""
        if op.defn is None:
            return NOWHERE
        if isinstance(op.defn, Arg) or op.defn.type != "ptr":
            return self.base.get(op.defn, NOWHERE)
        return self.base.get(op.defn)

    def _join_known(self, ops):
        known = [b for b in (self._of(o) for o in ops) if b is not None]
        return join(known) if known else None

    def _new_bases(self, instr):
        """The bases of pointer ``instr`` from what is known of its operands (None: not yet)."""
        op = instr.opcode
        first = self._of(instr.operands[0]) if instr.operands else UNKNOWN
        reads_data = op == "load" or op == "call" and instr.callee in MEMINFO_DATA_READERS
        if op in ("getelementptr",) + PURE_CASTS:
            return first
        if op == "phi":
            return self._join_known(instr.operands)
        if op == "select":
            return self._join_known(instr.operands[1:])
        if op == "call" and instr.callee in ALLOCATORS:
            return frozenset([self._meminfo.setdefault(instr, MemInfo(instr))])
        if op == "call" and instr.callee in RAW_ALLOCATORS or op == "alloca":
            return frozenset([instr])
        if reads_data and first is None:
            return None                  # the address is not traced yet
        if reads_data and first != UNKNOWN and first and all(isinstance(b, MemInfo) for b in first):
            return frozenset(b.alloc for b in first)
        if op == "extractvalue":
            if instr.operands[0].defn is None:
                return NOWHERE
            return self.fields.get(instr.operands[0].defn, {}).get(aggregate_index(instr.text))
        if op == "load" and stack_slot(instr.operands[0]) in self._slot_values:
            return self._join_known(self._slot_values[stack_slot(instr.operands[0])])
        if op == "call" and instr.callee == POP_POINTER:
            return self._join_known(self._pushed.get(_stack_key(instr.operands[0]), []))
        return UNKNOWN

    def _update(self, instr):
        new = self._new_bases(instr)
        if new is None:
            return False
        old = self.base.get(instr)
        new = new if old is None else join([old, new])
        if new == old:
            return False
        self.base[instr] = new
        return True

    def _track_aggregate(self, instr):
        """Pointer fields of struct values (Numba's array structs built with insertvalue and
        merged by phis); returns True when something new was learnt."""
        op, known = instr.opcode, self.fields.get(instr, {})
        if op == "insertvalue":
            agg, value = instr.operands[0], instr.operands[1]
            new = dict(self.fields.get(agg.defn, {})) if agg.defn is not None else {}
            if value.type == "ptr" and self._of(value) is not None:
                new[aggregate_index(instr.text)] = self._of(value)
        elif op in ("phi", "freeze", "select"):
            new = {}
            for o in (instr.operands[1:] if op == "select" else instr.operands):
                for k, b in (self.fields.get(o.defn, {}) if o.defn is not None else {}).items():
                    new[k] = b if k not in new else join([new[k], b])
        else:
            return False
        for k, b in known.items():
            new[k] = b if k not in new else join([new[k], b])
        if new != known:
            self.fields[instr] = new
            return True
        return False
