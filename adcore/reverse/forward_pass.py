"""The augmented forward pass of a gradient function: the primal's blocks copied, with the
pushes the plan asks for (:mod:`adcore.plan.pushes`), the snapshots of scratch arrays
(:mod:`adcore.plan.snapshots`), and frees deferred to the end of the reverse pass."""
from ..known_functions import CALL_DTOR, DECREF, FREE
from ..ir.model import rename, strip_metadata
from ..plan.pushes import pred_type
from .parallel_loops import forward_call
from .shadows import arena_alloca

DEFERRED = {CALL_DTOR: "%ad.dtors", FREE: "%ad.rawfrees"}   # freed at the end of the reverse pass


class ForwardPass:
    """The forward pass's part of :class:`adcore.reverse.generator.AdjointGenerator`."""

    def forward_block(self, block, plan):
        e = self.e
        e.label(block.name)
        self.in_reserved_loop = block in self.pushes.reserved
        defs = self.defs(block)
        nphis = sum(1 for d in defs if d.opcode == "phi")
        for phi in defs[:nphis]:
            e.line(rename(self.copy_text(phi), self.forward_labels))
        if any(k == "pred" for k, _, _ in plan):
            entries = []
            for k, p in enumerate(block.preds):
                entries += [f"[ {k}, {self.forward_labels.get(p.ref, p.ref)} ]"] * p.term.succ.count(block)
            t = pred_type(block)
            pid = e(f"phi {t} {', '.join(entries)}", "pid")
            self.push(t, pid)
        saved = {v for k, v, _ in plan if k == "reg"}
        for phi in defs[:nphis]:
            self.save_register(phi, saved)
        for instr in defs[nphis:]:
            if instr is block.term:
                for kind, phi, _ in plan:
                    if kind == "iv":
                        self.push(phi.type, e(f"load {phi.type}, ptr {self.values.registers[phi]}"))
                self.take_snapshots(block)
                if block in self.pushes.reserves:
                    self.pushes.reserves[block].emit(e, "%ad.stack")
                if instr.opcode == "ret":
                    self.ret_blocks.append((block, instr.operands[0] if instr.operands else None))
                    e.line("br label %ad.fwdexit")
                    continue
            e.line(self.hinted(block, self.forward_text(instr)) if instr is block.term else
                   self.forward_text(instr))
            if instr.synthetic and "@ad.shadow." in instr.text:
                raw = "@ad.shadow.raw" in instr.text
                self.push("ptr", instr.ref, "%ad.rawfrees" if raw else "%ad.dtors")
            self.save_register(instr, saved)

    def hinted(self, block, text):
        """``text``, the branch ending ``block``, with the hint of :mod:`adcore.plan.varying_loops`
        when ``block`` is the latch of a loop whose trip count varies."""
        return self.loop_hints.attach(text) if block in self.hinted_latches else text

    def forward_text(self, instr):
        """The forward pass's copy of ``instr``: frees, meminfo destructors, lifetime
        ends and stack restores (of C's variable-length arrays) are deferred to the end of the reverse pass (which may still read the
        memory); a float return that is not asked for is not stored (:meth:`returns_primal`)."""
        if instr.opcode == "call" and (instr.callee or "").startswith(("llvm.lifetime.end",
                                                                       "llvm.stackrestore")):
            return f"; {instr.callee} dropped: the reverse pass may read this memory"
        if self.spec.split and instr.opcode == "call" and (instr.callee or "").startswith("llvm.lifetime"):
            return f"; {instr.callee} dropped: the allocation is on the heap"
        if self.is_callee(instr):
            return self.site(instr).forward(self)
        if instr.opcode == "call" and getattr(self.rule_of(instr), "loop", None) is not None:
            return forward_call(self, instr, self.rule_of(instr))
        if self.spec.split and instr.opcode == "alloca" and not instr.synthetic:
            if instr in self.call_slots and instr not in self.values.registers:
                return instr.text                 # the reverse needs only its shadow
            return arena_alloca(self, instr, instr.ref)             # outlives the call
        if instr.opcode == "call" and instr.callee == DECREF:
            self.stack_types.add("ptr")
            return f"call void @ad.decref(ptr %ad.dtors, ptr {instr.operands[0].ref})"
        if instr.opcode == "call" and instr.callee in DEFERRED:
            self.stack_types.add("ptr")
            return f"call void @ad.push.ptr(ptr {DEFERRED[instr.callee]}, ptr {instr.operands[0].ref})"
        if not self.spec.keep_primal and self.returns_primal(instr):
            return f"store {instr.operands[0].type} 0x7FF8000000000000, ptr {self.retptr.ref}"
        return self.copy_text(instr)

    def returns_primal(self, instr):
        """True for the store of the float return into its result field: where the primal
        is not asked for, NaN is stored instead, so that O3 drops the code computing it
        (a gradient whose reverse recomputes what it needs then skips a forward loop)."""
        return instr.opcode == "store" and self.retptr is not None and len(instr.operands) == 2 and \
            instr.operands[1].defn is self.retptr and instr.operands[0].type in ("double", "float")

    def take_snapshots(self, block):
        """At the end of ``block``'s forward pass, copy the arrays snapshotted there; those
        a replay can refill only in an iteration where the forward pass chooses the copy
        (:meth:`adcore.plan.replays.Replay.snapshot_taken`, in a block of their own: ``block``'s
        terminator then ends block ``forward_labels[block]``), pushing that choice."""
        replay = self.replays.get(block)
        refilled = replay.arrays if replay else ()
        for array in self.snapshots.at.get(block, ()):
            if array not in refilled:
                self.copy_array("snapshot", "%ad.stack", array)
        if replay:
            e, tail = self.e, self.forward_labels[block.ref]
            copy = e.fresh("snap")
            taken = replay.snapshot_taken(e, lambda op: op.ref, "%ad.stack")
            e.line(f"br i1 {taken}, label {copy}, label {tail}")
            e.label(copy)
            for array in refilled:
                self.copy_array("snapshot", "%ad.stack", array)
            e.line(f"br label {tail}")
            e.label(tail)
            self.push("i8", e(f"zext i1 {taken} to i8", "snap"))

    def copy_text(self, instr):
        """``instr``'s text for the forward pass.  llvmlite numbers an instruction's metadata
        as if its function were alone in the module: with functions kept as calls the
        numbers would name other nodes, so the attachments are dropped."""
        if self.callees is None or not self.callees.kept:
            return instr.text
        return strip_metadata(instr.text)

    def save_register(self, instr, saved):
        if instr not in self.values.registers:
            return
        reg = self.values.registers[instr]
        if instr in saved:
            self.push(instr.type, self.e(f"load {instr.type}, ptr {reg}"))
        self.e.line(f"store {instr.type} {instr.ref}, ptr {reg}")
