"""Derivatives the forward pass computes and keeps: ``y = sin(x)`` inside a loop whose
operand ``x`` the reverse pass could only have from the value stack (a load of memory
written before the reverse runs, a phi, a call that is not pure).

Kept as it is, ``x`` costs a push and a pop per iteration and the reverse pass then calls
``cos(x)`` one element at a time (its loop adds into shadows at neighbouring elements,
which LLVM does not vectorise).  Computing ``cos(x)`` in the forward pass instead, next to
``sin(x)`` in a loop LLVM vectorises, and keeping that, costs the same push and pop and
moves the call into vector code (JAX keeps such residuals from its linearisation too).
The functions are those of :data:`adcore.rules.scalar.DERIVATIVE_CALLS`.  The derivative is
kept only where nothing else needs ``x`` in the reverse pass: no rule of another user of
``x``, nor of a user of ``y`` (the reverse would compute ``y`` again from ``x``), reads it,
and those users are arithmetic, stores or phis (a comparison or a call might need ``x``
again); otherwise keeping it would add bytes to those ``x`` takes.  An operand the reverse
pass can recompute or load again is left to the reverse pass (no bytes kept for it).
"""
from ..ir.model import Arg, Operand, Synthetic
from ..ir.writer import math_symbol
from ..rules.scalar import DERIVATIVE_CALLS, math_name
from . import enabled
from .cache_cut import read_by_rule

# users whose reverse reads nothing of a value but through their rule (or nothing at all)
_PLAIN_USERS = {"fadd", "fsub", "fmul", "fdiv", "fneg", "fpext", "fptrunc", "store", "phi"}


def kept_derivatives(gen):
    """``{call: Synthetic instruction computing its derivative call}`` for the calls of
    generator ``gen``'s function whose derivative the forward pass keeps (module doc);
    empty when the ``kept_derivatives`` pass is off."""
    if not enabled("kept_derivatives"):
        return {}
    out, uses = {}, None
    for instr in gen.func.instructions():
        name = math_name(instr.callee) if instr.opcode == "call" else None
        if name not in DERIVATIVE_CALLS or instr.block not in gen.cfg.cyclic or len(instr.operands) != 1:
            continue
        x = instr.operands[0]
        if x.defn not in gen.act.active or x.defn is None or isinstance(x.defn, Arg) \
                or gen.values.recomputable(x.defn):
            continue
        uses = gen.func.uses() if uses is None else uses
        if not (_unread(gen.act, x.defn, uses, instr) and _unread(gen.act, instr, uses, None)):
            continue
        symbol, declaration = math_symbol(DERIVATIVE_CALLS[name][0], instr.type)
        gen.e.declare(symbol, declaration)
        ref = gen.e.fresh("dv")
        syn = Synthetic(instr.block, ref[1:], "call", instr.type,
                        f"{ref} = call {instr.type} @{symbol}({x.type} {x.ref})", [Operand(x.ref, x.type, x.defn)])
        syn.callee = symbol
        out[instr] = syn
    return out


def _unread(act, value, uses, call):
    """Whether the reverse pass needs ``value`` for no user but ``call``: each other user is
    plain arithmetic, a store or a phi whose rule does not read it."""
    for user, _ in uses.get(id(value), ()):
        if user is call:
            continue
        if user.opcode not in _PLAIN_USERS or user in act.active and value in read_by_rule(user, act):
            return False
    return True
