"""Adjoint generation: from one cleaned primal function to one gradient function.

The gradient function has Numba's calling convention: ``i32 @grad(ptr retptr,
ptr excinfo, <primal arguments>, <shadow arrays>)``.  It runs

1. the *augmented forward pass*: the primal blocks, copied, plus stores of the values
   the reverse pass needs into registers (stack slots).  A register of a block inside a
   loop is saved on the value stack before it is overwritten; loop counters with a
   constant step are not saved but run backwards (from end values computed by
   :mod:`adcore.analysis.exit_values` where the exit test tells them), and so are header phis that
   advance by a nested loop's trip count (:mod:`adcore.plan.advances`); scratch arrays a loop
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

A function differentiated as a call (:mod:`adcore.reverse.callees`) is split where the forward pass
ends: an augmented forward that pushes every kept value before it returns, and a reverse
that pops them.  A block's pushes made after a call (on top of the callee's tape) are
popped just before the callee's reverse.
"""
from ..ir.model import Operand, Synthetic, label, vector_shape
from ..ir.writer import SUM, Emitter, GeneratorBase, adjoint_zero, function_text
from ..errors import UnsupportedError
from ..plan.function_plan import plan_function
from ..plan.kept_derivatives import kept_derivatives
from ..plan.pushes import Pushes
from ..rules.scalar import Lane
from . import value_stack as runtime
from .callee_sites import CallSite
from .forward_pass import ForwardPass
from .function_exits import FunctionExits
from .instructions import reverse_instruction
from .reverse_pass import COUNTER_START, POPS, ReversePass
from .call_slots import call_slots
from .shadows import shadow_pointers, stack_shadow


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


class AdjointGenerator(ForwardPass, ReversePass, FunctionExits, GeneratorBase):
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
        self.copies_used = False     # whether the forward pass copies rule operands (%ad.copies)
        self.loop_bytes_used = False  # whether parallel loops' tapes add to the bytes cached (%ad.loopbytes)
        self.memory_types = set()    # float types of memcpy adjoints and seeds used
        self.limits = {}             # header -> register of the last counter value (loop_order)
        self.pushes = None           # plan.pushes.Pushes, once the reverse bodies are written
        self.in_reserved_loop = False   # whether the forward block being written is in such a loop
        self.exit_tests = {}         # header -> ExitTest of the loops whose counters' ends are computed
        self.loop_exits = {}         # the only block a counted loop exits to -> [its header]
        for header, iv in self.cfg.ivs.items():
            exits = [b for b in iv.latch.succ if b not in self.cfg.loop_at[header].blocks]
            if len(exits) == 1 and len(exits[0].preds) == 1:
                self.loop_exits.setdefault(exits[0], []).append(header)
        self.ret_blocks = []         # (block, status operand)
        self.returned_shadow = {}    # byte offset in the return slot -> alloca of a shadow pointer
        self.before = {}             # call -> synthetic code the forward pass runs before it
        self.loop_tapes = {}         # parallel loop's call -> (its tape's address, shadowed arrays, keep)
        plan = plan_function(self)
        self.snapshots, self.values, self.replays = plan.snapshots, plan.values, plan.replays
        self.hinted_latches, self.loop_hints = plan.hinted_latches, plan.loop_hints
        self.derivative_def = kept_derivatives(self)     # call -> its kept derivative's instruction
        self.shadow_def = shadow_pointers(self)
        self.call_slots = call_slots(self) if spec.split else set()
        for slot in self.call_slots:          # the shadow lives in the reverse's own frame
            if slot in self.shadow_def:
                syn = self.shadow_def.pop(slot)
                self.allocas.append("  " + stack_shadow(self, slot, syn.ref))
                self.shadow_ref[slot] = syn.ref

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
        right after its primal pointer, a kept derivative right after its call, operand
        copies right before their call."""
        phis = block.phis
        out = phis + [self.shadow_def[p] for p in phis if p in self.shadow_def]
        for instr in block.instrs[len(phis):]:
            for syn in self.before.get(instr, ()):
                out.append(syn)
                out.extend(syn.defines)
            out.append(instr)
            if instr in self.shadow_def:
                out.append(self.shadow_def[instr])
            if instr in self.derivative_def:
                out.append(self.derivative_def[instr])
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

    def push(self, type_, ref, stack="%ad.stack"):
        """Push ``ref`` on ``stack``; with no capacity check in a loop whose room for pushes
        was reserved before it (:class:`adcore.plan.pushes.Reserve`)."""
        self.stack_types.add(type_)
        reserved = "reserved." if stack == "%ad.stack" and self.in_reserved_loop else ""
        self.e.line(f"call void @ad.push.{reserved}{runtime.type_tag(type_)}(ptr {stack}, {type_} {ref})")

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


    # -- emission --------------------------------------------------------------------
    def build(self):
        """The gradient function and its helpers, as IR text."""
        for iv in self.cfg.ivs.values():
            self.values.register(iv.phi)
        bodies, tails, replays = self._reverse_bodies()
        self.pushes = Pushes(self)
        self.forward_labels = {latch.ref: self.e.fresh("latch") for latch in self.replays}
        forward = []
        for block in self.cfg.rpo:
            self.e.lines = []
            self.forward_block(block, self.pushes.by_block[block])
            forward += self.e.lines
        reverse = []
        for block in self.cfg.rpo:
            reverse += self._reverse_block(block, bodies[block], tails.get(block), replays.get(block))
        if self.spec.split:
            return self.split_functions(forward, reverse)
        return self._gradient_function(forward, reverse)

    def _reverse_bodies(self):
        """Each block's reverse, written first (they decide which values the forward pass
        keeps): ``({block: (lines, memo)}, {block: the value its reverse tail tests},
        {latch: replay code})``."""
        bodies, tails, replays = {}, {}, {}
        for block in self.cfg.rpo:
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
                tails[block] = self.values.materialise(self.cfg.ivs[block].init)
            if block in self.cfg.branch_merges:
                tails[block] = self.values.materialise(self.cfg.branch_merges[block][0])
            bodies[block] = (self.e.lines, self.values.memo)
        return bodies, tails, replays

    def _reverse_block(self, block, body, tail_value, replay_code):
        """The lines of ``block``'s reverse: snapshots restored, its body with the pops and
        counter starts the plan now knows put in, and its tail."""
        lines, self.values.memo = body
        pushes = self.pushes.by_block[block]
        self.e.lines = []
        self.restore_snapshots(block, replay_code)
        for line in lines:
            if line.startswith(POPS):
                self.restore([ev for ev in pushes if ev[2] == int(line[len(POPS):])])
            elif line.startswith(COUNTER_START):
                self.counter_start(line[len(COUNTER_START):])
            else:
                self.e.lines.append(line)
        self.reverse_tail(block, pushes, tail_value)
        return [label("ad.r." + block.name)] + self.e.lines

    def _gradient_function(self, forward, reverse):
        """The gradient function's text: entry (value stacks and allocas), forward pass,
        exits, reverse pass; then the loop hints' metadata."""
        self.e.lines = []
        self.exits()
        exits = self.e.lines
        seed = [f"{t} %ad.seed.{j}" for j, t in enumerate(self.spec.seed[0])] if self.spec.seed else []
        params = ", ".join(self.parameters() + seed)
        entry = ["ad.entry:"]
        for stack in runtime.FRAME_STACKS + (("%ad.finals",) if self.snapshots.at else ()) + \
                (("%ad.copies",) if self.copies_used else ()):
            entry += [f"  {stack} = alloca {runtime.STACK_TYPE}",
                      f"  store {runtime.STACK_TYPE} zeroinitializer, ptr {stack}"]
            if stack in runtime.RESERVED:
                entry.append(f"  call void @ad.stack.take(ptr {stack}, ptr {runtime.RESERVED[stack]}, i64 1)")
        if self.loop_bytes_used:
            entry += ["  %ad.loopbytes = alloca i64", "  store i64 0, ptr %ad.loopbytes",
                      f"  %ad.looptapes = alloca {runtime.STACK_TYPE}",
                      f"  store {runtime.STACK_TYPE} zeroinitializer, ptr %ad.looptapes"]
        entry += self.allocas + [f"  br label {self.func.entry.ref}"]
        return function_text(f"i32 @{self.spec.symbol}({params})", entry + forward + exits + reverse) \
            + self.loop_hints.text()

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


def gradient_module(module, gen):
    """IR text of ``module`` (the cleaned primal) plus the gradient function built by ``gen``
    and the augmented forward and reverse functions of the calls it differentiates."""
    return runtime.with_generated(module, gen, lambda gens: runtime.helpers(
        set().union({"ptr"}, *(g.stack_types for g in gens)),
        set().union(*(g.memory_types for g in gens))))
