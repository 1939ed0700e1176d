"""Shadow pointers in the forward pass.

For each pointer into shadowed memory the forward pass computes the matching shadow
pointer with an instruction of its own: an allocation call becomes a zeroed shadow
allocation; loads of a meminfo's data pointer, GEPs, casts, phis and selects are mirrored
on the shadows of their operands (a Duplicated argument's shadow is a parameter); a
pointer stored in a stack slot (or in the return slot) has its shadow stored in a shadow
slot, and loads from the slot read that.  The reverse pass materialises these shadow
pointers like any other value: recomputed when pure, else saved.
"""
from .activity import ALLOCATORS, NOWHERE, RAW_ALLOCATORS, UNKNOWN, MemInfo, return_slot, stack_slot
from .ir import Instr, Operand, rename, strip_metadata


def shadow_pointers(gen):
    """``{primal instruction: synthetic instruction}`` computing each shadow pointer
    (and the synthetic stores that keep shadows in shadow slots), for generator ``gen``."""
    act = gen.act

    def mirrored(op):
        bs = act.bases(op)
        return bs != UNKNOWN and bool(bs) and all(
            act.has_shadow(b) or isinstance(b, MemInfo) and b.alloc in act.shadow_allocs for b in bs)

    pointers = [i for b in gen.cfg.rpo for i in b.instrs
                if i.type == "ptr" and mirrored(Operand(i.ref, "ptr", i))
                or i.type.startswith("{") and act.aggregate_has_shadow(i)]
    out = {i: Instr(i.block, gen.e.fresh("sh")[1:], i.opcode, "ptr", "") for i in pointers}
    slots = {}

    def shadow_slot(op):
        key = stack_slot(op)
        if key not in slots:
            slots[key] = gen.alloca("ptr", "slot")
        return slots[key]

    for instr, syn in out.items():
        syn.synthetic, syn.incoming, syn.callee = True, instr.incoming, None
        syn.reloadable = instr.opcode == "load" and all(
            isinstance(b, MemInfo) for b in act.bases(instr.operands[0]))
        syn.operands = []
        if instr.opcode == "call" and instr.callee in ALLOCATORS + RAW_ALLOCATORS:
            size = instr.operands[0]
            if instr.callee in RAW_ALLOCATORS:
                syn.text = f"{syn.ref} = call ptr @ad.shadow.raw(i64 {size.ref})"
            else:
                align = instr.operands[1].ref if instr.callee.endswith("_aligned") else "32"
                syn.text = f"{syn.ref} = call ptr @ad.shadow.alloc(i64 {size.ref}, i32 {align})"
            continue
        if instr.opcode == "alloca":
            syn.text = _shadow_alloca(gen, instr, syn)
            continue
        if instr.opcode == "load" and stack_slot(instr.operands[0]) is not None:
            syn.text = f"{syn.ref} = load ptr, ptr {shadow_slot(instr.operands[0])}"
            continue
        mapping = {instr.ref: syn.ref}
        for o in instr.operands:
            if o.defn in out:
                mapping[o.ref] = out[o.defn].ref
                syn.operands.append(Operand(out[o.defn].ref, "ptr", out[o.defn]))
            elif o.defn in gen.shadow_ref:
                mapping[o.ref] = gen.shadow_ref[o.defn]
                syn.operands.append(Operand(gen.shadow_ref[o.defn], "ptr"))
            elif o.type == "ptr" and o.defn is not None and instr.type == "ptr" \
                    and gen.act.bases(o) != UNKNOWN and any(gen.act.has_shadow(b) for b in gen.act.bases(o)) \
                    or o.type.startswith("{") and gen.act.aggregate_has_shadow(o.defn):
                # a shadowed operand with no shadow: mirroring would aim at primal memory
                raise gen.unsupported(instr, "the shadow of this pointer cannot be followed")
            else:
                syn.operands.append(o)
        syn.text = strip_metadata(rename(instr.text, mapping))
    def shadow_ref(op):
        if op.defn in out:
            return out[op.defn].ref
        return gen.shadow_ref.get(op.defn)

    for instr in pointers:       # every pointer a shadowed slot holds must have a shadow
        if instr.opcode == "load" and stack_slot(instr.operands[0]) is not None:
            key = stack_slot(instr.operands[0])
            for block in gen.cfg.rpo:
                for store in block.instrs:
                    if store.opcode == "store" and stack_slot(store.operands[1]) == key \
                            and store.operands[0].type == "ptr" and store.operands[0].defn is not None \
                            and shadow_ref(store.operands[0]) is None:
                        raise gen.unsupported(store, "a pointer kept on the stack has no shadow")

    for block in gen.cfg.rpo:
        for store in block.instrs:
            if store.opcode != "store" or store.operands[0].type != "ptr" \
                    or shadow_ref(store.operands[0]) is None:
                continue
            offset = return_slot(store.operands[1], gen.retptr)
            if stack_slot(store.operands[1]) is not None:
                slot = shadow_slot(store.operands[1])
            elif offset is not None:        # a returned array's shadow
                slot = gen.returned_shadow.setdefault(offset, gen.alloca("ptr", "retsh"))
            else:
                continue
            syn = Instr(block, "", "store", "void", f"store ptr {shadow_ref(store.operands[0])}, ptr {slot}")
            syn.synthetic = True
            out[store] = syn
    return out


def _allocated_type(alloca_text):
    """The type an ``alloca`` instruction allocates (up to the first top-level comma)."""
    rest, depth = alloca_text.split("alloca", 1)[1].strip(), 0
    for k, ch in enumerate(rest):
        depth += ch in "[{<(" and 1 or ch in "]}>)" and -1 or 0
        if ch == "," and depth == 0:
            return rest[:k].strip()
    return rest


def _shadow_alloca(gen, instr, syn):
    """A zeroed stack allocation the size of ``instr``'s (a runtime element count
    included: C's variable-length arrays)."""
    allocated = _allocated_type(instr.text)
    size = f"ptrtoint (ptr getelementptr ({allocated}, ptr null, i32 1) to i64)"
    count = instr.operands[0] if instr.operands else None
    if count is None or count.is_const and count.ref == "1":
        lines = [f"{syn.ref} = alloca {allocated}"]
    else:
        lines = [f"{syn.ref} = alloca {allocated}, {count.type} {count.ref}"]
        n = count.ref
        if count.type != "i64":
            n = gen.e.fresh("shn")
            lines.append(f"{n} = zext {count.type} {count.ref} to i64")
        total = gen.e.fresh("shbytes")
        lines.append(f"{total} = mul i64 {n}, {size}")
        size = total
    lines.append(f"call void @llvm.memset.p0.i64(ptr {syn.ref}, i8 0, i64 {size}, i1 false)")
    return "\n  ".join(lines)
