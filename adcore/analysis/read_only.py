"""Pointer parameters of the functions differentiated as calls whose memory nothing writes
while the gradient runs.

A callee's reverse runs after its caller has gone on, so every value it loads through a
pointer parameter is kept for it, in case the program writes that memory in between
(:class:`adcore.analysis.memory.Clobbers`' ``outside``).  Memory that no function of the
program writes at all may be loaded again instead.  A greatest fixed point over the kernel
and its callees: a parameter is read-only when every call passes it a pointer based only on
the caller's read-only parameters (or on kernel arguments), and nothing writes through
those bases: no store, memory intrinsic or call of the kernel or of a callee (a callee
writes through the parameters :meth:`adcore.reverse.callees.Callees.float_writes` names).
Where the kernel's arrays may share memory, a write into one is a write into all.
"""
from ..ir.model import Arg
from .memory import written_pointers
from .pointers import UNKNOWN, PointerBases


def read_only_parameters(callees, kernel, kernel_pointers, distinct, is_pure_call):
    """``{callee name: positions of its read-only pointer parameters}`` (as above), for the
    functions ``callees`` keeps as calls, called from ``kernel``."""
    functions = {None: (kernel, kernel_pointers)}
    functions.update({n: (callees.function(n), PointerBases(callees.function(n))) for n in callees.kept})
    read_only = {(n, a) for n, (f, _) in functions.items() for a in f.args if a.type == "ptr"}
    for name, (func, pointers) in functions.items():
        for instr in func.instructions():
            if callees.is_callee(instr):
                written = [instr.operands[k] for k in callees.float_writes(instr.callee)]
            else:
                written = written_pointers(instr, callees.rule_of, is_pure_call)
            for p in written:
                bases = pointers.bases(p)
                if bases == UNKNOWN:
                    return {}
                read_only -= {(name, b) for b in bases if isinstance(b, Arg)}
    kernel_args = {(None, a) for a in kernel.args if a.type == "ptr"}
    if not distinct and kernel_args - read_only:
        read_only -= kernel_args
    changed = True
    while changed:
        changed = False
        for name, (func, pointers) in functions.items():
            for instr in func.instructions():
                if not callees.is_callee(instr):
                    continue
                params = callees.function(instr.callee).args
                for k, o in enumerate(instr.operands):
                    key = (instr.callee, params[k])
                    if key in read_only and not _based_on_read_only(name, pointers.bases(o), read_only):
                        read_only.discard(key)
                        changed = True
    out = {}
    for name, arg in read_only:
        if name is not None:
            out.setdefault(name, set()).add(arg.index)
    return out


def _based_on_read_only(name, bases, read_only):
    return bases != UNKNOWN and all(isinstance(b, Arg) and (name, b) in read_only for b in bases)
