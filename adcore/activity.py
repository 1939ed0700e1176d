"""Pointer-base, activity and read-only analyses.

* Pointer bases: every pointer value is traced through GEPs, casts, phis and selects
  to the function argument it points into (``UNKNOWN`` when it cannot be).
* Activity (Enzyme's two directions): a value is *varied* when derivative-carrying data
  can flow into it (Active arguments, float loads from shadowed memory), *useful* when it
  can flow to a differentiated output (stores into shadowed memory, the active return);
  it is *active* when both.  Integer and pointer values are never active.
* Reloadable loads: a load that no later write may clobber can be repeated in the
  reverse pass instead of being cached.
"""
import re

from .errors import UnsupportedError
from .ir import Arg, FLOAT_TYPES

UNKNOWN = "unknown"
NOWHERE = "nowhere"              # constants, globals: not derived from any argument

ALLOCATORS = ("NRT_MemInfo_alloc_aligned", "NRT_MemInfo_alloc_safe_aligned", "NRT_MemInfo_alloc",
              "NRT_MemInfo_alloc_safe")
MEMINFO_DATA = ("NRT_MemInfo_data_fast", "NRT_MemInfo_data")
MEMORY_INTRINSICS = ("llvm.memcpy.", "llvm.memmove.", "llvm.memset.")


class MemInfo:
    """The base of a pointer to the Numba meminfo header of allocation ``alloc``
    (the array data itself has the allocation call as its base)."""

    def __init__(self, alloc):
        self.alloc = alloc


_BYTE_GEP = re.compile(r"=\s*getelementptr\s+(?:inbounds\s+|nuw\s+|nusw\s+)*i8,")


def stack_slot(op):
    """``(alloca, byte offset)`` when pointer ``op`` is an alloca or a constant byte offset
    into one (Numba keeps array structs there when they escape to C helpers), else None."""
    d = op.defn
    if d is None or isinstance(d, Arg):
        return None
    if d.opcode == "alloca":
        return d, 0
    if d.opcode == "getelementptr" and len(d.operands) == 2 and d.operands[1].is_const \
            and _BYTE_GEP.search(d.text) and d.operands[0].defn is not None \
            and getattr(d.operands[0].defn, "opcode", None) == "alloca":
        return d.operands[0].defn, int(d.operands[1].ref)
    return None


def is_memory_intrinsic(instr):
    return instr.opcode == "call" and (instr.callee or "").startswith(MEMORY_INTRINSICS)

PURE_CASTS = ("bitcast", "addrspacecast")
FLOAT_OPS = ("fadd", "fsub", "fmul", "fdiv", "frem", "fneg", "fpext", "fptrunc",
             "select", "phi", "freeze", "call")
INACTIVE_RESULTS = ("fcmp", "fptosi", "fptoui")
MEMORY_WRITERS = ("store", "atomicrmw", "cmpxchg")
PUN_TYPES = {"i64": "double", "i32": "float"}


class Activity:
    def __init__(self, func, kernel_name, active_args, shadow_args, retptr, ret_active,
                 is_differentiable_call, is_pure_call, data_args=(), distinct_arrays=True):
        self.func, self.kernel_name = func, kernel_name
        self.active_args, self.shadow_args = set(active_args), set(shadow_args)
        self.retptr, self.ret_active = retptr, ret_active
        self.data_args = set(data_args)
        self.base = self._pointer_bases()
        self.pun_type = {}
        self.element_type = {}
        self.shadow_allocs = self._float_allocations()
        self.varied = self._varied(is_differentiable_call)
        self.useful = self._useful()
        self.active = self.varied & self.useful
        self.is_pure_call = is_pure_call
        self.distinct_arrays = distinct_arrays
        self.written = self._written_bases()
        self._reach = {}

    def unsupported(self, instr, detail=""):
        return UnsupportedError(f"'{instr.text}'", self.kernel_name, detail)

    # -- pointers ---------------------------------------------------------------------
    def _pointer_bases(self):
        """Trace pointers to their base object: an argument, an allocation (the NRT call
        whose data it points into), a meminfo header, an alloca; or UNKNOWN."""
        base = {a: a for a in self.func.args if a.type == "ptr"}
        meminfo = {}
        slot_values = {}                 # pointers stored in stack slots, by slot
        for instr in self.func.instructions():
            if instr.opcode == "store" and instr.operands[0].type == "ptr":
                slot = stack_slot(instr.operands[1])
                if slot is not None:
                    slot_values.setdefault(slot, []).append(instr.operands[0])

        def of(op):
            if op.defn is None:
                return NOWHERE
            return base.get(op.defn)

        changed = True
        while changed:
            changed = False
            for instr in self.func.instructions():
                if instr.type != "ptr":
                    continue
                if instr.opcode in ("getelementptr",) + PURE_CASTS:
                    new = of(instr.operands[0])
                elif instr.opcode in ("phi", "select"):
                    ops = instr.operands if instr.opcode == "phi" else instr.operands[1:]
                    seen = {of(o) for o in ops} - {None, NOWHERE}
                    new = seen.pop() if len(seen) == 1 else (UNKNOWN if seen else None)
                elif instr.opcode == "call" and instr.callee in ALLOCATORS:
                    new = meminfo.setdefault(instr, MemInfo(instr))
                elif instr.opcode == "alloca":
                    new = instr
                elif (instr.opcode == "load" or instr.opcode == "call" and instr.callee in MEMINFO_DATA) \
                        and isinstance(of(instr.operands[0]), MemInfo):
                    new = of(instr.operands[0]).alloc
                elif instr.opcode == "load" and stack_slot(instr.operands[0]) in slot_values:
                    seen = {of(v) for v in slot_values[stack_slot(instr.operands[0])]} - {None, NOWHERE}
                    new = seen.pop() if len(seen) == 1 else (UNKNOWN if seen else None)
                else:
                    new = UNKNOWN
                if new is not None and base.get(instr) != new:
                    if base.get(instr) is not None and base[instr] != new:
                        new = UNKNOWN
                    if base.get(instr) != new:
                        base[instr] = new
                        changed = True
        return base

    def base_of(self, op):
        if op.defn is None:
            return NOWHERE
        return self.base.get(op.defn, UNKNOWN)

    def is_shadowed(self, op):
        """True when pointer operand ``op`` points into memory with a shadow: a
        Duplicated array or an allocation that holds floats."""
        b = self.base_of(op)
        if b == UNKNOWN and (self.shadow_args or self.shadow_allocs):
            raise UnsupportedError(f"pointer {op.ref}", self.kernel_name,
                                   "cannot tell which array it points into")
        return b in self.shadow_args or b in self.shadow_allocs

    def _float_allocations(self):
        """Allocations whose data is read or written as floats (they get zeroed shadows);
        also records the float type each base holds, for memcpy adjoints."""
        out = set()
        for instr in self.func.instructions():
            if instr.opcode == "load":
                ptr, t = instr.operands[0], instr.type
            elif instr.opcode == "store":
                ptr, t = instr.operands[1], instr.operands[0].type
            else:
                continue
            b = self.base_of(ptr)
            if t in FLOAT_TYPES and b != UNKNOWN:
                self.element_type[b] = t
                if getattr(b, "callee", None) in ALLOCATORS:
                    out.add(b)
        changed = True
        while changed:                   # copies between float memory make float memory
            changed = False
            for instr in self.func.instructions():
                if is_memory_intrinsic(instr) and not instr.callee.startswith("llvm.memset"):
                    dst, src = self.base_of(instr.operands[0]), self.base_of(instr.operands[1])
                    for a, b in ((dst, src), (src, dst)):
                        if getattr(a, "callee", None) in ALLOCATORS and a not in out and \
                                (b in out or b in self.shadow_args):
                            out.add(a)
                            self.element_type.setdefault(a, self.element_type.get(b, "double"))
                            changed = True
        return out

    # -- activity ---------------------------------------------------------------------
    def _varied(self, is_differentiable_call):
        varied = set(self.active_args)
        changed = True
        while changed:
            changed = False
            for instr in self.func.instructions():
                if instr in varied:
                    continue
                op = instr.opcode
                if op == "load":
                    hit = self.is_shadowed(instr.operands[0])
                    if hit and not instr.is_float:
                        self._check_punned_copy(instr)
                else:
                    srcs = instr.operands[1:] if op == "select" else instr.operands
                    hit = any(o.defn in varied for o in srcs)
                    if hit and (op not in FLOAT_OPS or not instr.is_float):
                        if op in INACTIVE_RESULTS or op in MEMORY_WRITERS or instr.is_float is False and op in ("select", "phi", "freeze"):
                            hit = False
                        else:
                            raise self.unsupported(instr, "no derivative rule for this instruction")
                    if hit and op == "call" and not is_differentiable_call(instr):
                        raise self.unsupported(instr, f"no derivative rule for callee '{instr.callee}'")
                if hit:
                    varied.add(instr)
                    changed = True
        for instr in self.func.instructions():
            if instr.opcode in MEMORY_WRITERS[1:] and any(o.defn in varied for o in instr.operands):
                raise self.unsupported(instr, "atomic update of a differentiable value")
            if instr.opcode == "call" and instr not in varied:
                if any(o.defn in varied for o in instr.operands):
                    raise self.unsupported(instr, f"no derivative rule for callee '{instr.callee}'")
                if not is_differentiable_call(instr) and not is_memory_intrinsic(instr) and any(
                        o.type == "ptr" and (self.base_of(o) in self.shadow_args
                                             or self.base_of(o) in self.shadow_allocs)
                        for o in instr.operands):
                    raise self.unsupported(instr, f"callee '{instr.callee}' receives a differentiable array")
        return varied

    def _check_punned_copy(self, load):
        """An integer load from a float array is allowed only as a bitwise copy into
        another float array (instcombine writes some copies that way); it is then
        differentiated as the float of the same width."""
        width = PUN_TYPES.get(load.type)
        users = [i for i in self.func.instructions() if any(o.defn is load for o in i.operands)]
        if width is None or not all(u.opcode == "store" and u.operands[0].defn is load
                                    and u.operands[1].defn is not load and self.is_shadowed(u.operands[1])
                                    for u in users):
            raise self.unsupported(load, "an integer load reads a differentiable float array "
                                         "(type punning is not differentiable)")
        self.pun_type[load] = width

    def value_type(self, value):
        """The float type a value is differentiated as (its own, or that of a punned copy)."""
        return self.pun_type.get(value, value.type)

    def _useful(self):
        useful = set()
        work = []
        self.unshadowed_writes = set()   # array arguments without shadow that receive varied values
        for instr in self.func.instructions():
            if instr.opcode == "store":
                value, ptr = instr.operands
                if value.defn in self.varied and self.base_of(ptr) in self.data_args \
                        and self.base_of(ptr) not in self.shadow_args:
                    self.unshadowed_writes.add(self.base_of(ptr))
                if value.defn in self.varied:
                    if self.is_shadowed(ptr) or (self.ret_active and ptr.defn is self.retptr):
                        work.append(value.defn)
            elif is_memory_intrinsic(instr) and not instr.callee.startswith("llvm.memset"):
                dst, src = instr.operands[0], instr.operands[1]
                if self.is_shadowed(src) and not self.is_shadowed(dst) and self.base_of(dst) in self.data_args:
                    self.unshadowed_writes.add(self.base_of(dst))
        while work:
            v = work.pop()
            if v in useful:
                continue
            useful.add(v)
            if not isinstance(v, Arg) and v.opcode != "load":
                work.extend(o.defn for o in v.operands if o.defn in self.varied)
        return useful

    # -- memory -----------------------------------------------------------------------
    def _written_bases(self):
        """For each block, the bases written by its instructions, as (position, base)."""
        written = {}
        for block in self.func.blocks:
            for pos, instr in enumerate(block.instrs):
                if instr.opcode in MEMORY_WRITERS:
                    ptr = instr.operands[1] if instr.opcode == "store" else instr.operands[0]
                    written.setdefault(block, []).append((pos, self.base_of(ptr)))
                elif is_memory_intrinsic(instr):
                    written.setdefault(block, []).append((pos, self.base_of(instr.operands[0])))
                elif instr.opcode == "call" and not self.is_pure_call(instr):
                    for o in instr.operands:
                        if o.type == "ptr":
                            written.setdefault(block, []).append((pos, self.base_of(o)))
        return written

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

    def can_reload(self, load):
        """True when no write that may alias ``load``'s address can follow it, so the
        reverse pass (which leaves primal memory as the forward pass left it) may
        load it again instead of caching it."""
        b = self.base_of(load.operands[0])
        if b == NOWHERE or isinstance(b, MemInfo) and load.type == "ptr":
            return True                  # constants; a meminfo's data pointer never changes
        if b == UNKNOWN:
            return False

        def clobbers(w):
            if w == UNKNOWN or w == b:
                return True
            return not self.distinct_arrays and w in self.data_args and b in self.data_args

        pos = load.block.instrs.index(load)
        if any(clobbers(w) for p, w in self.written.get(load.block, ()) if p > pos):
            return False
        return not any(clobbers(w) for blk in self._reachable(load.block)
                       for _, w in self.written.get(blk, ()))
