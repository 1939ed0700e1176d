"""Pointer-base, activity and memory analyses.

* Pointer bases: every pointer value is traced through GEPs, casts, phis, selects and
  stack slots to the set of objects it may point into: arguments, allocations (the NRT
  call that made them), meminfo headers, allocas.  ``UNKNOWN`` when it cannot be told.
* Shadowed memory: Duplicated arrays, and allocations whose data is used as floats.
* Activity (Enzyme's two directions): a value is *varied* when derivative-carrying data
  can flow into it (Active arguments, float loads from shadowed memory), *useful* when it
  can flow to a differentiated output (stores into shadowed memory, the active return);
  it is *active* when both.  Integer and pointer values are never active.
* Reloadable loads: a load that no later write may clobber can be repeated in the
  reverse pass instead of being cached.
"""
import re

from .errors import UnsupportedError
from .ir import Arg, is_float_type

UNKNOWN = "unknown"
NOWHERE = frozenset()            # constants, null, globals: no argument or allocation

ALLOCATORS = ("NRT_MemInfo_alloc_aligned", "NRT_MemInfo_alloc_safe_aligned", "NRT_MemInfo_alloc",
              "NRT_MemInfo_alloc_safe", "NRT_MemInfo_new_varsize", "NRT_MemInfo_new_varsize_dtor")
RAW_ALLOCATORS = ("NRT_Allocate",)
MEMINFO_DATA = ("NRT_MemInfo_data_fast", "NRT_MemInfo_data")
MEMORY_INTRINSICS = ("llvm.memcpy.", "llvm.memmove.", "llvm.memset.")
DEFERRED_FREES = ("NRT_Free", "NRT_MemInfo_call_dtor", "NRT_decref")
# external helpers known to read only integers (shapes, strides) through their pointers
READS_NO_POINTERS = ("numba_attempt_nocopy_reshape",) + DEFERRED_FREES + ("NRT_incref",)
PURE_CASTS = ("bitcast", "addrspacecast")
FLOAT_OPS = ("fadd", "fsub", "fmul", "fdiv", "frem", "fneg", "fpext", "fptrunc",
             "select", "phi", "freeze", "call", "insertelement", "extractelement", "shufflevector")
INACTIVE_RESULTS = ("fcmp", "fptosi", "fptoui")
MEMORY_WRITERS = ("store", "atomicrmw", "cmpxchg")
PUN_TYPES = {"i64": "double", "i32": "float"}
_BYTE_GEP = re.compile(r"=\s*getelementptr\s+(?:inbounds\s+|nuw\s+|nusw\s+)*i8,")


class MemInfo:
    """The base of a pointer to the Numba meminfo header of allocation ``alloc``
    (the array data itself has the allocation call as its base)."""

    def __init__(self, alloc):
        self.alloc = alloc


def is_allocation(base):
    """Heap allocations (NRT calls) and stack allocations (allocas)."""
    return getattr(base, "callee", None) in ALLOCATORS + RAW_ALLOCATORS \
        or getattr(base, "opcode", None) == "alloca"


def is_memory_intrinsic(instr):
    return instr.opcode == "call" and (instr.callee or "").startswith(MEMORY_INTRINSICS)


def is_memcpy(instr):
    return is_memory_intrinsic(instr) and not instr.callee.startswith("llvm.memset")


def stack_slot(op):
    """``(alloca, byte offset)`` when pointer ``op`` is an alloca or a constant byte offset
    into one (Numba keeps array structs there when they escape to C helpers), else None."""
    d = op.defn
    if d is None or isinstance(d, Arg):
        return None
    if d.opcode == "alloca":
        return d, 0
    if d.opcode == "getelementptr" and len(d.operands) == 2 and d.operands[1].is_const \
            and _BYTE_GEP.search(d.text) and getattr(d.operands[0].defn, "opcode", None) == "alloca":
        return d.operands[0].defn, int(d.operands[1].ref)
    return None


def return_slot(op, retptr):
    """The byte offset into the return slot ``retptr`` that pointer ``op`` addresses, or None."""
    d = op.defn
    if d is retptr:
        return 0
    if getattr(d, "opcode", None) == "getelementptr" and len(d.operands) == 2 \
            and d.operands[0].defn is retptr and d.operands[1].is_const and _BYTE_GEP.search(d.text):
        return int(d.operands[1].ref)
    return None


def aggregate_index(text):
    """The first index of an extractvalue/insertvalue (``..., 4`` or ``..., 5, 0`` -> 4)."""
    return int(re.search(r",\s*([0-9]+)(?:\s*,\s*[0-9]+)*\s*$", text).group(1))


def _join(sets):
    if any(s == UNKNOWN for s in sets):
        return UNKNOWN
    return frozenset().union(*sets)


class Activity:
    def __init__(self, func, kernel_name, active_args, shadow_args, retptr, ret_active,
                 is_differentiable_call, is_pure_call, data_args=(), distinct_arrays=True,
                 rule_of=lambda instr: None):
        self.func, self.kernel_name = func, kernel_name
        self.active_args, self.shadow_args = set(active_args), set(shadow_args)
        self.retptr, self.ret_active = retptr, ret_active
        self.data_args = set(data_args)
        self.is_pure_call = is_pure_call
        self.rule_of = rule_of
        self.distinct_arrays = distinct_arrays
        self.users = {}
        for instr in func.instructions():
            for o in instr.operands:
                if o.defn is not None:
                    self.users.setdefault(o.defn, []).append(instr)
        self.base = self._pointer_bases()
        self.pun_type = {}
        self.element_type = {}
        self.shadow_allocs = self._float_allocations()
        self.needs_scratch = self._mixed_constants()
        if self.needs_scratch:           # the caller adds scratch shadows and starts again
            self.varied = self.useful = self.active = set()
            self.unshadowed_writes = set(self.needs_scratch)
            return
        self.varied = self._varied(is_differentiable_call)
        self.useful = self._useful()
        self.active = self.varied & self.useful
        self.written = self._written_bases()
        self._reach = {}

    def unsupported(self, instr, detail=""):
        return UnsupportedError(f"'{instr.text}'", self.kernel_name, detail, instr.location)

    # -- pointers ---------------------------------------------------------------------
    def _pointer_bases(self):
        base = {a: frozenset([a]) for a in self.func.args if a.type == "ptr"}
        meminfo = {}
        slot_values = {}                 # pointers stored in stack slots, by slot
        for instr in self.func.instructions():
            if instr.opcode == "store" and instr.operands[0].type == "ptr":
                slot = stack_slot(instr.operands[1])
                if slot is not None:
                    slot_values.setdefault(slot, []).append(instr.operands[0])

        def of(op):
            """The bases known so far for an operand; None while its definition has none yet."""
            if op.defn is None:
                return NOWHERE
            if isinstance(op.defn, Arg) or op.defn.type != "ptr":
                return base.get(op.defn, NOWHERE)
            return base.get(op.defn)

        def join(sets):
            known = [b for b in sets if b is not None]
            return _join(known) if known else None

        fields = self.fields = {}        # aggregate value -> {top-level index: bases}

        def field_of(op, index):
            if op.defn is None:
                return NOWHERE
            return fields.get(op.defn, {}).get(index)

        changed = True
        while changed:
            changed = False
            for instr in self.func.instructions():
                if instr.type.startswith("{") and self._track_aggregate(instr, of):
                    changed = True
                if instr.type != "ptr":
                    continue
                op = instr.opcode
                first = of(instr.operands[0]) if instr.operands else UNKNOWN
                if op in ("getelementptr",) + PURE_CASTS:
                    new = first
                elif op == "phi":
                    new = join([of(o) for o in instr.operands])
                elif op == "select":
                    new = join([of(o) for o in instr.operands[1:]])
                elif op == "call" and instr.callee in ALLOCATORS:
                    new = frozenset([meminfo.setdefault(instr, MemInfo(instr))])
                elif op == "call" and instr.callee in RAW_ALLOCATORS or op == "alloca":
                    new = frozenset([instr])
                elif (op == "load" or op == "call" and instr.callee in MEMINFO_DATA) and first is None:
                    new = None                   # the address is not traced yet
                elif (op == "load" or op == "call" and instr.callee in MEMINFO_DATA) and \
                        first != UNKNOWN and first and all(isinstance(b, MemInfo) for b in first):
                    new = frozenset(b.alloc for b in first)
                elif op == "extractvalue":
                    new = field_of(instr.operands[0], aggregate_index(instr.text))
                elif op == "load" and stack_slot(instr.operands[0]) in slot_values:
                    new = join([of(v) for v in slot_values[stack_slot(instr.operands[0])]])
                else:
                    new = UNKNOWN
                if new is None:
                    continue
                old = base.get(instr)
                new = new if old is None else _join([old, new])
                if new != old:
                    base[instr] = new
                    changed = True
        return base

    def _track_aggregate(self, instr, of):
        """Pointer fields of struct values (Numba's array structs built with insertvalue and
        merged by phis); returns True when something new was learnt."""
        op, known = instr.opcode, self.fields.get(instr, {})
        if op == "insertvalue":
            agg, value = instr.operands[0], instr.operands[1]
            new = dict(self.fields.get(agg.defn, {})) if agg.defn is not None else {}
            if value.type == "ptr" and of(value) is not None:
                new[aggregate_index(instr.text)] = of(value)
        elif op in ("phi", "freeze", "select"):
            new = {}
            for o in (instr.operands[1:] if op == "select" else instr.operands):
                for k, b in (self.fields.get(o.defn, {}) if o.defn is not None else {}).items():
                    new[k] = b if k not in new else _join([new[k], b])
        else:
            return False
        for k, b in known.items():
            new[k] = b if k not in new else _join([new[k], b])
        if new != known:
            self.fields[instr] = new
            return True
        return False

    def aggregate_has_shadow(self, value):
        """True when a struct value holds a pointer into shadowed memory."""
        return any(b != UNKNOWN and any(self.has_shadow(x) for x in b)
                   for b in self.fields.get(value, {}).values())

    def bases(self, op):
        """The objects pointer operand ``op`` may point into (a frozenset), or UNKNOWN."""
        return self.base.get(op.defn, NOWHERE)   # pointers into nothing traceable are not stored

    def has_shadow(self, base):
        return base in self.shadow_args or base in self.shadow_allocs

    def is_shadowed(self, op):
        """True when pointer operand ``op`` points into memory with a shadow: a
        Duplicated array or an allocation that holds floats."""
        bs = self.bases(op)
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

    def _mixed_constants(self):
        """Array arguments without shadow that a pointer may point into together with
        shadowed memory (``np.ascontiguousarray(x)``: x itself or a copy): they need a
        scratch shadow for the merged pointer to have one."""
        out = set()
        for bs in self.base.values():
            if bs != UNKNOWN and any(self.has_shadow(b) for b in bs):
                out.update(b for b in bs if not self.has_shadow(b) and b in self.data_args)
        return out

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
            bs = self.bases(ptr)
            if is_float_type(t) and bs != UNKNOWN:
                for b in bs:
                    self.element_type[b] = t
                    if is_allocation(b):
                        out.add(b)
        for instr in self.func.instructions():
            # a heap temporary only custom rules read or write (the result of ``A @ x`` fed
            # to another BLAS call) carries derivatives between the calls: it needs a shadow
            # (stack slots passed to rules hold floats only if loads or stores say so)
            if instr.opcode != "call" or self.rule_of(instr) is None:
                continue
            for o in instr.operands:
                bs = self.bases(o) if o.type == "ptr" else NOWHERE
                if bs != UNKNOWN:
                    out.update(b for b in bs if is_allocation(b) and getattr(b, "opcode", None) != "alloca")
        changed = True
        while changed:                   # copies to and from float memory are float memory
            changed = False
            for instr in self.func.instructions():
                if not is_memcpy(instr):
                    continue
                dst, src = self.bases(instr.operands[0]), self.bases(instr.operands[1])
                if dst == UNKNOWN or src == UNKNOWN:
                    continue
                for xs, ys in ((dst, src), (src, dst)):
                    if any(y in out or y in self.shadow_args for y in ys):
                        for x in xs:
                            if is_allocation(x) and x not in out:
                                out.add(x)
                                t = next((self.element_type[y] for y in ys if y in self.element_type), "double")
                                self.element_type.setdefault(x, t)
                                changed = True
        return out

    def element_type_of(self, *ops):
        """The float type stored in the memory ``ops`` point into (double by default)."""
        for op in ops:
            bs = self.bases(op)
            if bs != UNKNOWN:
                for b in bs:
                    if b in self.element_type:
                        return self.element_type[b]
        return "double"

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
                        if instr.type == "ptr":
                            hit = False  # a pointer kept in float memory is not a float
                        else:
                            self._check_punned_copy(instr)
                elif op == "call" and self.rule_of(instr) is not None:
                    hit = False          # a custom rule handles the call's derivative
                    if self.rule_of(instr).is_external and instr.is_float:
                        raise self.unsupported(instr, f"the custom rule of external symbol "
                                                      f"'{instr.callee}' cannot return the derivative "
                                                      f"of its float result (rules of external "
                                                      f"symbols differentiate through memory only)")
                else:
                    srcs = instr.operands[1:] if op == "select" else instr.operands
                    hit = any(o.defn in varied for o in srcs)
                    if hit and (op not in FLOAT_OPS or not instr.is_float):
                        if op in INACTIVE_RESULTS or op in MEMORY_WRITERS:
                            hit = False
                        else:
                            raise self.unsupported(instr, "no derivative rule for this instruction")
                    if hit and op == "call" and not is_differentiable_call(instr):
                        raise self.unsupported(instr, f"no derivative rule for callee '{instr.callee}'")
                if hit:
                    varied.add(instr)
                    changed = True
        containers = self._shadowed_pointer_containers()
        for instr in self.func.instructions():
            if instr.opcode in MEMORY_WRITERS[1:] and any(o.defn in varied for o in instr.operands):
                raise self.unsupported(instr, "atomic update of a differentiable value")
            rule = self.rule_of(instr) if instr.opcode == "call" else None
            if rule is not None and rule.is_external and any(
                    o.defn in varied and is_float_type(o.type) for o in instr.operands):
                raise self.unsupported(instr, f"the custom rule of external symbol '{instr.callee}' "
                                              f"cannot return derivatives of float arguments (rules "
                                              f"of external symbols differentiate through memory only)")
            if instr.opcode == "call" and instr not in varied and rule is None:
                if any(o.defn in varied for o in instr.operands):
                    raise self.unsupported(instr, f"no derivative rule for callee '{instr.callee}'")
                if self.is_pure_call(instr) or is_memory_intrinsic(instr) or instr.callee in ("NRT_Free",):
                    continue
                if any(o.type == "ptr" and self.bases(o) != UNKNOWN
                       and any(self.has_shadow(b) for b in self.bases(o)) for o in instr.operands):
                    raise self.unsupported(instr, f"callee '{instr.callee}' receives a differentiable array")
                if instr.callee not in READS_NO_POINTERS and any(
                        o.type == "ptr" and (self.bases(o) == UNKNOWN or self.bases(o) & containers)
                        for o in instr.operands) and containers:
                    raise self.unsupported(instr, f"callee '{instr.callee}' can reach a differentiable "
                                                  f"array through memory (a parallel loop?)")
        return varied

    def _shadowed_pointer_containers(self):
        """Objects into which a pointer to differentiated memory is stored."""
        out = set()
        for instr in self.func.instructions():
            if instr.opcode == "store" and instr.operands[0].type == "ptr":
                held = self.bases(instr.operands[0])
                if held != UNKNOWN and any(self.has_shadow(b) for b in held):
                    where = self.bases(instr.operands[1])
                    out |= {UNKNOWN} if where == UNKNOWN else set(where)
        return out

    def _check_punned_copy(self, load):
        """An integer load from a float array is allowed only as a bitwise copy into
        another float array (instcombine writes some copies that way); it is then
        differentiated as the float of the same width."""
        width = PUN_TYPES.get(load.type)
        users = self.users.get(load, [])
        if width is None or not all(u.opcode == "store" and u.operands[0].defn is load
                                    and u.operands[1].defn is not load and self.is_shadowed(u.operands[1])
                                    for u in users):
            raise self.unsupported(load, "an integer load reads a differentiable float array "
                                         "(type punning is not differentiable)")
        self.pun_type[load] = width

    def value_type(self, value):
        """The float type a value is differentiated as (its own, or that of a punned copy)."""
        return self.pun_type.get(value, value.type)

    def _note_unshadowed_write(self, ptr):
        bs = self.bases(ptr)
        if bs != UNKNOWN:
            self.unshadowed_writes.update(b for b in bs if b in self.data_args and not self.has_shadow(b))

    def _useful(self):
        useful = set()
        work = []
        self.unshadowed_writes = set()   # array arguments without shadow that receive varied values
        for instr in self.func.instructions():
            if instr.opcode == "store":
                value, ptr = instr.operands
                if value.defn in self.varied:
                    if ptr.defn is not self.retptr and (self.bases(ptr) == UNKNOWN or not self.bases(ptr)):
                        raise self.unsupported(instr, "a differentiable value is stored where adcore "
                                                      "cannot tell which array it goes to")
                    self._note_unshadowed_write(ptr)
                    if ptr.defn is self.retptr and self.ret_active or self.is_shadowed(ptr):
                        work.append(value.defn)
            elif is_memcpy(instr) and self.is_shadowed(instr.operands[1]):
                self._note_unshadowed_write(instr.operands[0])
            elif instr.opcode == "call" and self.rule_of(instr) is not None:
                work.extend(o.defn for o in instr.operands if o.defn in self.varied)
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
        """For each block, the bases its instructions may write, as (position, bases)."""
        written = {}
        for block in self.func.blocks:
            for pos, instr in enumerate(block.instrs):
                if instr.opcode in MEMORY_WRITERS:
                    ptrs = [instr.operands[1] if instr.opcode == "store" else instr.operands[0]]
                elif is_memory_intrinsic(instr):
                    ptrs = [instr.operands[0]]
                elif instr.opcode == "call" and instr.callee in DEFERRED_FREES:
                    continue             # the gradient frees only after the reverse pass
                elif instr.opcode == "call" and self.rule_of(instr) is not None:
                    ptrs = [instr.operands[k] for k in self.rule_of(instr).outputs]
                elif instr.opcode == "call" and not self.is_pure_call(instr):
                    ptrs = [o for o in instr.operands if o.type == "ptr"]
                else:
                    continue
                for p in ptrs:
                    written.setdefault(block, []).append((pos, self.bases(p)))
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

    def clobbered_after(self, instr, op):
        """True when a write that may alias pointer ``op`` can follow ``instr``."""
        bs = self.bases(op)
        if bs == UNKNOWN:
            return True
        return self._written_after(instr, lambda ws: ws == UNKNOWN or bool(ws & bs))

    def _written_after(self, instr, clobbers):
        pos = instr.block.instrs.index(instr)
        if any(clobbers(ws) for p, ws in self.written.get(instr.block, ()) if p > pos):
            return True
        return any(clobbers(ws) for blk in self._reachable(instr.block)
                   for _, ws in self.written.get(blk, ()))

    def can_reload(self, load):
        """True when no write that may alias ``load``'s address can follow it, so the
        reverse pass (which leaves primal memory as the forward pass left it) may
        load it again instead of caching it."""
        bs = self.bases(load.operands[0])
        if bs == UNKNOWN:
            return False
        if load.type == "ptr" and bs and all(isinstance(b, MemInfo) for b in bs):
            return True                  # a meminfo's data pointer never changes
        if not bs:
            return True                  # constants

        def clobbers(ws):
            if ws == UNKNOWN or ws & bs:
                return True
            return not self.distinct_arrays and bool(ws & self.data_args) and bool(bs & self.data_args)

        return not self._written_after(load, clobbers)
