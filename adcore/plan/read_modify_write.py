"""Shadows a read-modify-write leaves as they are: the reverse of ``a[j] += v``.

The primal ``t = load p; s = t + v; store s, p`` (or ``t - v``) has the plain reverse
``d(s) += shadow[p]; shadow[p] = 0`` (the store), ``d(t) += d(s); d(v) ±= d(s)`` (the sum),
``shadow[p] += d(t)`` (the load): the shadow is reset, then its old value is added back.
When ``t`` is used by the sum alone and the sum by the store alone, ``d(t)`` is exactly what
the store read, so the shadow ends as it began: the reverse reads it and leaves it, and the
load's reverse adds nothing.  Leaving it keeps a loop such as ``qxc[r] += icf[li] * xc[c]``
free of a store into ``shadow[r]`` that the next column's reverse loads again (a memory
dependence from one column to the next, which vector code pays as failed store forwarding).

This holds only if nothing between the load and the store may write memory (a store to an
alias of ``p`` between them would read the shadow in the reverse pass, where the plain
reverse has it at 0); the reverses of loads between them only add into shadows, which
commutes with leaving ``shadow[p]``.
"""
from ..analysis.memory import MEMORY_WRITERS
from ..ir.model import is_float_type
from . import enabled

_SUMS = {"fadd": (0, 1), "fsub": (0,)}       # operands whose adjoint is the sum's own


def unchanged_shadow_load(act, store, is_pure_call):
    """The load whose shadow the reverse of ``store`` may leave unchanged (see the module
    docstring), or None.  ``act`` is the activity analysis (its ``users``, ``active`` and
    ``pun_type``); ``is_pure_call(instr)`` tells calls that write no memory.  None when the
    ``read_modify_write`` pass is off."""
    if not enabled("read_modify_write"):
        return None
    value, ptr = store.operands
    s = value.defn
    if s is None or getattr(s, "opcode", None) not in _SUMS or s.block is not store.block \
            or act.users.get(s) != [store] or not is_float_type(s.type):
        return None
    operands = [o.defn for o in s.operands]
    for k in _SUMS[s.opcode]:
        t = operands[k]
        if getattr(t, "opcode", None) == "load" and t.block is store.block \
                and t.operands[0].defn is ptr.defn and ptr.defn is not None \
                and act.users.get(t) == [s] and t.type == s.type \
                and t in act.active and s in act.active \
                and t not in act.pun_type and s not in act.pun_type \
                and _writes_nothing_between(t, store, is_pure_call):
            return t
    return None


def _writes_nothing_between(first, last, is_pure_call):
    instrs = first.block.instrs
    between = instrs[instrs.index(first) + 1:instrs.index(last)]
    return not any(i.opcode in MEMORY_WRITERS or i.opcode in ("fence", "va_arg", "invoke")
                   or (i.opcode == "call" and not is_pure_call(i)) for i in between)
