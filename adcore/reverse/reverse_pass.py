"""The reverse pass's control flow: where a block's reverse ends (its kept values popped,
a loop's counter run back or forward, the predecessor's reverse branched to through an edge
block that moves phi adjoints), where a counted loop's reverse starts, and snapshots
restored or refilled by a replay at the start of a latch's reverse."""
from ..analysis.cfg import step_of
from ..analysis.exit_values import exit_test
from ..ir.model import Operand, local, rename, strip_metadata
from ..plan.loop_order import commuting
from ..plan.pushes import counters, pred_type

POPS = "  ;ad.pops "              # where a block's pushes after a call are popped
COUNTER_START = "  ;ad.start "     # where a loop's reverse sets its counter (loop_order)


class ReversePass:
    """The reverse pass's part of :class:`adcore.reverse.generator.AdjointGenerator`."""

    def replay_prelude(self, block):
        """At the start of the reverse of latch ``block``: whether the replay runs this
        iteration (an ``i1``: the forward pass pushed whether it copied the arrays), and the
        replay's inputs ``{value: name}``."""
        replay, materialise = self.replays[block], self.values.materialise
        refilled = self.e(f"icmp eq i8 {self.pop('i8')}, 0", "refill")
        inputs = {v: materialise(Operand(v.ref, v.type, v)) for v in replay.inputs}
        return refilled, inputs

    def enter_loops(self, block):
        """At the end of the reverse of ``block``, when it is the exit of counted loops with
        an :class:`adcore.analysis.exit_values.ExitTest`: set their counters to the values they ended
        with (recorded in ``exit_tests``: nothing is pushed for them).  Runs while the
        reverse bodies are written, so the values it needs are kept by the forward pass."""
        for header in self.loop_exits.get(block, ()):
            iv, loop = self.cfg.ivs[header], self.cfg.loop_at[header]
            test = exit_test(loop, iv.outside)
            if test is None:
                continue
            kept = counters(self.defs(header), self.values.registers, header, iv)
            ends = test.end_values(self.e, self.values.materialise, kept)
            if list(kept) == [iv.phi] and commuting(self.cfg, loop, iv, self.analyses.pointers,
                                                          self.clobbers.distinct_arrays,
                                                          self.clobbers.data_args):
                limit = self.alloca(iv.phi.type, "limit")
                self.e.line(f"store {iv.phi.type} {ends[iv.phi]}, ptr {limit}")
                self.limits[header] = limit
                self.e.lines.append(f"{COUNTER_START}{header.name}")     # set once plans are known
            else:
                for phi in kept:
                    self.e.line(f"store {phi.type} {ends[phi]}, ptr {self.values.registers[phi]}")
            self.exit_tests[header] = test

    def counter_start(self, header_name):
        """Where the reverse of a counted loop starts: its counter set to the first value
        when :mod:`adcore.plan.loop_order` lets it count up, else to the last."""
        header = next(h for h in self.cfg.ivs if h.name == header_name)
        iv = self.cfg.ivs[header]
        phi = iv.phi
        start = iv.init.ref if header in self.pushes.forward_order else \
            self.e(f"load {phi.type}, ptr {self.limits[header]}")
        self.e.line(f"store {phi.type} {start}, ptr {self.values.registers[phi]}")

    def previous_advances(self, header):
        """Before the reverse tail of ``header`` branches: ``[(register, type, value)]``, the
        value each advanced phi of ``header`` had one iteration earlier, computed with the
        loop's counters run back for the while.  (Computed before the branch, the back edge
        keeps only the counters' steps and stores, which LLVM folds into the loop's latch.)"""
        advances = [a for a in self.pushes.advanced.values() if a.phi.block is header]
        if not advances:
            return []
        e = self.e
        kept = []
        for phi, inv in self.pushes.inverted.items():
            if phi.block is header:
                reg = self.values.registers[phi]
                now = e(f"load {phi.type}, ptr {reg}")
                kept.append((reg, phi.type, now))
                e.line(f"store {phi.type} {e(step_of(inv.step_instr, phi).format(x=now))}, ptr {reg}")
        memo, self.values.memo = self.values.memo, {}      # values of the previous iteration
        out = []
        for advance in advances:
            reg, t = self.values.registers[advance.phi], advance.phi.type
            out.append((reg, t, advance.previous(e, self.values.materialise, e(f"load {t}, ptr {reg}"))))
        self.values.memo = memo
        for reg, t, now in kept:
            e.line(f"store {t} {now}, ptr {reg}")
        return out

    def restore_snapshots(self, block, replay_code):
        """At the start of the reverse of ``block``: the arrays snapshotted there back, or
        the replay refilling them (``replay_code``, from ``build``)."""
        e = self.e
        replay = self.replays.get(block)
        if replay:
            prelude, flag, entry, clone, after = replay_code
            e.lines += prelude
            copy = e.fresh("restore")
            e.line(f"br i1 {flag}, label {entry}, label {copy}")
            e.label(copy)
            for array in reversed(replay.arrays):
                self.copy_array("restore", "%ad.stack", array)
            e.line(f"br label {after}")
            e.lines += clone
            e.label(after)
        refilled = replay.arrays if replay else ()
        for array in reversed(self.snapshots.at.get(block, ())):
            if array not in refilled:
                self.copy_array("restore", "%ad.stack", array)

    def restore(self, events, block=None):
        """Pop ``events`` (in reverse): kept values back into their registers; returns the
        predecessor record, if one is among them."""
        pid = None
        for kind, value, _ in reversed(events):
            if kind == "pred":
                pid = self.pop(pred_type(block))
            else:
                self.e.line(f"store {value.type} {self.pop(value.type)}, ptr {self.values.registers[value]}")
        return pid

    def reverse_tail(self, block, plan, tail_value):
        e = self.e
        pid = self.restore([ev for ev in plan if ev[2] == 0], block)
        if block is self.func.entry:
            e.line("br label %ad.done")
        elif block in self.cfg.ivs:
            iv = self.cfg.ivs[block]
            previous = self.previous_advances(block)
            cur = e(f"load {iv.phi.type}, ptr {self.values.registers[iv.phi]}")
            if block in self.pushes.forward_order:
                self.reverse_tail_upwards(block, iv, cur)
                return
            first = e(f"icmp eq {iv.phi.type} {cur}, {tail_value}")
            back = e.fresh("back")
            e.line(f"br i1 {first}, label {self.edge(block, iv.outside)}, label {back}")
            e.label(back)
            for phi, inv in self.pushes.inverted.items():
                if phi.block is block:
                    reg = self.values.registers[phi]
                    now = e(f"load {phi.type}, ptr {reg}")
                    e.line(f"store {phi.type} {e(step_of(inv.step_instr, phi).format(x=now))}, ptr {reg}")
            for reg, t, value in previous:
                e.line(f"store {t} {value}, ptr {reg}")
            e.line(f"br label {self.edge(block, iv.latch)}")
        elif block in self.cfg.branch_merges:
            _, when_true, when_false = self.cfg.branch_merges[block]
            e.line(f"br i1 {tail_value}, label {self.edge(block, when_true)}, "
                   f"label {self.edge(block, when_false)}")
        elif len(block.preds) == 1:
            e.line(f"br label {self.edge(block, block.preds[0])}")
        else:
            t = pred_type(block)
            cases = " ".join(f"{t} {k}, label {self.edge(block, p)}"
                             for k, p in enumerate(block.preds[1:], 1))
            e.line(f"switch {t} {pid}, label {self.edge(block, block.preds[0])} [ {cases} ]")
        for pred in block.preds:
            self.edge_block(block, pred)

    def reverse_tail_upwards(self, block, iv, cur):
        """The reverse tail of a loop header whose reverse counts up (:mod:`adcore.plan.loop_order`):
        leave after the last iteration, else step the counter forward."""
        e = self.e
        last = e(f"icmp eq {iv.phi.type} {cur}, {e(f'load {iv.phi.type}, ptr {self.limits[block]}')}")
        back = e.fresh("back")
        e.line(f"br i1 {last}, label {self.edge(block, iv.outside)}, label {back}")
        e.label(back)
        step = iv.phi.operands[iv.phi.incoming.index(iv.latch)].defn
        text = strip_metadata(step.text).split('=', 1)[1].strip()
        e.line(f"store {iv.phi.type} {e(rename(text, {iv.phi.ref: cur}))}, "
               f"ptr {self.values.registers[iv.phi]}")
        e.line(f"br label {self.edge(block, iv.latch)}")

    def edge(self, block, pred):
        if not any(p in self.act.active for p in block.phis):
            return local(f"ad.r.{pred.name}")
        return local(f"ad.e.{block.name}.{pred.name}")

    def edge_block(self, block, pred):
        active = [p for p in block.phis if p in self.act.active]
        if not active:
            return
        e = self.e
        e.label(f"ad.e.{block.name}.{pred.name}")
        adjoints = [self.take_adjoint(p) for p in active]
        for phi, dy in zip(active, adjoints):
            incoming = phi.operands[phi.incoming.index(pred)]
            if incoming.defn in self.act.active:
                self.accumulate(incoming.defn, dy)
        e.line(f"br label {local('ad.r.' + pred.name)}")
