"""The reverse of one primal instruction: stores, loads, memory intrinsics, calls with
custom rules, calls differentiated as calls, and everything the rule table of
:mod:`adcore.rules.scalar` covers."""
from ..analysis.memory import is_memory_intrinsic
from ..ir.model import is_float_type
from ..ir.writer import SUM, Expr, alignment, float_const
from ..plan.read_modify_write import unchanged_shadow_load
from ..plan.values import Lazy
from .rule_calls import reverse_rule_call
from ..rules.scalar import contributions


def reverse_instruction(gen, instr):
    """Emit the reverse of ``instr``: its rule applied to its adjoint, ``+=`` into the
    adjoints of its operands and into shadow memory."""
    act = gen.act
    if instr.opcode == "store":
        value, ptr = instr.operands
        if ptr.defn is gen.retptr:
            if gen.spec.ret_active and value.defn in act.active:
                gen.accumulate(value.defn, float_const(value.type, 1.0))
            return
        if not gen.memory.is_shadowed(ptr):
            return
        t = act.value_type(value.defn) if value.defn in act.pun_type else value.type
        sp = gen.shadow(ptr)
        align = alignment(instr)
        if is_float_type(t):
            if value.defn in act.active:
                gen.accumulate(value.defn, gen.e(f"load {t}, ptr {sp}{align}"))
            kept = unchanged_shadow_load(act, instr, act.is_pure_call)
            if kept is not None:
                gen.unchanged_shadows.add(kept)
            else:
                gen.e.line(f"store {t} {float_const(t, 0)}, ptr {sp}{align}")
        elif value.is_const and t.startswith("i"):
            gen.e.line(f"store {t} 0, ptr {sp}{align}")
        else:
            raise gen.unsupported(instr, "a non-float value is stored into a differentiable array")
        return
    if is_memory_intrinsic(instr):
        reverse_memory_intrinsic(gen, instr)
        return
    if gen.rule_of(instr) is not None:
        reverse_rule_call(gen, instr, gen.rule_of(instr))
        return
    if gen.is_callee(instr):
        gen.reverse_call(instr)
        return
    if instr.opcode == "ret" and gen.spec.split and gen.spec.ret_active:
        if instr.operands[0].defn in act.active:        # a callee's float result: its adjoint
            gen.accumulate(instr.operands[0].defn, "%ad.dret")
        return
    if instr not in act.active or instr.opcode == "phi":
        return
    dy = gen.take_adjoint(instr)
    if instr in gen.unchanged_shadows:      # what it adds back is what the store left
        return
    if instr.opcode == "load":
        t = act.value_type(instr)
        sp, align = gen.shadow(instr.operands[0]), alignment(instr)
        old = gen.e(f"load {t}, ptr {sp}{align}")
        gen.e.line(f"store {t} {gen.e(f'fadd {SUM} {t} {old}, {dy}')}, ptr {sp}{align}")
        return
    for operand, contribution in contributions(instr, Expr(gen.e, instr.type), lambda o: Lazy(gen.values, o),
                                               dy, act.active, gen.derivative_def.get(instr)):
        gen.accumulate(operand, contribution)

def reverse_memory_intrinsic(gen, instr):
    """memset(p, c, n): the old contents of p are gone, so their shadow is zeroed.
    memcpy(d, s, n): shadow(s) += shadow(d), then shadow(d) = 0."""
    memory, e = gen.memory, gen.e
    dst, size = instr.operands[0], instr.operands[2]
    if not memory.is_shadowed(dst):
        return
    sd = gen.shadow(dst)
    n = gen.values.materialise(size)
    src = None if instr.callee.startswith("llvm.memset") else instr.operands[1]
    if src is not None and memory.is_shadowed(src):
        t = memory.element_type_of(dst, src)
        gen.memory_types.add(t)
        e.line(f"call void @ad.copy.adjoint.{t}(ptr {sd}, ptr {gen.shadow(src)}, {size.type} {n})")
    else:
        e.declare("llvm.memset.p0.i64", "declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)")
        e.line(f"call void @llvm.memset.p0.i64(ptr {sd}, i8 0, i64 {n}, i1 false)")
