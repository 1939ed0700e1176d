"""Pointer parameters of the functions differentiated as calls whose memory nothing writes
while the gradient runs.

A callee's reverse runs after its caller has gone on, so every value it loads through a
pointer parameter is kept for it, in case the program writes that memory in between
(:class:`adcore.analysis.memory.Clobbers`' ``outside``).  Memory that no function of the
program writes at all may be loaded again instead.  A greatest fixed point over the kernel
and its callees: a parameter is read-only when every call passes it a pointer based only on
the caller's read-only parameters (or on kernel arguments), and nothing writes through
those bases: no store (of a number or a pointer), memory intrinsic or call of the kernel
or of a callee (a callee writes through the parameters it, or what it calls, writes
through).
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
    through = _written_parameters(callees, functions, is_pure_call)
    read_only = {(n, a) for n, (f, _) in functions.items() for a in f.args if a.type == "ptr"}
    for name, (func, pointers) in functions.items():
        for instr in func.instructions():
            for p in _written(instr, callees, through, is_pure_call):
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


def _written(instr, callees, through, is_pure_call):
    """The pointers through which ``instr`` may write anything (``through``: the written
    parameters of each callee)."""
    if callees.is_callee(instr):
        return [instr.operands[k] for k in through[instr.callee]]
    return written_pointers(instr, callees.rule_of, is_pure_call)


def _written_parameters(callees, functions, is_pure_call):
    """``{callee: positions of the pointer parameters through which it, or what it calls,
    may write anything}`` (a pointer as well as a number): a fixed point over the callees."""
    through = {n: set() for n in callees.kept}
    changed = True
    while changed:
        changed = False
        for name in callees.kept:
            func, pointers = functions[name]
            params = [a for a in func.args if a.type == "ptr"]
            for instr in func.instructions():
                for p in _written(instr, callees, through, is_pure_call):
                    bases = pointers.bases(p)
                    new = {a.index for a in params if bases == UNKNOWN or a in bases} - through[name]
                    if new:
                        through[name] |= new
                        changed = True
    return through


def _based_on_read_only(name, bases, read_only):
    return bases != UNKNOWN and all(isinstance(b, Arg) and (name, b) in read_only for b in bases)
