"""Adjoint generation: from one cleaned primal function to one gradient function.

The gradient function has Numba's calling convention: ``i32 @grad(ptr retptr,
ptr excinfo, <primal arguments>, <shadow arrays>)``.  It runs

1. the *augmented forward pass*: the primal blocks, copied, plus stores of the values
   the reverse pass needs into registers (stack slots).  A register of a block inside a
   loop is saved on the value stack before it is overwritten; loop counters with a
   constant step are not saved but run backwards (from end values computed by
   :mod:`adcore.analysis.exit_values` where the exit test tells them), and so are header phis that
   advance by a nested loop's trip count (:mod:`adcore.reverse.advances`); scratch arrays a loop
   overwrites are copied at the end of each iteration (:mod:`adcore.plan.snapshots`), unless the
   reverse of the iteration can refill them by running their fill again (:mod:`adcore.plan.replays`).
   Blocks with several predecessors push which one they were entered from, unless a
   loop counter tells.  Innermost loops whose trip count varies (a packed triangle's rows)
   carry a hint for LLVM, in this pass and in replays (:mod:`adcore.plan.varying_loops`).
2. a check of the primal's status: an exception returns it at once, shadows untouched.
3. the *reverse pass*: one reverse block per primal block, instructions in reverse
   order, each applying its rule from :mod:`adcore.rules.scalar` and ``+=`` into adjoint slots
   and shadow memory; then the block's saved registers are restored and control goes
   back to the reverse of the predecessor, through an edge block that moves phi
   adjoints to the incoming values.

What the reverse pass recomputes and what it keeps is :mod:`adcore.plan.values`' policy; the
reverse of each instruction is :mod:`adcore.reverse.instructions`'s; this module assembles the function.

A function differentiated as a call (:mod:`adcore.reverse.calls`) is split where the forward pass
ends: an augmented forward that pushes every kept value before it returns, and a reverse
that pops them.  A block's pushes made after a call (on top of the callee's tape) are
popped just before the callee's reverse.
"""
from .. import numba_abi as abi
from ..known_functions import CALL_DTOR, DECREF, FREE
from . import value_stack as runtime
from .advances import availability, find_advance
from ..analysis.cfg import InductionVariable, step_of
from ..analysis.exit_values import exit_test
from .call_sites import CallSite
from ..errors import UnsupportedError
from .instructions import reverse_instruction
from ..ir.model import Operand, Synthetic, label, local, rename, strip_metadata, vector_shape
from ..ir.writer import SUM, Emitter, GeneratorBase, adjoint_zero, float_const
from .parallel_loops import forward_call
from ..plan import enabled
from ..plan.cache_cut import needed_values
from ..plan.loop_order import commuting
from ..plan.replays import find_replays
from ..plan.snapshots import Snapshots
from ..plan.values import Values
from ..plan.varying_loops import LoopHints, varying_latches
from ..rules.scalar import Lane
from ..timings import stage
from .shadows import arena_alloca, shadow_pointers

DEFERRED = {CALL_DTOR: "%ad.dtors", FREE: "%ad.rawfrees"}   # freed at the end
POPS = "  ;ad.pops "              # where a block's pushes after a call are popped
COUNTER_START = "  ;ad.start "        # where a loop's reverse sets its counter (loop_order)


class Analyses:
    """The analyses of one primal function for one :class:`Spec` (stage ``analyse``)."""

    def __init__(self, cfg, pointers, memory, activity, clobbers, rule_of):
        self.cfg, self.pointers, self.memory = cfg, pointers, memory
        self.activity, self.clobbers, self.rule_of = activity, clobbers, rule_of


class Spec:
    """What to differentiate: which LLVM arguments are Active or shadowed, and the
    layout of the result struct that ``retptr`` points to."""

    def __init__(self, symbol, pyname, active, shadows, ret_active, result_type,
                 active_fields, bytes_field, data_args=(), distinct_arrays=True, seed=None, split=None,
                 extents=None, keep_primal=True):
        self.symbol, self.pyname = symbol, pyname
        self.active = active                  # [arg index] of Active float arguments
        self.shadows = shadows                # [(data arg index, [flattened types], data position)]
        self.ret_active = ret_active
        self.result_type = result_type        # LLVM struct text
        self.active_fields = active_fields    # result field of each Active argument
        self.bytes_field = bytes_field        # result field for the bytes cached
        self.data_args = data_args            # arg indices of all array data pointers
        self.distinct_arrays = distinct_arrays
        self.seed = seed                      # returned float array: (flattened types, float type)
        self.split = split                    # a callee's augmented forward and reverse (calls.Split)
        self.extents = extents or {}          # contiguous array: data arg index -> (nitems, itemsize) indices
        self.keep_primal = keep_primal        # False: the float return is not asked for (NaN in its field)


class AdjointGenerator(GeneratorBase):
    """Builds the gradient function of one primal function for one :class:`Spec`:
    ``build()`` returns its IR text (the reverse bodies are written first, since they
    decide which values the forward pass must keep)."""

    parallel_loops = ()    # how each parallel loop's reverse runs (set by adcore.pipeline.generate)

    def __init__(self, func, spec, analyses, context=None, callees=None):
        self.func, self.spec, self.context, self.callees = func, spec, context, callees
        self.analyses = analyses
        self.cfg, self.memory, self.clobbers = analyses.cfg, analyses.memory, analyses.clobbers
        self.act, self.rule_of = analyses.activity, analyses.rule_of
        args = func.args
        self.retptr = None if spec.split else args[0]     # a callee's return slot is memory
        self.sites = {}              # call differentiated as a call -> CallSite
        self.shadow_ref = {}
        self.shadow_params = []
        for k, (data_index, types, data_pos) in enumerate(spec.shadows):
            names = [f"%ad.sh{k}.{j}" for j in range(len(types))]
            self.shadow_params += [f"{t} {n}" for t, n in zip(types, names)]
            self.shadow_ref[args[data_index]] = names[data_pos]
        taken = {a.name for a in args} | {b.name for b in func.blocks}
        taken |= {i.name for i in func.instructions() if i.name}
        self.e = Emitter(taken)
        self.allocas = []            # lines of the entry block
        self.slots = {}              # active value -> adjoint alloca ref
        self.unchanged_shadows = set()   # loads whose shadow the reverse leaves (read_modify_write)
        self.stack_types = set()     # types pushed on the value stack
        self.memory_types = set()    # float types of memcpy adjoints and seeds used
        self.inverted = {}           # phi -> InductionVariable, set once registers are known
        self.advanced = {}           # phi -> advances.Advance, set with ``inverted``
        self.limits = {}             # header -> register of the last counter value (loop_order)
        self.forward_order = set()   # headers of the loops whose reverse counts up
        self.exit_tests = {}         # header -> ExitTest of the loops whose counters' ends are computed
        self.loop_exits = {}         # the only block a counted loop exits to -> [its header]
        for header, iv in self.cfg.ivs.items():
            exits = [b for b in iv.latch.succ if b not in self.cfg.loop_at[header].blocks]
            if len(exits) == 1 and len(exits[0].preds) == 1:
                self.loop_exits.setdefault(exits[0], []).append(header)
        self.ret_blocks = []         # (block, status operand)
        self.returned_shadow = {}    # byte offset in the return slot -> alloca of a shadow pointer
        self.before = {}             # call -> synthetic code the forward pass runs before it
        self.loop_tapes = {}         # parallel loop's call -> (its tape's address, shadowed arrays)
        extents = {} if spec.split else {args[d]: (args[n], args[i]) for d, (n, i) in spec.extents.items()}
        with stage("plan: snapshots"):
            self.snapshots = Snapshots(func, self.cfg, analyses.pointers, self.clobbers,
                                       self.act.active, extents, spec.distinct_arrays)
        self.values = Values(self.cfg, self.clobbers, self.e, self.alloca, self.snapshots.loop_of)
        self.values.needed = lambda: needed_values(func, self.act, self.rule_of, self.is_callee)
        self.values.rewritten = frozenset(data for data, _, _ in self.snapshots.bases())
        self.values.changed_store = lambda store: not spec.keep_primal and self.returns_primal(store)
        # a callee's metadata ids could clash with another callee's: its loops get no hints
        self.hinted_latches = set() if spec.split else varying_latches(self.cfg, self.values.variance)
        self.loop_hints = LoopHints()
        self.replays = self._replays()
        self.shadow_def = shadow_pointers(self)

    def before_call(self, call, lines, copies):
        """Run ``lines`` in the forward pass just before ``call``; ``copies`` names values they
        define (``{key: ref}``); returns ``{key: Operand}`` usable in the reverse pass."""
        syn = Synthetic(call.block, copies[next(iter(copies))][1:], "call", "ptr", "\n  ".join(lines))
        self.before.setdefault(call, []).append(syn)
        out = {}
        for key, ref in copies.items():
            value = Synthetic(call.block, ref[1:], "call", "ptr")
            value.defined_by = syn
            syn.defines.append(value)
            out[key] = Operand(ref, "ptr", value)
        return out

    def defs(self, block):
        """The values ``block`` defines in forward order: phis first, each shadow pointer
        right after its primal pointer, operand copies right before their call."""
        phis = block.phis
        out = phis + [self.shadow_def[p] for p in phis if p in self.shadow_def]
        for instr in block.instrs[len(phis):]:
            for syn in self.before.get(instr, ()):
                out.append(syn)
                out.extend(syn.defines)
            out.append(instr)
            if instr in self.shadow_def:
                out.append(self.shadow_def[instr])
        return out

    # -- calls differentiated as calls -------------------------------------------------
    def is_callee(self, instr):
        return self.callees is not None and self.callees.is_callee(instr)

    def site(self, instr):
        if instr not in self.sites:
            self.sites[instr] = CallSite(self, instr)
        return self.sites[instr]

    def call_index(self, instr):
        """1 + the number of calls differentiated as calls before ``instr`` in its block."""
        calls = [i for i in instr.block.instrs if self.is_callee(i)]
        return calls.index(instr) + 1

    def reverse_call(self, instr):
        """The reverse of a call: first the pops of what the block pushed after it."""
        self.e.lines.append(f"{POPS}{self.call_index(instr)}")
        self.site(instr).reverse(self)

    def forward_shadow(self, instr, op):
        """The forward pass's name of the shadow of pointer ``op``."""
        if op.defn in self.shadow_ref:
            return self.shadow_ref[op.defn]
        if op.defn in self.shadow_def:
            return self.shadow_def[op.defn].ref
        raise self.unsupported(instr, f"the shadow of pointer {op.ref} cannot be computed")

    # -- small helpers ---------------------------------------------------------------
    def slot(self, value):
        if value not in self.slots:
            t = self.act.value_type(value)
            ref = self.alloca(t, "d")
            self.allocas.append(f"  store {t} {adjoint_zero(t)}, ptr {ref}")
            self.slots[value] = ref
        return self.slots[value]

    def accumulate(self, value, contribution):
        """d(value) += contribution (a :class:`rules.Lane`: to one lane of it)."""
        s, t = self.slot(value), self.act.value_type(value)
        old = self.e(f"load {t}, ptr {s}")
        if isinstance(contribution, Lane):
            elem = vector_shape(t)[1]
            lane = self.e(f"extractelement {t} {old}, {contribution.index}")
            lane = self.e(f"fadd {SUM} {elem} {lane}, {contribution.value}")
            self.e.line(f"store {t} {self.e(f'insertelement {t} {old}, {elem} {lane}, {contribution.index}')}, ptr {s}")
            return
        self.e.line(f"store {t} {self.e(f'fadd {SUM} {t} {old}, {contribution}')}, ptr {s}")

    def take_adjoint(self, value):
        """Read d(value) and reset it to zero."""
        s, t = self.slot(value), self.act.value_type(value)
        dy = self.e(f"load {t}, ptr {s}", "dy")
        self.e.line(f"store {t} {adjoint_zero(t)}, ptr {s}")
        return dy

    def copy_array(self, helper, stack, array):
        """Copy array ``(data, nitems, itemsize)`` onto ``stack`` (``helper`` "snapshot") or
        back from it ("restore")."""
        data, nitems, itemsize = array
        size = self.e(f"mul i64 {nitems.ref}, {itemsize.ref}")
        self.e.line(f"call void @ad.{helper}(ptr {stack}, ptr {data.ref}, i64 {size})")

    def _replays(self):
        """``{latch: adcore.plan.replays.Replay}``: the loops whose scratch arrays the reverse
        pass refills instead of restoring their snapshots (none with the ``replays`` pass off)."""
        if not enabled("replays"):
            return {}
        with stage("plan: replays"):
            return find_replays(self.cfg, self.analyses.pointers, self.clobbers, self.snapshots)

    def replay_prelude(self, block):
        """At the start of the reverse of latch ``block``: whether the replay runs this
        iteration (an ``i1``: the forward pass pushed whether it copied the arrays), and the
        replay's inputs ``{value: name}``."""
        replay, materialise = self.replays[block], self.values.materialise
        refilled = self.e(f"icmp eq i8 {self.pop('i8')}, 0", "refill")
        inputs = {v: materialise(Operand(v.ref, v.type, v)) for v in replay.inputs}
        return refilled, inputs

    def push(self, type_, ref, stack="%ad.stack"):
        self.stack_types.add(type_)
        self.e.line(f"call void @ad.push.{runtime.type_tag(type_)}(ptr {stack}, {type_} {ref})")

    def pop(self, type_):
        self.stack_types.add(type_)
        return self.e(f"call {type_} @ad.pop.{runtime.type_tag(type_)}(ptr %ad.stack)", "pop")

    def shadow(self, op):
        """The shadow address of pointer ``op`` (which points into shadowed memory)."""
        d = op.defn
        if d in self.shadow_ref:
            return self.shadow_ref[d]
        if d not in self.shadow_def:
            raise UnsupportedError(f"pointer {op.ref}", self.spec.pyname,
                                   "its shadow cannot be computed")
        return self.values.materialise(Operand(self.shadow_def[d].ref, "ptr", self.shadow_def[d]))

    # -- the saving plan -------------------------------------------------------------
    def saves(self, block):
        """What the forward pass of ``block`` pushes, in order: ``(kind, value, segment)``,
        the segment counting the calls differentiated as calls before the push."""
        cyclic = block in self.cfg.cyclic
        events = []
        if len(block.preds) > 1 and block not in self.cfg.ivs and block not in self.cfg.branch_merges:
            events.append(("pred", None, 0))
        segment = 0
        for instr in self.defs(block):
            segment += self.is_callee(instr)
            if instr in self.values.registers and cyclic and instr not in self.inverted \
                    and instr not in self.advanced:
                events.append(("reg", instr, segment))
        for phi, iv in self.inverted.items():
            if iv.outside is block and cyclic and phi.block not in self.exit_tests:
                events.append(("iv", phi, segment))
        for phi, advance in self.advanced.items():
            if advance.outside is block and cyclic:
                events.append(("iv", phi, segment))
        return events

    def cache_plan(self):
        """What the forward pass pushes per iteration of a loop (after ``build``):
        ``(block, kind, value)`` with kind "reg" (a kept value), "pred" (which
        predecessor entered ``block``), "iv" (a loop counter's start), "snapshot" (``value``
        the array ``(data, nitems, itemsize)`` copied at the end of the iteration), "refill"
        (such an array the reverse pass may refill instead, :mod:`adcore.plan.replays`) or "choice"
        (``value`` the :class:`adcore.plan.replays.Replay` whose choice is pushed)."""
        out = [(b, kind, v) for b, plan in self.plans.items() for kind, v, _ in plan]
        for latch, arrays in self.snapshots.at.items():
            refilled = self.replays[latch].arrays if latch in self.replays else ()
            out += [(latch, "refill" if array in refilled else "snapshot", array) for array in arrays]
            if refilled:
                out.append((latch, "choice", self.replays[latch]))
        return out

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
            counters = self._counters(header, iv)
            ends = test.end_values(self.e, self.values.materialise, counters)
            if list(counters) == [iv.phi] and commuting(self.cfg, loop, iv, self.analyses.pointers,
                                                          self.clobbers.distinct_arrays,
                                                          self.clobbers.data_args):
                limit = self.alloca(iv.phi.type, "limit")
                self.e.line(f"store {iv.phi.type} {ends[iv.phi]}, ptr {limit}")
                self.limits[header] = limit
                self.e.lines.append(f"{COUNTER_START}{header.name}")     # set once plans are known
            else:
                for phi in counters:
                    self.e.line(f"store {phi.type} {ends[phi]}, ptr {self.values.registers[phi]}")
            self.exit_tests[header] = test

    def _nothing_kept_in(self, loop):
        """No value, record or array is pushed per iteration of ``loop`` (after the plans)."""
        latch = loop.latches[0]
        return not any(self.plans[b] for b in loop.blocks) and latch not in self.snapshots.at \
            and latch not in self.replays

    def counter_start(self, header_name):
        """Where the reverse of a counted loop starts: its counter set to the first value
        when :mod:`adcore.plan.loop_order` lets it count up, else to the last."""
        header = next(h for h in self.cfg.ivs if h.name == header_name)
        iv = self.cfg.ivs[header]
        phi = iv.phi
        start = iv.init.ref if header in self.forward_order else \
            self.e(f"load {phi.type}, ptr {self.limits[header]}")
        self.e.line(f"store {phi.type} {start}, ptr {self.values.registers[phi]}")

    def _counters(self, header, iv):
        """``{phi: step instr}``: the kept header phis ``p = phi [init, outside], [p + C,
        latch]`` of the loop with counter ``iv``."""
        out = {}
        for phi in self.defs(header):
            if phi.opcode != "phi" or phi not in self.values.registers:
                continue
            step = phi.operands[phi.incoming.index(iv.latch)].defn
            if step is not None and step_of(step, phi) is not None:
                out[phi] = step
        return out

    def _inverted_phis(self):
        """The kept counters of loops (``_counters``): the reverse pass runs them backwards
        instead of saving them."""
        return {phi: InductionVariable(phi, None, iv.outside, iv.latch, step)
                for header, iv in self.cfg.ivs.items() for phi, step in self._counters(header, iv).items()}

    def _advanced_phis(self):
        """The kept header phis that advance by a nested loop's trips (:mod:`adcore.reverse.advances`):
        the reverse pass runs them backwards instead of saving them per iteration."""
        available = availability(self.values, self.inverted)
        out = {}
        for header in self.cfg.ivs:
            for phi in header.phis:
                if phi in self.values.registers and phi not in self.inverted:
                    advance = find_advance(phi, self.cfg, available)
                    if advance is not None:
                        out[phi] = advance
        return out

    def previous_advances(self, header):
        """Before the reverse tail of ``header`` branches: ``[(register, type, value)]``, the
        value each advanced phi of ``header`` had one iteration earlier, computed with the
        loop's counters run back for the while.  (Computed before the branch, the back edge
        keeps only the counters' steps and stores, which LLVM folds into the loop's latch.)"""
        advances = [a for a in self.advanced.values() if a.phi.block is header]
        if not advances:
            return []
        e = self.e
        kept = []
        for phi, inv in self.inverted.items():
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

    # -- emission --------------------------------------------------------------------
    def build(self):
        """The gradient function and its helpers, as IR text."""
        blocks = self.cfg.rpo
        for iv in self.cfg.ivs.values():
            self.values.register(iv.phi)
        reverse_bodies, tail_values = {}, {}
        replays = {}
        for block in blocks:
            self.e.lines, self.values.memo = [], {}
            if block in self.replays:
                flag, inputs = self.replay_prelude(block)
                prelude, self.e.lines = self.e.lines, []
                after = self.e.fresh("rpdone")
                entry = self.replays[block].clone(self.e, inputs, after, self.hinted)
                replays[block] = (prelude, flag, entry, self.e.lines, after)
                self.e.lines = []
            for instr in reversed(block.instrs):
                reverse_instruction(self, instr)
            self.enter_loops(block)
            if block in self.cfg.ivs:
                tail_values[block] = self.values.materialise(self.cfg.ivs[block].init)
            if block in self.cfg.branch_merges:
                tail_values[block] = self.values.materialise(self.cfg.branch_merges[block][0])
            reverse_bodies[block] = (self.e.lines, self.values.memo)
        self.inverted = self._inverted_phis()
        self.advanced = self._advanced_phis()
        plans = self.plans = {b: self.saves(b) for b in blocks}
        self.forward_order = {h for h in self.limits if self._nothing_kept_in(self.cfg.loop_at[h])}
        self.forward_labels = {latch.ref: self.e.fresh("latch") for latch in self.replays}
        forward = []
        for block in blocks:
            self.e.lines = []
            self.forward_block(block, plans[block])
            forward += self.e.lines
        reverse = []
        for block in blocks:
            body, self.values.memo = reverse_bodies[block]
            self.e.lines = []
            self.restore_snapshots(block, replays.get(block))
            for line in body:
                if line.startswith(POPS):
                    self.restore([ev for ev in plans[block] if ev[2] == int(line[len(POPS):])])
                elif line.startswith(COUNTER_START):
                    self.counter_start(line[len(COUNTER_START):])
                else:
                    self.e.lines.append(line)
            self.reverse_tail(block, plans[block], tail_values.get(block))
            reverse += [label("ad.r." + block.name)] + self.e.lines
        if self.spec.split:
            return self.split_functions(forward, reverse)
        self.e.lines = []
        self.exits()
        exits = self.e.lines
        seed = [f"{t} %ad.seed.{j}" for j, t in enumerate(self.spec.seed[0])] if self.spec.seed else []
        params = ", ".join(self.parameters() + seed)
        entry = ["ad.entry:"]
        for stack in runtime.FRAME_STACKS + (("%ad.finals",) if self.snapshots.at else ()):
            entry += [f"  {stack} = alloca {runtime.STACK_TYPE}",
                      f"  store {runtime.STACK_TYPE} zeroinitializer, ptr {stack}"]
        entry += self.allocas + [f"  br label {self.func.entry.ref}"]
        body = "\n".join(entry + forward + exits + reverse)
        return f"define i32 @{self.spec.symbol}({params}) {{\n{body}\n}}\n" + self.loop_hints.text()

    def parameters(self):
        """The gradient function's parameters: the primal's, then the shadows'.  For arrays
        that share no memory (the call checked it, and shadows never overlap anything), the
        data pointers are ``noalias``: LLVM may then keep shadow sums in registers and
        vectorise the reverse loops."""
        noalias = set()
        if self.spec.distinct_arrays:
            noalias = {self.func.args[i].ref for i in self.spec.data_args} | set(self.shadow_ref.values())
        params = [f"{a.type} {a.ref}" for a in self.func.args] + self.shadow_params
        return [p.replace("ptr ", "ptr noalias ", 1) if p.split()[-1] in noalias else p for p in params]

    def split_functions(self, forward, reverse):
        """A callee's augmented forward and reverse (see :mod:`adcore.reverse.calls`)."""
        e, split = self.e, self.spec.split
        rt, pair = split.ret_type, split.pair
        kept = list(self.values.registers.items())
        e.lines = []
        e.label("ad.fwdexit")
        result = e(f"phi {rt} " + ", ".join(f"[ {s.ref}, {b.ref} ]" for b, s in self.ret_blocks), "result") \
            if rt != "void" else None
        which = e("phi i32 " + ", ".join(f"[ {k}, {b.ref} ]" for k, (b, _) in enumerate(self.ret_blocks)), "ret")
        for value, reg in kept:
            self.push(value.type, e(f"load {value.type}, ptr {reg}"))
        returns = len(self.ret_blocks)
        if returns > 1:                  # which return was taken (one return: nothing to tell)
            self.push("i32", which)
        e.line(f"ret {rt} {result}" if result else "ret void")
        exit_ = e.lines
        e.lines = []
        which = self.pop("i32") if returns > 1 else "0"
        for value, reg in reversed(kept):
            e.line(f"store {value.type} {self.pop(value.type)}, ptr {reg}")
        cases = " ".join(f"i32 {k}, label {local('ad.r.' + b.name)}"
                         for k, (b, _) in enumerate(self.ret_blocks[1:], 1))
        e.line(f"switch i32 {which}, label {local('ad.r.' + self.ret_blocks[0][0].name)} [ {cases} ]")
        start = e.lines
        e.lines = []
        e.label("ad.done")
        adjoints = "undef"
        for j, index in enumerate(self.spec.active):
            arg = self.func.args[index]
            value = e(f"load {arg.type}, ptr {self.slots[arg]}") if arg in self.slots \
                else float_const(arg.type, 0)
            adjoints = e(f"insertvalue {pair.adjoint_type} {adjoints}, {arg.type} {value}, {j}")
        e.line(f"ret {pair.adjoint_type} {adjoints}" if self.spec.active else "ret void")
        done = e.lines
        args = [f"{a.type} {a.ref}" for a in self.func.args] + self.shadow_params
        dret = [f"{rt} %ad.dret"] if self.spec.ret_active else []
        stacks = [f"ptr {s}" for s in runtime.FRAME_STACKS]
        entry = ["ad.entry:"] + self.allocas
        augmented = "\n".join(entry + [f"  br label {self.func.entry.ref}"] + forward + exit_)
        reverse_ = "\n".join(entry + start + reverse + done)
        return (f"define internal {rt} @{pair.augmented}({', '.join(args + stacks)}) {{\n{augmented}\n}}\n"
                f"define internal {pair.adjoint_type} @{pair.reverse}({', '.join(args + dret + stacks)}) "
                f"{{\n{reverse_}\n}}\n")

    def forward_block(self, block, plan):
        e = self.e
        e.label(block.name)
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
        if self.spec.split and instr.opcode == "alloca" and not instr.synthetic:   # outlives the call
            return arena_alloca(self, instr, instr.ref)
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
            if block in self.forward_order:
                self.reverse_tail_upwards(block, iv, cur)
                return
            first = e(f"icmp eq {iv.phi.type} {cur}, {tail_value}")
            back = e.fresh("back")
            e.line(f"br i1 {first}, label {self.edge(block, iv.outside)}, label {back}")
            e.label(back)
            for phi, inv in self.inverted.items():
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

    def seed_returned_array(self, bytes_field):
        """Add ``dret`` into the shadow of the returned array before the reverse pass.  The
        returned array must have the seed's shape and (C-contiguous) strides: else the bytes
        field is set to -1 and the reverse pass is skipped."""
        e = self.e
        data = abi.field_offset(abi.DATA)
        if data not in self.returned_shadow:
            raise UnsupportedError("the returned array", self.spec.pyname,
                                   "only a newly allocated float array can be returned")
        t = self.spec.seed[1]
        ndim = (len(self.spec.seed[0]) - abi.SHAPE) // 2

        def returned(position):        # a field of the returned array struct
            return e(f"load i64, ptr {e(f'getelementptr i8, ptr {self.retptr.ref}, i64 {abi.field_offset(position)}')}")

        nitems = returned(abi.NITEMS)
        same = e(f"icmp eq i64 {nitems}, %ad.seed.{abi.NITEMS}")
        for d in range(ndim):
            n, stride = returned(abi.shape_field(d)), returned(abi.stride_field(ndim, d))
            same_n = e(f"icmp eq i64 {n}, %ad.seed.{abi.shape_field(d)}")
            same_stride = e(f"icmp eq i64 {stride}, %ad.seed.{abi.stride_field(ndim, d)}")
            same_stride = e(f"or i1 {same_stride}, {e(f'icmp ule i64 {n}, 1')}")
            same = e(f"and i1 {same}, {e(f'and i1 {same_n}, {same_stride}')}")
        e.line(f"br i1 {same}, label %ad.rseed.add, label %ad.rseed.bad")
        e.label("ad.rseed.bad")
        e.line(f"store i64 -1, ptr {bytes_field}")
        e.line(f"call void @free(ptr {e('load ptr, ptr %ad.stack')})")
        self.release()
        e.line(f"ret i32 {abi.STATUS_OK}")
        e.label("ad.rseed.add")
        self.memory_types.add(t)
        shadow = e(f"load ptr, ptr {self.returned_shadow[data]}")
        bytes_ = e(f"mul i64 {nitems}, {runtime.SIZES[t]}")
        e.line(f"call void @ad.accumulate.{t}(ptr {shadow}, ptr %ad.seed.{abi.DATA}, i64 {bytes_})")

    def release(self):
        """Run the deferred destructors and frees of the forward pass."""
        self.e.line(f"call void @ad.release(ptr %ad.dtors, ptr @{CALL_DTOR})")
        self.e.line(f"call void @ad.release(ptr %ad.rawfrees, ptr @{FREE})")

    def exits(self):
        e, spec = self.e, self.spec
        rt = spec.result_type
        e.label("ad.fwdexit")
        status = e("phi i32 " + ", ".join(f"[ {s.ref}, {b.ref} ]" for b, s in self.ret_blocks), "status")
        which = e("phi i32 " + ", ".join(f"[ {k}, {b.ref} ]" for k, (b, _) in enumerate(self.ret_blocks)), "ret")
        base = e("load ptr, ptr %ad.stack")
        top = e(f"load ptr, ptr {e(f'getelementptr inbounds {runtime.STACK_TYPE}, ptr %ad.stack, i32 0, i32 1')}")
        used = e(f"sub i64 {e(f'ptrtoint ptr {top} to i64')}, {e(f'ptrtoint ptr {base} to i64')}")
        field = e(f"getelementptr inbounds {rt}, ptr {self.retptr.ref}, i32 0, i32 {spec.bytes_field}")
        e.line(f"store i64 {used}, ptr {field}")
        ok = e(f"or i1 {e(f'icmp eq i32 {status}, {abi.STATUS_OK}')}, {e(f'icmp eq i32 {status}, {abi.STATUS_NONE}')}")
        e.line(f"br i1 {ok}, label %ad.rseed, label %ad.fail")
        e.label("ad.fail")
        e.line(f"call void @free(ptr {base})")
        self.release()
        e.line(f"ret i32 {status}")
        e.label("ad.rseed")
        if spec.seed:
            self.seed_returned_array(field)
        e.line("br label %ad.rstart")
        e.label("ad.rstart")
        for array in self.snapshots.bases():     # the primal's final contents, put back at the end
            self.copy_array("snapshot", "%ad.finals", array)
        cases = " ".join(f"i32 {k}, label {local('ad.r.' + b.name)}"
                         for k, (b, _) in enumerate(self.ret_blocks[1:], 1))
        e.line(f"switch i32 {which}, label {local('ad.r.' + self.ret_blocks[0][0].name)} [ {cases} ]")
        e.label("ad.done")
        for index, field_no in zip(spec.active, spec.active_fields):
            arg, zero = self.func.args[index], float_const(self.func.args[index].type, 0)
            value = e(f"fadd {arg.type} {e(f'load {arg.type}, ptr {self.slots[arg]}')}, {zero}") \
                if arg in self.slots else zero           # + 0.0: an untouched adjoint reads 0.0, not -0.0
            e.line(f"store {arg.type} {value}, ptr {e(f'getelementptr inbounds {rt}, ptr {self.retptr.ref}, i32 0, i32 {field_no}')}")
        if self.snapshots.at:
            for array in reversed(self.snapshots.bases()):
                self.copy_array("restore", "%ad.finals", array)
            e.line(f"call void @free(ptr {e('load ptr, ptr %ad.finals')})")
        e.line(f"call void @free(ptr {e('load ptr, ptr %ad.stack')})")
        self.release()
        e.line(f"ret i32 {abi.STATUS_OK}")


def pred_type(block):
    """The integer type that records which predecessor ``block`` was entered from."""
    return "i8" if len(block.preds) < 128 else "i32"


def gradient_module(module, gen):
    """IR text of ``module`` (the cleaned primal) plus the gradient function built by ``gen``
    and the augmented forward and reverse functions of the calls it differentiates."""
    return runtime.with_generated(module, gen, lambda gens: runtime.helpers(
        set().union({"ptr"}, *(g.stack_types for g in gens)),
        set().union(*(g.memory_types for g in gens))))
