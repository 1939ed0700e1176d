"""Activity analysis (Enzyme's two directions) and the legality checks that go with it.

A value is *varied* when derivative-carrying data can flow into it (Active arguments,
float loads from shadowed memory), *useful* when it can flow to a differentiated output
(stores into shadowed memory, the active return, operands of custom-rule calls); it is
*active* when both.  Integer and pointer values are never active.  Constructs whose
derivative adcore cannot vouch for are refused here with ``UnsupportedError``.
"""
import re

from ..errors import UnsupportedError
from ..ir.model import Arg, is_float_type
from ..known_functions import FREE, READS_NO_POINTERS, consumes_only
from .memory import MEMORY_WRITERS, is_memcpy, is_memory_intrinsic
from ..numba_abi import python_name
from .pointers import UNKNOWN

FLOAT_OPS = ("fadd", "fsub", "fmul", "fdiv", "frem", "fneg", "fpext", "fptrunc",
             "select", "phi", "freeze", "call", "insertelement", "extractelement", "shufflevector")
INACTIVE_RESULTS = ("fcmp", "fptosi", "fptoui", "ret")      # ret: a callee's result, see _useful
PUN_TYPES = {"i64": "double", "i32": "float"}
_GENERATED_FOR_CALLS = re.compile(r"\.(aug|rev)\.\d+$")     # adcore.reverse.callees' augmented forwards, reverses


class Activity:
    """Varied, useful and active values of ``func``, given the pointer bases and shadowed
    memory (``memory``), the Active float arguments, the return slot ``retptr`` (its value
    is differentiated when ``ret_active``) and ``data_args``, the array arguments' data
    pointers.  ``unshadowed_writes`` are the data pointers of arguments without shadow
    that receive varied values (they need scratch shadows)."""

    def __init__(self, func, memory, active_args, retptr, ret_active, data_args, rules, calls=None):
        self.func, self.memory, self.pointers = func, memory, memory.pointers
        self.calls = calls             # the functions differentiated as calls (calls.Callees)
        self.is_callee = calls.is_callee if calls is not None else (lambda instr: False)
        self.kernel_name = memory.kernel_name
        self.active_args, self.retptr, self.ret_active = set(active_args), retptr, ret_active
        self.data_args = set(data_args)
        self.rule_of, self.is_differentiable_call, self.is_pure_call = rules
        self.users = {}
        for instr in func.instructions():
            for o in instr.operands:
                if o.defn is not None:
                    self.users.setdefault(o.defn, []).append(instr)
        self.pun_type = {}
        self.varied = self._varied()
        self._check_calls()
        self.unshadowed_writes = set()
        self.useful = self._useful()
        self.active = self.varied & self.useful

    def unsupported(self, instr, detail=""):
        return UnsupportedError(f"'{instr.text}'", self.kernel_name, detail, instr.location)

    def bases(self, op):
        return self.pointers.bases(op)

    def is_shadowed(self, op):
        return self.memory.is_shadowed(op)

    def reaches_shadow(self, op):
        """True when pointer operand ``op`` may reach shadowed memory (or cannot be traced)."""
        return op.type == "ptr" and (self.bases(op) == UNKNOWN or self.memory.reaches_shadow(self.bases(op)))

    # -- varied ---------------------------------------------------------------------
    def _varied(self):
        varied = set(self.active_args)
        changed = True
        while changed:
            changed = False
            for instr in self.func.instructions():
                if instr not in varied and self._receives_variation(instr, varied):
                    varied.add(instr)
                    changed = True
        return varied

    def _receives_variation(self, instr, varied):
        """True when derivative-carrying data flows into ``instr`` (refusing instructions
        that would need a rule adcore does not have)."""
        op = instr.opcode
        if op == "load":
            hit = self.is_shadowed(instr.operands[0])
            if hit and not instr.is_float:
                if instr.type == "ptr":
                    return False         # a pointer kept in float memory is not a float
                self._check_punned_copy(instr)
            return hit
        if op == "call" and self.is_callee(instr):
            return instr.is_float and (any(o.defn in varied for o in instr.operands)
                                       or any(self.reaches_shadow(o) for o in instr.operands))
        if op == "call" and self.rule_of(instr) is not None:
            if self.rule_of(instr).is_external and instr.is_float:
                raise self.unsupported(instr, f"the custom rule of external symbol "
                                              f"'{python_name(instr.callee)}' cannot return the derivative "
                                              f"of its float result (rules of external "
                                              f"symbols differentiate through memory only)")
            return False                 # a custom rule handles the call's derivative
        if consumes_only(instr):
            return False                 # print and its helpers: a value read, no derivative
        srcs = instr.operands[1:] if op == "select" else instr.operands
        hit = any(o.defn in varied for o in srcs)
        if hit and (op not in FLOAT_OPS or not instr.is_float):
            if op in INACTIVE_RESULTS or op in MEMORY_WRITERS:
                return False
            raise self.unsupported(instr, "no derivative rule for this instruction")
        if hit and op == "call" and not self.is_differentiable_call(instr):
            raise self.unsupported(instr, f"no derivative rule for callee {self._callee(instr)}")
        return hit

    def _callee(self, instr):
        """The callee of a call in the user's words: its Python name, and for the gradient
        of a function differentiated as a call (a recursive one) read back by ``hvp``
        (there are no callees to differentiate), that hvp cannot differentiate it."""
        if self.calls is None and _GENERATED_FOR_CALLS.search(instr.callee):
            return f"'{instr.callee}' (the gradient of a recursive function: hvp cannot differentiate it)"
        return f"'{python_name(instr.callee)}'"

    def _check_calls(self):
        """Refuse calls and atomics through which a derivative would be lost."""
        varied = self.varied
        containers = self._shadowed_pointer_containers()
        for instr in self.func.instructions():
            if instr.opcode in MEMORY_WRITERS[1:] and any(o.defn in varied for o in instr.operands):
                raise self.unsupported(instr, "atomic update of a differentiable value")
            rule = self.rule_of(instr) if instr.opcode == "call" else None
            if instr.opcode == "call" and rule is None and self.is_callee(instr):
                if containers and any(o.type == "ptr" and (self.bases(o) == UNKNOWN or self.bases(o) & containers)
                                      for o in instr.operands):
                    raise self.unsupported(instr, f"callee '{python_name(instr.callee)}' can reach a "
                                                  f"differentiable array through memory")
                continue
            if rule is not None and rule.is_external and any(
                    o.defn in varied and is_float_type(o.type) for o in instr.operands):
                raise self.unsupported(instr, f"the custom rule of external symbol '{python_name(instr.callee)}' "
                                              f"cannot return derivatives of float arguments (rules "
                                              f"of external symbols differentiate through memory only)")
            if instr.opcode == "call" and instr not in varied and rule is None and not consumes_only(instr):
                if any(o.defn in varied for o in instr.operands):
                    raise self.unsupported(instr, f"no derivative rule for callee {self._callee(instr)}")
                if self.is_pure_call(instr) or is_memory_intrinsic(instr) or instr.callee == FREE:
                    continue
                if any(o.type == "ptr" and self.memory.reaches_shadow(self.bases(o)) for o in instr.operands):
                    raise self.unsupported(instr, f"callee {self._callee(instr)} receives a differentiable array")
                if instr.callee not in READS_NO_POINTERS and any(
                        o.type == "ptr" and (self.bases(o) == UNKNOWN or self.bases(o) & containers)
                        for o in instr.operands) and containers:
                    raise self.unsupported(instr, f"callee '{python_name(instr.callee)}' can reach a differentiable "
                                                  f"array through memory (a parallel loop?)")

    def _shadowed_pointer_containers(self):
        """Objects into which a pointer to differentiated memory is stored."""
        out = set()
        for instr in self.func.instructions():
            if instr.opcode == "store" and instr.operands[0].type == "ptr":
                if self.memory.reaches_shadow(self.bases(instr.operands[0])):
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
            self.unshadowed_writes.update(b for b in bs if b in self.data_args and not self.memory.has_shadow(b))

    def _useful(self):
        useful = set()
        work = []
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
                if any(o.defn in self.varied or self.reaches_shadow(o) for o in instr.operands):
                    for k in getattr(self.rule_of(instr), "float_writes", ()):
                        self._note_unshadowed_write(instr.operands[k])
            elif instr.opcode == "call" and self.is_callee(instr):
                # the callee may write what it receives into the memory it is given
                work.extend(o.defn for o in instr.operands if o.defn in self.varied)
                if any(o.defn in self.varied or self.reaches_shadow(o) for o in instr.operands):
                    for k in self.calls.float_writes(instr.callee):
                        self._note_unshadowed_write(instr.operands[k])
            elif instr.opcode == "ret" and self.retptr is None and self.ret_active \
                    and instr.operands and instr.operands[0].defn in self.varied:
                work.append(instr.operands[0].defn)      # a callee's float return
        while work:
            v = work.pop()
            if v in useful:
                continue
            useful.add(v)
            if not isinstance(v, Arg) and v.opcode != "load":
                work.extend(o.defn for o in v.operands if o.defn in self.varied)
        return useful
