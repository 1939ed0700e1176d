"""A call differentiated as a call (its callee's pair: :mod:`adcore.reverse.callees`), at one
call site of a gradient function.

The site's *activity pattern* is which of its float arguments are varied, which of its
pointer arguments point into shadowed memory, and whether its float result is active.
The forward pass calls the callee's augmented forward for that pattern (the primal
arguments, then the shadows of the shadowed pointers, then the value stacks); it returns
what the callee returns (Numba's status, or a C function's value) and leaves on the value
stack what the callee's reverse needs.  The reverse pass calls the callee's reverse with
the same arguments (and the adjoint of an active result); it pops that tape and returns
the adjoints of the varied float arguments, which are added to theirs.  Parameters the
callee only stores through (its return and exception slots) are given as null to its
reverse, their shadows as null to its augmented forward
(:mod:`adcore.reverse.call_slots`).  A site with no activity at all calls the primal
function and has no reverse.
"""
from ..ir.model import FLOAT_TYPES
from .value_stack import FRAME_STACKS

STACKS = ", ".join(f"ptr {s}" for s in FRAME_STACKS)


class CallSite:
    """The activity pattern of call ``instr`` in generator ``gen`` and the generated pair
    (``gen.callees.request``) that differentiates it, or None when nothing is active."""

    def __init__(self, gen, instr):
        self.instr = instr
        ops = instr.operands
        check_arguments(gen, instr)
        self.active = tuple(k for k, o in enumerate(ops)
                            if o.type in FLOAT_TYPES and o.defn in gen.act.varied)
        self.shadowed = tuple(k for k, o in enumerate(ops) if o.type == "ptr" and gen.memory.is_shadowed(o))
        self.ret_active = instr.type in FLOAT_TYPES and instr in gen.act.active
        self.pair = None
        if self.active or self.shadowed or self.ret_active:
            self.pair = gen.callees.request(instr.callee, self.active, self.shadowed, self.ret_active)

    def forward(self, gen):
        """The forward pass's call: the augmented forward with the shadows of the pointers."""
        instr = self.instr
        if self.pair is None:
            return gen.copy_text(instr)
        write_only = gen.callees.write_only(instr.callee)
        args = [f"{o.type} {o.ref}" for o in instr.operands]
        args += [f"ptr {'null' if k in write_only else gen.forward_shadow(instr, instr.operands[k])}"
                 for k in self.shadowed]
        call = f"call {instr.type} @{self.pair.augmented}({', '.join(args)}, {STACKS})"
        return f"{instr.ref} = {call}" if instr.ref else call

    def reverse(self, gen):
        """The reverse pass's call of the callee's reverse; adds the adjoints it returns."""
        if self.pair is None:
            return
        instr, e, values = self.instr, gen.e, gen.values
        write_only = gen.callees.write_only(instr.callee)
        args = [f"{o.type} {'null' if k in write_only else values.materialise(o)}"
                for k, o in enumerate(instr.operands)]
        args += [f"ptr {gen.shadow(instr.operands[k])}" for k in self.shadowed]
        if self.ret_active:
            args.append(f"{instr.type} {gen.take_adjoint(instr)}")
        call = f"call {self.pair.adjoint_type} @{self.pair.reverse}({', '.join(args)}, {STACKS})"
        if not self.active:
            e.line(call)
            return
        result = e(call, "dargs")
        for j, k in enumerate(self.active):
            o = instr.operands[k]
            if o.defn in gen.act.active:
                gen.accumulate(o.defn, e(f"extractvalue {self.pair.adjoint_type} {result}, {j}"))


def check_arguments(gen, instr):
    """Refuse a call differentiated as a call (in reverse or forward mode) that passes a
    vector, struct or array value."""
    for o in instr.operands:
        if o.type.startswith("<") or o.type.startswith("{") or o.type.startswith("["):
            raise gen.unsupported(instr, f"an argument of type {o.type} to a function "
                                         f"differentiated as a call")
