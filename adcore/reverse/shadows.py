"""Shadow pointers in the forward pass.

For each pointer into shadowed memory the forward pass computes the matching shadow
pointer with an instruction of its own: an allocation call becomes a zeroed shadow
allocation; loads of a meminfo's data pointer, GEPs, casts, phis and selects are mirrored
on the shadows of their operands (a Duplicated argument's shadow is a parameter); a
pointer stored in a stack slot (or in the return slot) has its shadow stored in a shadow
slot, and loads from the slot read that; a pointer popped from a gradient's value stack
(``hvp``) has its shadow popped from a tangent stack.  The reverse pass materialises these shadow
pointers like any other value: recomputed when pure, else saved.
"""

from ..analysis.pointers import (
    ALLOCATORS,
    POP_POINTER,
    RAW_ALLOCATORS,
    MemInfo,
    return_slot,
    stack_slot,
)
from ..ir.model import Operand, Synthetic, rename, strip_metadata


def shadow_pointers(gen):
    """``{primal instruction: synthetic instruction}`` computing each shadow pointer
    (and the synthetic stores that keep shadows in shadow slots), for generator ``gen``."""
    return _ShadowPointers(gen).out


class _ShadowPointers:
    def __init__(self, gen):
        self.gen, self.memory = gen, gen.memory
        self.bases = gen.memory.pointers.bases
        pointers = [i for b in gen.cfg.rpo for i in b.instrs
                    if i.type == "ptr" and self.memory.mirrored(Operand(i.ref, "ptr", i))
                    or i.type.startswith("{") and self.memory.aggregate_has_shadow(i)]
        self.out = {i: Synthetic(i.block, gen.e.fresh("sh")[1:], i.opcode, "ptr") for i in pointers}
        self.slots = {}
        for instr, syn in list(self.out.items()):
            self.mirror(instr, syn)
        for instr in pointers:
            self.check_stack_slot(instr)
        self.keep_in_slots()

    def shadow_slot(self, op):
        """The shadow slot of stack slot ``op`` (one per alloca and offset)."""
        key = stack_slot(op)
        if key not in self.slots:
            self.slots[key] = self.gen.alloca("ptr", "slot")
        return self.slots[key]

    def shadow_ref(self, op):
        if op.defn in self.out:
            return self.out[op.defn].ref
        return self.gen.shadow_ref.get(op.defn)

    def mirror(self, instr, syn):
        """Write ``syn``: a zeroed shadow allocation for an allocation, a load from the shadow
        slot for a load from a stack slot, else ``instr`` on its operands' shadows."""
        syn.incoming = instr.incoming
        syn.reloadable = instr.opcode == "load" and all(
            isinstance(b, MemInfo) for b in self.bases(instr.operands[0]))
        if instr.opcode == "call" and instr.callee == POP_POINTER:
            syn.text = self.gen.popped_shadow(instr, syn.ref)
        elif instr.opcode == "call" and instr.callee in ALLOCATORS + RAW_ALLOCATORS:
            size = instr.operands[0]
            if instr.callee in RAW_ALLOCATORS:
                syn.text = f"{syn.ref} = call ptr @ad.shadow.raw(i64 {size.ref})"
            else:
                align = instr.operands[1].ref if instr.callee.endswith("_aligned") else "32"
                syn.text = f"{syn.ref} = call ptr @ad.shadow.alloc(i64 {size.ref}, i32 {align})"
        elif instr.opcode == "alloca":
            syn.text = _shadow_alloca(self.gen, instr, syn)
        elif instr.opcode == "load" and stack_slot(instr.operands[0]) is not None:
            syn.text = f"{syn.ref} = load ptr, ptr {self.shadow_slot(instr.operands[0])}"
        else:
            mapping = {instr.ref: syn.ref}
            for o in instr.operands:
                shadow = self.shadow_ref(o)
                if shadow is not None:
                    mapping[o.ref] = shadow
                    syn.operands.append(Operand(shadow, "ptr", self.out[o.defn] if o.defn in self.out else None))
                elif o.type == "ptr" and o.defn is not None and instr.type == "ptr" \
                        and self.memory.reaches_shadow(self.bases(o)) \
                        or o.type.startswith("{") and self.memory.aggregate_has_shadow(o.defn):
                    # a shadowed operand with no shadow: mirroring would aim at primal memory
                    raise self.gen.unsupported(instr, "the shadow of this pointer cannot be followed")
                else:
                    syn.operands.append(o)
            syn.text = strip_metadata(rename(instr.text, mapping))

    def check_stack_slot(self, instr):
        """Every pointer stored in the stack slot that ``instr`` loads must have a shadow."""
        if instr.opcode != "load" or stack_slot(instr.operands[0]) is None:
            return
        key = stack_slot(instr.operands[0])
        for block in self.gen.cfg.rpo:
            for store in block.instrs:
                if store.opcode == "store" and stack_slot(store.operands[1]) == key \
                        and store.operands[0].type == "ptr" and store.operands[0].defn is not None \
                        and self.shadow_ref(store.operands[0]) is None:
                    raise self.gen.unsupported(store, "a pointer kept on the stack has no shadow")

    def keep_in_slots(self):
        """A store of a shadowed pointer into a stack slot (or the return slot) gets a
        synthetic store of its shadow into the matching shadow slot."""
        for block in self.gen.cfg.rpo:
            for store in block.instrs:
                if store.opcode != "store" or store.operands[0].type != "ptr" \
                        or self.shadow_ref(store.operands[0]) is None:
                    continue
                offset = return_slot(store.operands[1], self.gen.retptr) if self.gen.retptr else None
                if stack_slot(store.operands[1]) is not None:
                    slot = self.shadow_slot(store.operands[1])
                elif offset is not None:        # a returned array's shadow
                    slot = self.gen.returned_shadow.setdefault(offset, self.gen.alloca("ptr", "retsh"))
                else:
                    continue
                self.out[store] = Synthetic(block, "", "store", "void",
                                            f"store ptr {self.shadow_ref(store.operands[0])}, ptr {slot}")


def allocation_size(gen, instr):
    """``(lines, size)``: the i64 byte size of the memory alloca ``instr`` allocates (a
    runtime element count included: C's variable-length arrays), and the lines computing it."""
    allocated = instr.allocated_type
    size = f"ptrtoint (ptr getelementptr ({allocated}, ptr null, i32 1) to i64)"
    count = instr.operands[0] if instr.operands else None
    if count is None or count.is_const and count.ref == "1":
        return [], size
    lines, n = [], count.ref
    if count.type != "i64":
        n = gen.e.fresh("shn")
        lines.append(f"{n} = zext {count.type} {count.ref} to i64")
    total = gen.e.fresh("shbytes")
    lines.append(f"{total} = mul i64 {n}, {size}")
    return lines, total


def arena_alloca(gen, instr, ref):
    """``ref = `` zeroed memory the size of alloca ``instr``'s from the gradient's arena (in a
    function differentiated as a call, whose reverse runs after it has returned)."""
    if instr.align is not None and instr.align > 16:
        raise gen.unsupported(instr, "a stack allocation aligned to more than 16 bytes in a "
                                     "function differentiated as a call")
    gen.stack_types.add("ptr")
    lines, size = allocation_size(gen, instr)
    return "\n  ".join(lines + [f"{ref} = call ptr @ad.arena.alloc(ptr %ad.arena, ptr %ad.rawfrees, i64 {size})"])


def _shadow_alloca(gen, instr, syn):
    """A zeroed allocation the size of ``instr``'s: on the stack, or from the arena in a
    function differentiated as a call."""
    if gen.spec.split:
        return arena_alloca(gen, instr, syn.ref)
    return stack_shadow(gen, instr, syn.ref)


def stack_shadow(gen, instr, ref):
    """``ref = `` a zeroed alloca the size of alloca ``instr``'s."""
    lines, size = allocation_size(gen, instr)
    count = instr.operands[0] if instr.operands else None
    allocated = instr.allocated_type
    counted = f", {count.type} {count.ref}" if lines else ""
    lines.append(f"{ref} = alloca {allocated}{counted}")
    lines.append(f"call void @llvm.memset.p0.i64(ptr {ref}, i8 0, i64 {size}, i1 false)")
    return "\n  ".join(lines)
