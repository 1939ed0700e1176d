"""Stack slots that only carry results out of calls differentiated as calls.

Numba passes each function it calls a return slot and an exception slot, allocas of the
caller, through which the callee only stores (:func:`write_only_parameters`).  The reverse
of such a callee never reads these parameters, so the reverse of its call is given null
for them (and its augmented forward null for their shadows).

A *call slot* of a function is an alloca of its entry block used only as such a parameter,
by loads of non-pointers and by stores of non-pointers or constants.  Its reverse needs
only the slot's shadow.  In a function differentiated as a call (whose reverse runs after
it has returned, so that its allocas otherwise move to the gradient's arena and their
addresses onto the value stack) a call slot stays on the augmented forward's stack, and
its shadow is a zeroed alloca of the reverse function's own frame.
"""


def write_only_parameters(func):
    """Positions of ``func``'s pointer parameters through which it only stores non-pointer
    or constant values (none of them is read, nor passed on)."""
    uses = func.uses()
    return frozenset(a.index for a in func.args if a.type == "ptr" and
                     all(_stores_through(i, k) for i, k in uses.get(id(a), ())))


def call_slots(gen):
    """The call slots (as above) of the function generator ``gen`` differentiates."""
    if gen.callees is None:
        return set()
    uses = gen.func.uses()
    allocas = [i for i in gen.func.entry.instrs if i.opcode == "alloca" and
               all(o.is_const and o.ref == "1" for o in i.operands)]
    return {a for a in allocas
            if uses.get(id(a)) and all(_slot_use(gen, i, k) for i, k in uses[id(a)])}


def _stores_through(instr, k):
    value = instr.operands[0]
    return instr.opcode == "store" and k == 1 and (value.type != "ptr" or value.is_const)


def _slot_use(gen, instr, k):
    if instr.opcode == "load":
        return instr.type != "ptr"
    if instr.opcode == "store":
        return _stores_through(instr, k)
    return gen.is_callee(instr) and k in gen.callees.write_only(instr.callee)
