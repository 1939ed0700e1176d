"""Tangent generation: from one cleaned primal function to one forward-mode function.

The tangent function has Numba's calling convention: ``i32 @tan(ptr retptr, ptr excinfo,
<primal arguments>, <tangents of float arguments>, <tangents of arrays>)`` with ``k``
tangents (lanes) per float argument and array; Const arrays that receive derivatives get
``k`` zeroed internal shadows.  Compiled for arrays that share no memory, it first checks
that they do not (else it returns status -1, having run nothing).  It runs the primal
blocks once; right after each active instruction come its ``k`` tangents (the rule table
of :mod:`adcore.rules.scalar`: :func:`adcore.rules.scalar.tangent_rule`), after each pointer into
shadowed memory its ``k`` shadow pointers (:mod:`adcore.reverse.shadows`), after each store into
shadowed memory the stores of the tangents into the shadows.  There is no reverse pass
and no value stack; shadow allocations are freed when the function returns.

Calls with a custom rule call the rule's forward (:mod:`adcore.rules.custom`) just before
the call; a call without one is refused.  A float return's tangents are result fields.
In *stack* mode (for :func:`adcore.hvp`, which differentiates adcore's own gradient IR)
the value-stack calls of the gradient are mirrored on a tangent stack per lane: a float
pushed has its tangent pushed, a float popped its tangent popped, a pointer its shadow
pointer; and the reverse rules'
zero guards ``select (v != 0), v·p, 0`` (:meth:`adcore.ir.writer.Expr.unless_zero`) are
differentiated as the ``v·p`` they stand for: at ``v = 0`` its tangent is ``dv·p``, not the
guard's 0 (else ``hvp`` would be wrong wherever an adjoint is exactly zero).

Stack mode is :mod:`adcore.forward.stack_mode`'s, the stores, memory intrinsics, internal
shadows and overlap check are :mod:`adcore.forward.shadow_memory`'s; this module assembles
the function.
"""
from .. import numba_abi
from ..known_functions import CALL_DTOR, FREE
from ..analysis.memory import is_memory_intrinsic
from ..errors import UnsupportedError
from ..ir.model import Operand, is_float_type, strip_metadata
from ..ir.writer import Emitter, GeneratorBase, Expr, alignment, float_const
from ..reverse import value_stack as runtime
from ..reverse.callee_sites import check_arguments
from ..reverse.shadows import shadow_pointers
from ..rules.scalar import tangent_rule
from .rule_calls import forward_rule_call
from .shadow_memory import ShadowMemory
from .stack_mode import StackMode, no_stack


class ForwardSpec:
    """What to differentiate in forward mode: ``lanes`` directions; ``tangent_args`` the
    LLVM argument indices of float arguments with tangents; ``shadows`` as in
    :class:`adcore.reverse.generator.Spec`, the first ``given`` of them parameters (tangents of
    arrays), the others zeroed internally; ``result_type`` the LLVM struct ``retptr`` points to,
    ``tangent_field`` its first tangent field (None: the return has no tangent) and
    ``status_field`` its i64 field: 0, or -1 when the function was compiled for arrays
    that share no memory (``noalias``), ``checks_overlap`` and some do (it returns at once,
    having run nothing)."""

    split = None          # forward mode differentiates no function as a call (adjoint.Spec.split)

    def __init__(self, symbol, pyname, lanes, tangent_args, shadows, given, result_type, tangent_field,
                 status_field, noalias=None, checks_overlap=False, return_type="i32"):
        self.checks_overlap, self.return_type = checks_overlap, return_type
        self.symbol, self.pyname, self.lanes = symbol, pyname, lanes
        self.tangent_args, self.shadows, self.given = tangent_args, shadows, given
        self.result_type, self.tangent_field, self.status_field = result_type, tangent_field, status_field
        self.noalias = noalias or {}   # data arg index -> ndim of arrays that share no memory (nor tangents)

    # what :func:`adcore.pipeline.analyse` reads
    @property
    def active(self):
        return self.tangent_args

    @property
    def ret_active(self):
        return self.tangent_field is not None


class _Lane:
    """One direction's shadows: the shadow parameter of each shadowed argument and the
    shadow pointer of each pointer into shadowed memory (what :func:`shadow_pointers`
    reads of a generator)."""

    def __init__(self, gen, j, shadow_ref):
        self.gen, self.memory, self.cfg, self.e, self.spec = gen, gen.memory, gen.cfg, gen.e, gen.spec
        self.retptr, self.shadow_ref, self.returned_shadow = gen.retptr, shadow_ref, {}
        self.j = j
        self.shadow_def = shadow_pointers(self)

    def alloca(self, type_, hint):
        return self.gen.alloca(type_, hint)

    def unsupported(self, instr, detail):
        return self.gen.unsupported(instr, detail)

    def popped_shadow(self, pop, ref):
        """Stack mode: ``ref = `` the shadow of the pointer ``pop`` pops, popped from this
        lane's tangent stack of that value stack."""
        return f"{ref} = call ptr @ad.pop.ptr(ptr {self.gen.tangent_stack(pop.operands[0])[self.j]})"

    def shadow(self, op):
        d = op.defn
        if d in self.shadow_ref:
            return self.shadow_ref[d]
        if d not in self.shadow_def:
            raise UnsupportedError(f"pointer {op.ref}", self.gen.spec.pyname, "its shadow cannot be computed")
        return self.shadow_def[d].ref


class TangentGenerator(StackMode, ShadowMemory, GeneratorBase):
    """Builds the tangent function of one primal function for one :class:`ForwardSpec`.
    ``stack_rule(instr)`` tells the value-stack calls of stack mode (None otherwise)."""

    def __init__(self, func, spec, analyses, context=None, stack_rule=None, callees=None):
        self.func, self.spec, self.context, self.callees = func, spec, context, callees
        self.cfg, self.memory, self.act = analyses.cfg, analyses.memory, analyses.activity
        self.rule_of, self.stack_rule = analyses.rule_of, stack_rule or no_stack
        args, k = func.args, spec.lanes
        self.retptr = args[0] if spec.result_type is not None else None    # a callee's is a shadowed pointer
        taken = {a.name for a in args} | {b.name for b in func.blocks}
        taken |= {i.name for i in func.instructions() if i.name}
        self.e = Emitter(taken)
        self.exit_ref = self.e.fresh("fexit")
        self.dtors, self.rawfrees = self.e.fresh("dtors"), self.e.fresh("rawfrees")
        self.tstacks = {}                # a value stack of the gradient -> its lanes' tangent stacks
        self.allocas, self.stack_types, self.ret_blocks = [], {"ptr"}, []
        self.params = [f"{a.type}{' noalias' if i in spec.noalias else ''} {a.ref}"
                       for i, a in enumerate(args)]
        self.arg_tangent = {}
        for index in spec.tangent_args:
            arg = args[index]
            for j in range(k):
                ref = f"%ad.targ{index}.{j}"
                self.params.append(f"{arg.type} {ref}")
                self.arg_tangent[arg, j] = ref
        shadow_refs = [{} for _ in range(k)]
        self.array_fields = [[a.ref for a in args[d - numba_abi.DATA:d + 1 + 2 * nd]]
                             for d, nd in spec.noalias.items()]
        self.internal = []               # (fields of an array, its k internal shadows)
        for s, (data_index, types, data_pos) in enumerate(spec.shadows):
            if s >= spec.given:
                refs = [self.e.fresh(f"ish{s}.{j}") for j in range(k)]
                fields = args[data_index - data_pos:data_index - data_pos + len(types)]
                self.internal.append(([a.ref for a in fields], refs))
            for j in range(k):
                names = [f"%ad.tsh{s}.{j}.{p}" for p in range(len(types))]
                if s < spec.given:
                    self.params += [f"{t}{' noalias' if p == data_pos and spec.noalias else ''} {n}"
                                    for p, (t, n) in enumerate(zip(types, names))]
                    self.array_fields.append(names)
                shadow_refs[j][args[data_index]] = names[data_pos] if s < spec.given else refs[j]
        self.lanes = [_Lane(self, j, shadow_refs[j]) for j in range(k)]
        self.names = {}

    def tangent(self, op, j):
        """The IR spelling of lane ``j``'s tangent of operand ``op`` (a zero constant when it
        has none)."""
        d = op.defn
        if (d, j) in self.arg_tangent:
            return self.arg_tangent[d, j]
        if d is not None and d in self.act.active:
            if (d, j) not in self.names:
                self.names[d, j] = self.e.fresh("dt")
            return self.names[d, j]
        return "0" if op.type.startswith("i") else float_const(op.type, 0)

    def has_tangent(self, op):
        return (op.defn, 0) in self.arg_tangent or op.defn is not None and op.defn in self.act.active

    # -- emission --------------------------------------------------------------------
    def build(self):
        """The tangent function, as IR text (its helpers are :func:`tangent_module`'s)."""
        for block in self.func.blocks:
            self.block(block)
        self.exit()
        self.e.entry += self.frame()
        return self.e.define(f"{self.spec.return_type} @{self.spec.symbol}({', '.join(self.params)})")

    def frame(self):
        """The entry block's lines: the frame's stacks, the allocas, the result's status and
        tangents set to zero, the overlap check, the internal shadows, then the primal's
        entry."""
        entry = []
        for stack in [self.dtors, self.rawfrees] + self.tangent_stacks():
            entry += [f"  {stack} = alloca {runtime.STACK_TYPE}",
                      f"  store {runtime.STACK_TYPE} zeroinitializer, ptr {stack}"]
        entry += self.allocas
        if self.spec.status_field is not None:
            entry.append(f"  store i64 0, ptr {self.status(entry)}")
        if self.spec.tangent_field is not None:      # the return's tangents start at zero
            t = self.ret_type
            for j in range(self.spec.lanes):
                entry.append(f"  store {t} {float_const(t, 0)}, ptr {self.result_field(j, entry)}")
        start = self.e.fresh("start")
        entry += self.overlap_check(start) if self.spec.checks_overlap else [f"  br label {start}"]
        return entry + [f"{start[1:]}:"] + self.internal_shadows() + [f"  br label {self.func.entry.ref}"]

    def status(self, lines):
        """The address of the result's status field (emitted into ``lines``)."""
        ref = self.e.fresh("status")
        lines.append(f"  {ref} = getelementptr inbounds {self.spec.result_type}, ptr {self.retptr.ref}, i32 0, "
                     f"i32 {self.spec.status_field}")
        return ref

    @property
    def ret_type(self):
        stores = [i for i in self.func.instructions() if i.opcode == "store" and i.operands[1].defn is self.retptr]
        return stores[0].operands[0].type if stores else "double"

    def result_field(self, j, lines=None):
        ref = self.e.fresh("tret")
        text = f"  {ref} = getelementptr inbounds {self.spec.result_type}, ptr {self.retptr.ref}, i32 0, " \
               f"i32 {self.spec.tangent_field + j}"
        (self.e.lines if lines is None else lines).append(text)
        return ref

    def block(self, block):
        e, k = self.e, self.spec.lanes
        e.label(block.name)
        phis = block.phis
        for phi in phis:
            e.line(strip_metadata(phi.text))
        for lane in self.lanes:
            for phi in phis:
                if phi in lane.shadow_def:
                    e.line(lane.shadow_def[phi].text)
        for phi in phis:
            if phi in self.act.active:
                for j in range(k):
                    entries = ", ".join(f"[ {self.tangent(o, j)}, {b.ref} ]"
                                        for o, b in zip(phi.operands, phi.incoming))
                    e.line(f"{self.tangent(Operand(phi.ref, phi.type, phi), j)} = phi {phi.type} {entries}")
        for instr in block.instrs[len(phis):]:
            self.instruction(instr)

    def instruction(self, instr):
        e = self.e
        if instr.opcode == "ret":
            self.ret_blocks.append((instr.block, instr.operands[0] if instr.operands else None))
            e.line(f"br label {self.exit_ref}")
            return
        if self.callees is not None and self.callees.is_callee(instr):
            self.call_site(instr)
            return
        stack = self.stack_rule(instr)
        if stack is not None:
            self.stack_call(instr, stack)
            return
        rule = self.rule_of(instr)
        if rule is not None:
            for lane in self.lanes:
                forward_rule_call(self, instr, rule, lane)
        e.line(strip_metadata(instr.text))     # per-instruction metadata numbers are not the module's
        for lane in self.lanes:
            syn = lane.shadow_def.get(instr)
            if syn is not None:
                e.line(syn.text)
                for call, stack_ref in (("@ad.shadow.raw", self.rawfrees), ("@ad.shadow.alloc", self.dtors)):
                    if call in syn.text:
                        e.line(f"call void @ad.push.ptr(ptr {stack_ref}, ptr {syn.ref})")
        if instr.opcode == "store":
            self.store(instr)
        elif is_memory_intrinsic(instr):
            self.memory_intrinsic(instr)
        elif instr in self.act.active and rule is None:
            for lane in self.lanes:
                self.tangent_of(instr, lane)

    def call_site(self, instr):
        """A call of a function differentiated as a call: its tangent function for the
        site's activity pattern (the varied float arguments' tangents and the shadowed
        pointers' shadows, lane by lane), or the call itself when nothing varies."""
        ops, e, k = instr.operands, self.e, self.spec.lanes
        check_arguments(self, instr)
        ret_active = instr in self.act.active
        active = tuple(i for i, o in enumerate(ops) if is_float_type(o.type) and self.has_tangent(o))
        shadowed = tuple(i for i, o in enumerate(ops) if o.type == "ptr" and self.memory.is_shadowed(o))
        if not (active or shadowed or ret_active):
            e.line(strip_metadata(instr.text))
            return
        args = [f"{o.type} {o.ref}" for o in ops]
        args += [f"{ops[i].type} {self.tangent(ops[i], j)}" for i in active for j in range(k)]
        args += [f"ptr {lane.shadow(ops[i])}" for i in shadowed for lane in self.lanes]
        symbol = self.callees.request(instr.callee, active, shadowed, ret_active)
        if not ret_active:
            call = f"call {instr.type} @{symbol}({', '.join(args)})"
            e.line(f"{instr.ref} = {call}" if instr.ref else call)
            return
        struct = returned_type(instr.type, k)
        both = e(f"call {struct} @{symbol}({', '.join(args)})", "both")
        e.line(f"{instr.ref} = extractvalue {struct} {both}, 0")
        for j in range(k):
            self.names[instr, j] = e(f"extractvalue {struct} {both}, {1 + j}")

    def tangent_of(self, instr, lane):
        j, e = lane.j, self.e
        if instr.opcode == "load":
            out = self.tangent(Operand(instr.ref, instr.type, instr), j)
            e.line(f"{out} = load {instr.type}, ptr {lane.shadow(instr.operands[0])}{alignment(instr)}")
            return
        guarded = self.zero_guarded(instr)
        if guarded is not None:
            value = self.tangent(guarded, j)
        else:
            X = Expr(e, instr.type)
            tangents = [self.tangent(o, j) if self.has_tangent(o) else None for o in instr.operands]
            try:
                value = tangent_rule(instr)(X, instr, tangents)
            except KeyError:
                raise self.unsupported(instr, "no tangent rule for this instruction") from None
        out = self.names.get((instr, j))
        if out is not None:          # already used (by a phi on a back edge): copy into it
            e.line(f"{out} = select i1 true, {instr.type} {value}, {instr.type} {value}")
        else:
            self.names[instr, j] = value

    def exit(self):
        e, t = self.e, self.spec.return_type
        e.label(self.exit_ref)
        if t.startswith("{"):                  # a float result and its tangents
            value = self.ret_blocks[0][1]
            fields = [e(f"phi {value.type} " + ", ".join(f"[ {s.ref if j == 0 else self.tangent(s, j - 1)}, "
                                                          f"{b.ref} ]" for b, s in self.ret_blocks))
                      for j in range(1 + self.spec.lanes)]
            status = "undef"
            for j, field in enumerate(fields):
                status = e(f"insertvalue {t} {status}, {value.type} {field}, {j}")
        elif t != "void":
            status = e(f"phi {t} " + ", ".join(f"[ {s.ref}, {b.ref} ]" for b, s in self.ret_blocks), "status")
        e.line(f"call void @ad.release(ptr {self.dtors}, ptr @{CALL_DTOR})")
        e.line(f"call void @ad.release(ptr {self.rawfrees}, ptr @{FREE})")
        for stack in self.tangent_stacks():
            e.line(f"call void @free(ptr {e(f'load ptr, ptr {stack}')})")
        e.line("ret void" if t == "void" else f"ret {t} {status}")


def returned_type(float_type, lanes):
    """What a tangent function returns for a float result with tangents: ``{ T, k x T }``."""
    return "{ " + ", ".join([float_type] * (1 + lanes)) + " }"


def tangent_module(module, gen):
    """IR text of ``module`` (the cleaned primal) plus the tangent function built by ``gen``
    and those of the functions it differentiates as calls."""
    return runtime.with_generated(
        module, gen, lambda gens: runtime.helpers(set().union(*(g.stack_types for g in gens))))
