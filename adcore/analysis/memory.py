"""Memory analyses: which memory has a shadow, and which writes may clobber a load.

* Shadowed memory: the Duplicated arrays (and Const arrays given scratch shadows), and
  the allocations whose data is used as floats (they get zeroed shadow allocations).
* Clobbering: the bases each block may write, so that a load no later write can alias is
  repeated in the reverse pass instead of being cached (the reverse pass leaves primal
  memory as the forward pass left it).
"""
from ..errors import UnsupportedError
from ..ir.model import is_float_type
from ..known_functions import DEFERRED_FREES, consumes_only
from .pointers import UNKNOWN, MemInfo, is_allocation, is_heap_allocation

MEMORY_INTRINSICS = ("llvm.memcpy.", "llvm.memmove.", "llvm.memset.")
MEMORY_WRITERS = ("store", "atomicrmw", "cmpxchg")


def is_memory_intrinsic(instr):
    return instr.opcode == "call" and (instr.callee or "").startswith(MEMORY_INTRINSICS)


def is_memcpy(instr):
    return is_memory_intrinsic(instr) and not instr.callee.startswith("llvm.memset")


def written_pointers(instr, rule_of, is_pure_call):
    """The pointers through which ``instr`` may write (all pointer operands of a call
    that is neither pure nor handled by a rule)."""
    if instr.opcode in MEMORY_WRITERS:
        return [instr.operands[1] if instr.opcode == "store" else instr.operands[0]]
    if is_memory_intrinsic(instr):
        return [instr.operands[0]]
    if instr.opcode != "call" or instr.callee in DEFERRED_FREES or consumes_only(instr):
        return []                    # frees happen after the reverse pass; print writes nothing
    if rule_of(instr) is not None:
        return [instr.operands[k] for k in rule_of(instr).outputs]
    if not is_pure_call(instr):
        return [o for o in instr.operands if o.type == "ptr"]
    return []


class ShadowedMemory:
    """Which objects have shadows: ``shadow_args`` (the data pointers of shadowed array
    arguments) and the allocations ``func`` uses as float memory; and the float type
    each object holds.  ``kernel_name`` names the function in errors."""

    def __init__(self, func, pointers, shadow_args, rule_of, kernel_name, is_callee=None):
        self.func, self.pointers, self.kernel_name = func, pointers, kernel_name
        self.shadow_args = set(shadow_args)
        self.rule_of = rule_of
        self.is_callee = is_callee or (lambda instr: False)
        self.element_type = {}
        self.shadow_allocs = self._float_allocations()

    def has_shadow(self, base):
        return base in self.shadow_args or base in self.shadow_allocs

    def is_shadowed(self, op):
        """True when pointer operand ``op`` points into memory with a shadow: a
        Duplicated array or an allocation that holds floats."""
        bs = self.pointers.bases(op)
        if bs == UNKNOWN:
            if self.shadow_args or self.shadow_allocs:
                raise UnsupportedError(f"pointer {op.ref}", self.kernel_name,
                                       "cannot tell which array it points into",
                                       getattr(op.defn, "location", None))
            return False
        flags = {self.has_shadow(b) for b in bs}
        if len(flags) > 1:
            raise UnsupportedError(f"pointer {op.ref}", self.kernel_name,
                                   "it may point into a differentiated or a constant array",
                                   getattr(op.defn, "location", None))
        return flags == {True}

    def reaches_shadow(self, bases):
        """True when some object of ``bases`` (not UNKNOWN) has a shadow."""
        return bases != UNKNOWN and any(self.has_shadow(b) for b in bases)

    def aggregate_has_shadow(self, value):
        """True when a struct value holds a pointer into shadowed memory."""
        return any(self.reaches_shadow(b) for b in self.pointers.aggregate_bases(value).values())

    def mirrored(self, op):
        """True when every object pointer ``op`` may point into has a shadow (or is the
        meminfo of an allocation that has one): its shadow pointer can be computed."""
        bs = self.pointers.bases(op)
        return bs != UNKNOWN and bool(bs) and all(
            self.has_shadow(b) or isinstance(b, MemInfo) and b.alloc in self.shadow_allocs for b in bs)

    def mixed_constants(self, data_args):
        """Array arguments (of ``data_args``) without shadow that a pointer may point into
        together with shadowed memory (``np.ascontiguousarray(x)``: x itself or a copy):
        they need a scratch shadow for the merged pointer to have one."""
        out = set()
        for bs in self.pointers.base.values():
            if self.reaches_shadow(bs):
                out.update(b for b in bs if not self.has_shadow(b) and b in data_args)
        return out

    def element_type_of(self, *ops):
        """The float type stored in the memory ``ops`` point into (double by default)."""
        for op in ops:
            bs = self.pointers.bases(op)
            if bs != UNKNOWN:
                for b in bs:
                    if b in self.element_type:
                        return self.element_type[b]
        return "double"

    def _float_allocations(self):
        """Allocations whose data is read or written as floats, or handed to custom rules
        (a heap temporary only BLAS calls touch, like ``A @ x`` fed to another product,
        carries derivatives between them), or to calls differentiated as calls; memcpy
        spreads float-ness both ways."""
        out = set()
        for instr in self.func.instructions():
            if instr.opcode in ("load", "store"):
                ptr, t = (instr.operands[0], instr.type) if instr.opcode == "load" else \
                    (instr.operands[1], instr.operands[0].type)
                bs = self.pointers.bases(ptr)
                if is_float_type(t) and bs != UNKNOWN:
                    for b in bs:
                        self.element_type[b] = t
                        if is_allocation(b):
                            out.add(b)
            elif instr.opcode == "call" and (self.rule_of(instr) is not None or self.is_callee(instr)):
                for o in instr.operands:
                    bs = self.pointers.bases(o) if o.type == "ptr" else UNKNOWN
                    if bs != UNKNOWN:
                        out.update(b for b in bs if is_heap_allocation(b))
        changed = True
        while changed:
            changed = False
            for instr in self.func.instructions():
                if is_memcpy(instr):
                    changed |= self._spread_through_copy(instr, out)
        return out

    def _spread_through_copy(self, copy, out):
        dst, src = self.pointers.bases(copy.operands[0]), self.pointers.bases(copy.operands[1])
        if dst == UNKNOWN or src == UNKNOWN:
            return False
        grew = False
        for xs, ys in ((dst, src), (src, dst)):
            if any(y in out or y in self.shadow_args for y in ys):
                for x in xs:
                    if is_allocation(x) and x not in out:
                        out.add(x)
                        t = next((self.element_type[y] for y in ys if y in self.element_type), "double")
                        self.element_type.setdefault(x, t)
                        grew = True
        return grew


class Clobbers:
    """For each block, the bases its instructions may write; answers whether a write
    may follow a given instruction.  With ``distinct_arrays`` False (the caller's arrays
    may overlap) any two array arguments are taken to alias.  ``outside`` are the bases
    code outside the function may write after it returns (a callee's pointer arguments,
    whose reverse runs after the caller has gone on): never reloaded.  ``unwritten`` are
    bases nothing in the program writes (:mod:`adcore.analysis.read_only`): always reloaded."""

    def __init__(self, func, pointers, rule_of, is_pure_call, data_args, distinct_arrays, outside=(),
                 unwritten=()):
        self.pointers, self.rule_of, self.is_pure_call = pointers, rule_of, is_pure_call
        self.data_args, self.distinct_arrays = set(data_args), distinct_arrays
        self.outside, self.unwritten = frozenset(outside), frozenset(unwritten)
        self.written = {}
        for block in func.blocks:
            for pos, instr in enumerate(block.instrs):
                for p in self._written_pointers(instr):
                    self.written.setdefault(block, []).append((pos, pointers.bases(p)))
        self._reach = {}

    def _written_pointers(self, instr):
        return written_pointers(instr, self.rule_of, self.is_pure_call)

    def written_bases(self):
        """Every base some instruction may write (UNKNOWN if some write cannot be traced)."""
        out = set()
        for writes in self.written.values():
            for _, bases in writes:
                if bases == UNKNOWN:
                    return UNKNOWN
                out |= bases
        return out

    def _reachable(self, block):
        if block not in self._reach:
            seen, stack = set(), list(block.succ)
            while stack:
                b = stack.pop()
                if b not in seen:
                    seen.add(b)
                    stack.extend(b.succ)
            self._reach[block] = seen
        return self._reach[block]

    def _written_after(self, instr, clobbers):
        if self.outside and clobbers(self.outside):
            return True
        pos = instr.block.instrs.index(instr)
        if any(clobbers(ws) for p, ws in self.written.get(instr.block, ()) if p > pos):
            return True
        return any(clobbers(ws) for blk in self._reachable(instr.block)
                   for _, ws in self.written.get(blk, ()))

    def clobbered_after(self, instr, op):
        """True when a write that may alias pointer ``op`` can follow ``instr``."""
        bs = self.pointers.bases(op)
        if bs == UNKNOWN:
            return True
        if bs and bs <= self.unwritten:
            return False
        return self._written_after(instr, lambda ws: ws == UNKNOWN or bool(ws & bs))

    def can_reload(self, load):
        """True when no write that may alias ``load``'s address can follow it, so the
        reverse pass may load it again instead of caching it."""
        bs = self.pointers.bases(load.operands[0])
        if bs == UNKNOWN:
            return False
        if load.type == "ptr" and bs and all(isinstance(b, MemInfo) for b in bs):
            return True                  # a meminfo's data pointer never changes
        if not bs or bs <= self.unwritten:
            return True                  # constants, memory nothing writes

        def clobbers(ws):
            if ws == UNKNOWN or ws & bs:
                return True
            return not self.distinct_arrays and bool(ws & self.data_args) and bool(bs & self.data_args)

        return not self._written_after(load, clobbers)
