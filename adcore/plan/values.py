"""What the reverse pass recomputes and what the forward pass keeps (the save-or-recompute
policy).

A value the reverse pass needs is recomputed from values it already has when the
instruction is pure (arithmetic, casts, compares, GEPs, math calls, loads of memory nothing
later writes); the rest is kept in a *register*, a stack slot of the gradient function that
the forward pass stores and, inside a loop, pushes on the value stack before overwriting.
Inside a loop, a value is kept instead when recomputing it would make more bytes per
iteration necessary than keeping it (which ones: a minimum cut over the values the reverse
rules read, :mod:`adcore.plan.cache_cut`), and so is a call of exp or tanh, whose derivative is
its result, when it changes with every loop around it (:mod:`adcore.analysis.loop_variance`):
recomputing it would repeat the whole call (ADBench's GMM gradient at d=2 is 12% faster
keeping the exps of its log-sum-exp, the LSTM's 1.3x, a 10^6 log-sum-exp's 1.6x).
"""
from ..analysis.cfg import step_of
from ..analysis.loop_variance import LoopVariance
from ..analysis.pointers import UNKNOWN
from . import enabled
from .cache_cut import plan_cut
from ..ir.model import Arg, gep_element_type, rename, strip_metadata
from ..reverse import value_stack as runtime
from ..rules.scalar import math_name
from ..timings import stage

PURE_OPS = {"add", "sub", "mul", "udiv", "sdiv", "urem", "srem", "shl", "lshr", "ashr", "and",
            "or", "xor", "fadd", "fsub", "fmul", "fdiv", "frem", "fneg", "icmp", "fcmp", "select",
            "getelementptr", "extractvalue", "insertvalue", "zext", "sext", "trunc", "fpext",
            "fptrunc", "sitofp", "uitofp", "fptosi", "fptoui", "bitcast", "ptrtoint", "inttoptr",
            "addrspacecast", "freeze"}
INTEGER_INTRINSICS = ("llvm.smax.", "llvm.smin.", "llvm.umax.", "llvm.umin.", "llvm.abs.")
# math functions whose derivative is made from their result: recomputing one in the reverse
# pass repeats the whole call, where keeping it costs a push and a pop (sin, whose reverse
# needs cos(x) anyway, is recomputed: LLVM makes one sincos of the two)
SELF_DERIVED = {"exp", "exp2", "expm1", "tanh"}


def is_pure_call(instr):
    """True for a call of a math function or of an integer min, max or abs intrinsic."""
    return math_name(instr.callee) is not None or (instr.callee or "").startswith(INTEGER_INTRINSICS)


class Lazy:
    """An operand whose reverse-pass value is materialised on first ``str``."""

    def __init__(self, values, op):
        self.values, self.op, self.type = values, op, op.type
        self._ref = None

    def __str__(self):
        if self._ref is None:
            self._ref = self.values.materialise(self.op)
        return self._ref


class Values:
    """The reverse pass's access to primal values, for one gradient function: ``cfg`` and
    ``clobbers`` are the analyses (``restored``: loads that
    :mod:`adcore.plan.snapshots` makes repeatable), ``emitter`` writes the current code, ``alloca(type,
    hint)`` makes a stack slot in the entry block.  ``registers`` maps each kept value to
    its slot; ``memo`` the values already materialised in the current reverse block."""

    def __init__(self, cfg, clobbers, emitter, alloca, restored=()):
        self.cfg, self.clobbers, self.e, self.alloca = cfg, clobbers, emitter, alloca
        self.restored = restored     # loads of memory the reverse pass restores (snapshots.py)
        self.registers = {}
        self.memo = {}
        self.variance = LoopVariance(cfg, clobbers.can_reload, self._is_pure)
        self.needed = None           # () -> the values the reverse rules read (cache_cut)
        self._plan = None
        self.rewritten = frozenset() # bases the reverse pass writes (snapshots restored)
        self.changed_store = lambda store: False    # a store the forward pass does not copy
        self._stored = {}

    @staticmethod
    def _is_pure(instr):
        return instr.opcode in PURE_OPS or instr.opcode == "call" and is_pure_call(instr)

    def register(self, value):
        if value not in self.registers:
            self.registers[value] = self.alloca(value.type, "reg")
        return self.registers[value]

    def recomputable(self, instr):
        if instr.synthetic:
            return instr.opcode in PURE_OPS or instr.reloadable
        if instr.opcode in PURE_OPS:
            return True
        if instr.opcode == "call":
            return is_pure_call(instr)
        if instr.opcode == "load":
            return not instr.atomic and not instr.volatile \
                and (instr in self.restored or self.clobbers.can_reload(instr))
        return False

    def materialise(self, op):
        """The value of ``op`` at the current point of the reverse pass."""
        d = op.defn
        if d is None or isinstance(d, Arg):
            return op.ref
        if d in self.memo:
            return self.memo[d]
        if self.recomputable(d) and not self.cheaper_to_keep(d):
            mapping = {o.ref: self.materialise(o) for o in d.operands
                       if o.defn is not None and not isinstance(o.defn, Arg)}
            ref = self.e.fresh("re")
            mapping[d.ref] = ref
            self.e.line(strip_metadata(rename(d.text, mapping)))
        elif d not in self.registers and self.stored_copy(d) is not None:
            address = self.materialise(self.stored_copy(d).operands[1])
            ref = self.e(f"load {d.type}, ptr {address}", "st")
        else:
            ref = self.e(f"load {d.type}, ptr {self.register(d)}", "ld")
        self.memo[d] = ref
        return ref

    def stored_copy(self, value):
        """The store of ``value`` into memory that keeps it until the reverse pass, or None:
        then the reverse pass loads it back instead of the forward pass pushing it (the
        result of ``t[i] = tanh(...)`` in a loop, as Enzyme loads a cached value from the
        primal's own array).  The store follows ``value`` in its block, inside exactly one
        loop, at ``base[i]`` (``base`` set before the loop, ``i`` the loop's counter, a
        constant nonzero step, elements of the stored type): one address per iteration; and
        no other write that may alias ``base`` can follow it (nor code outside a callee
        after it returns, nor the reverse pass restoring a snapshot).  None when the
        ``stored_copies`` pass is off."""
        if not enabled("stored_copies"):
            return None
        if value not in self._stored:
            self._stored[value] = self._find_stored_copy(value)
        return self._stored[value]

    def _find_stored_copy(self, value):
        block = value.block
        loops = [loop for loop in self.cfg.loops if block in loop.blocks]
        if value.type not in runtime.SIZES or len(loops) != 1:
            return None
        loop = loops[0]
        iv = self.cfg.ivs.get(loop.header)
        instrs = block.instrs
        start = instrs.index(value) if value in instrs else None
        if iv is None or start is None:
            return None
        store = next((i for i in instrs[start + 1:] if i.opcode == "store" and len(i.operands) == 2
                      and i.operands[0].defn is value), None)
        if store is None or store.atomic or store.volatile or \
                store.operands[0].type != value.type or self.changed_store(store):
            return None
        gep = store.operands[1].defn
        if gep is None or isinstance(gep, Arg) or getattr(gep, "opcode", None) != "getelementptr" or \
                len(gep.operands) != 2 or gep_element_type(gep) != value.type or \
                gep.operands[1].defn is not iv.phi:
            return None
        base = gep.operands[0].defn
        if base is not None and not isinstance(base, Arg) and base.block in loop.blocks:
            return None
        clobbers = self.clobbers
        bs = clobbers.pointers.bases(gep.operands[0])
        if bs == UNKNOWN or not bs or bs & self.rewritten:
            return None

        def clobbering(ws):
            if ws == UNKNOWN or ws & bs:
                return True
            return not clobbers.distinct_arrays and bool(ws & clobbers.data_args) and \
                bool(bs & clobbers.data_args)

        if clobbers.outside and clobbering(clobbers.outside):
            return None
        pos = instrs.index(store)
        if any(clobbering(ws) for p, ws in clobbers.written.get(block, ()) if p > pos):
            return None
        for blk in clobbers._reachable(block):
            if any(clobbering(ws) for p, ws in clobbers.written.get(blk, ()) if blk is not block or p != pos):
                return None
        return store

    def free(self, value):
        """Whether ``value`` costs nothing per loop iteration: outside every loop, a loop
        counter the reverse pass runs backwards, or kept already."""
        return value.block not in self.cfg.cyclic or value in self.registers or self.runs_backwards(value)

    def saved_bytes(self, value, seen=None):
        """Bytes per loop iteration the value stack would take to make ``value`` available
        in the reverse pass by recomputation (0 when nothing new must be saved)."""
        seen = set() if seen is None else seen
        if value is None or isinstance(value, Arg) or value in seen or value in self.registers:
            return 0
        seen.add(value)
        if value.block not in self.cfg.cyclic or self.runs_backwards(value):
            return 0
        if self.recomputable(value):
            return sum(self.saved_bytes(o.defn, seen) for o in value.operands)
        return runtime.kept_bytes(value.type)

    def runs_backwards(self, phi):
        """True for a header phi the reverse pass can run backwards (a loop counter)."""
        iv = self.cfg.ivs.get(phi.block)
        if phi.opcode != "phi" or iv is None:
            return False
        step = phi.operands[phi.incoming.index(iv.latch)].defn
        return step is not None and step_of(step, phi) is not None

    def cheaper_to_keep(self, value):
        """Whether a recomputable value inside a loop is kept instead: as the minimum cut
        over the values the reverse rules need decides (:mod:`adcore.plan.cache_cut`), and for
        other values when recomputing it would save more bytes per iteration (a 1-byte
        comparison instead of an 8-byte running maximum).  A call in ``SELF_DERIVED`` is
        kept when it changes with every loop around it (one that does not, such as
        ``exp(q[k])`` in a loop over points, is recomputed: keeping it would push one value
        again and again).  With the ``recompute`` pass off, every value of an instruction
        of the primal inside a loop is kept."""
        if value.block not in self.cfg.cyclic or value.type not in runtime.SIZES:
            return False
        if not enabled("recompute") and not value.synthetic:
            return True
        if self.self_derived(value):
            return self.variance.varies_with_every_loop(value)
        plan = self.cut_plan()
        if value in plan.nodes:
            return value in plan.kept
        return runtime.size_of(value.type) < self.saved_bytes(value)

    @staticmethod
    def self_derived(value):
        """Whether ``value`` is a call in ``SELF_DERIVED`` (its derivative is its result)."""
        return value.opcode == "call" and math_name(value.callee) in SELF_DERIVED

    def cut_plan(self):
        """The :class:`adcore.plan.cache_cut.CutPlan`, made at the first decision (the loop
        counters are registers by then; an empty plan when the ``min_cut`` pass is off)."""
        if self._plan is None:
            with stage("plan: min_cut"):
                needed = self.needed() if self.needed and enabled("min_cut") else ()
                self._plan = plan_cut(self, needed)
        return self._plan
