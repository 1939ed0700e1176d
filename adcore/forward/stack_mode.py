"""Stack mode (:func:`adcore.hvp`: forward mode over adcore's own gradient IR): the
gradient's value-stack calls mirrored on a tangent stack per lane, and the reverse rules'
zero guards differentiated as the products they stand for."""
from ..ir.model import Operand, is_float_type, strip_metadata
from ..reverse import value_stack as runtime


def no_stack(instr):
    """The ``stack_rule`` outside stack mode: no instruction is a value-stack call."""
    return None


class StackMode:
    """The stack mode's part of :class:`adcore.forward.generator.TangentGenerator`."""

    def stack_call(self, instr, kind):
        """Stack mode: ``push(s, v)`` pushes v's tangent on each lane's tangent stack of s,
        ``pop(s)`` pops it (floats only; other values carry no tangent); ``snapshot(s, a,
        n)`` and ``restore(s, a, n)`` copy the tangents of array a likewise."""
        e = self.e
        e.line(strip_metadata(instr.text))
        what, t = kind.what, kind.type
        if what in ("snapshot", "restore"):
            data, size = instr.operands[1], instr.operands[2]
            if self.memory.is_shadowed(data):
                stacks = self.tangent_stack(instr.operands[0])
                for lane in self.lanes:
                    e.line(f"call void @ad.{what}(ptr {stacks[lane.j]}, ptr {lane.shadow(data)}, "
                           f"i64 {size.ref})")
            return
        if t == "ptr":
            self.pointer_stack_call(instr, what)
            return
        if not is_float_type(t):
            return
        self.stack_types.add(t)
        tag = runtime.type_tag(t)
        stacks = self.tangent_stack(instr.operands[0])
        for j in range(self.spec.lanes):
            if what == "push":
                e.line(f"call void @ad.push.{tag}(ptr {stacks[j]}, {t} {self.tangent(instr.operands[1], j)})")
            else:
                out = self.tangent(Operand(instr.ref, instr.type, instr), j)
                if instr not in self.act.active:
                    out = e.fresh("unused")
                e.line(f"{out} = call {t} @ad.pop.{tag}(ptr {stacks[j]})")

    def pointer_stack_call(self, instr, what):
        """Stack mode: a pointer pushed has each lane's shadow of it pushed (null when it has
        none), a pointer popped has them popped (into its shadow when it has one), so
        that a pointer the gradient keeps on its stack keeps its shadows."""
        e, stacks = self.e, self.tangent_stack(instr.operands[0])
        for lane in self.lanes:
            if what == "push":
                pushed = instr.operands[1]
                shadow = lane.shadow(pushed) if self.memory.mirrored(pushed) else "null"
                e.line(f"call void @ad.push.ptr(ptr {stacks[lane.j]}, ptr {shadow})")
            elif instr in lane.shadow_def:
                e.line(lane.shadow_def[instr].text)
            else:
                e.line(f"{e.fresh('unused')} = call ptr @ad.pop.ptr(ptr {stacks[lane.j]})")

    def tangent_stack(self, stack):
        """Each lane's tangent stack of the gradient's value stack ``stack`` (one set per
        stack, so that tangents leave in the order their values do)."""
        key = stack.defn if stack.defn is not None else stack.ref
        if key not in self.tstacks:
            self.tstacks[key] = [self.e.fresh("tstack") for _ in range(self.spec.lanes)]
        return self.tstacks[key]

    def tangent_stacks(self):
        return [ref for lanes in self.tstacks.values() for ref in lanes]

    def zero_guarded(self, instr):
        """Stack mode: the guarded operand ``x`` of a zero guard ``select (v == 0), 0, x``
        (or ``select (v != 0), x, 0``) on a value ``v`` with a tangent; else None."""
        if self.stack_rule is no_stack or instr.opcode != "select":
            return None
        cond = instr.operands[0].defn
        if getattr(cond, "opcode", None) != "fcmp" or not any(_is_zero(o) for o in cond.operands) \
                or not any(self.has_tangent(o) for o in cond.operands):
            return None
        predicate = None if cond.flags else cond.predicate   # the guards' fcmp has no fast-math flags
        zero_at, kept_at = {"oeq": (1, 2), "une": (2, 1)}.get(predicate, (None, None))
        if zero_at is None or not _is_zero(instr.operands[zero_at]):
            return None
        return instr.operands[kept_at]


def _is_zero(op):
    """True for a constant float zero (scalar or vector)."""
    if not op.is_const:
        return False
    if op.ref == "zeroinitializer":
        return True
    try:                         # LLVM spells floats as decimals or as the double's bits in hex
        return int(op.ref, 16) & ~(1 << 63) == 0 if op.ref.startswith("0x") else float(op.ref) == 0.0
    except ValueError:
        return False
