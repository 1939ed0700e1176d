"""Functions differentiated as calls: for each callee and activity pattern, an augmented
forward and a reverse function (Enzyme's ``createAugmentedPrimal`` and
``CreatePrimalAndGradient``), generated once however many sites call them.

Both are built by :class:`adcore.reverse.generator.AdjointGenerator` from the callee's cleaned IR,
split where the gradient function of a kernel goes from its forward to its reverse pass:

``RT @aug(<callee arguments>, <shadows of the shadowed pointers>, stacks)``
    runs the callee (returning what it returns: Numba's status, a C function's value),
    pushes on the value stack what its reverse needs (the loop pushes of a kernel, then
    every kept value and which return was taken), and hands frees to the caller's lists.
``{adjoints} @rev(<same arguments>, [dret], stacks)``
    pops them and runs the reverse pass; returns the adjoints of the varied float
    arguments; adds into the shadows it is given.

Calls nest, so one value stack serves recursion.  The callee's stack allocations live
on the heap (freed after the whole reverse pass), since its reverse runs after it has
returned (its call slots excepted: :mod:`adcore.reverse.call_slots`); and since the caller
may write the callee's argument memory before the reverse runs, loads from it are kept,
never reloaded, unless nothing in the program writes that memory
(:mod:`adcore.analysis.read_only`).
"""
from .. import numba_abi
from ..analysis.activity import READS_NO_POINTERS, Activity
from ..analysis.cfg import ControlFlow
from ..analysis.memory import Clobbers, ShadowedMemory, is_memory_intrinsic
from ..analysis.pointers import UNKNOWN, PointerBases
from ..analysis.read_only import read_only_parameters
from ..errors import UnsupportedError
from ..frontend import callgraph
from .call_slots import write_only_parameters
from .generator import AdjointGenerator, Analyses, Spec
from ..ir.model import read_function
from ..rules.scalar import is_differentiable_call, is_pure_call


class Pair:
    """The symbols of one augmented forward and reverse, and the reverse's result type."""

    def __init__(self, augmented, reverse, adjoint_type):
        self.augmented, self.reverse, self.adjoint_type = augmented, reverse, adjoint_type


class Split:
    """How a callee's generated functions differ from a kernel's gradient: ``pair``, the
    callee's return type, whether its float result is active (``dret``)."""

    def __init__(self, pair, ret_type):
        self.pair, self.ret_type = pair, ret_type


class Callees:
    """The functions of the cleaned ``module`` a gradient calls (those on a cycle of the call
    graph: not inlined), and the pairs generated for them; ``prefix`` names the generated
    symbols."""

    def __init__(self, module, rule_of, context, prefix, locations=None):
        self.module, self.rule_of, self.context, self.prefix = module, rule_of, context, prefix
        self.locations = locations
        self.kept = callgraph.kept_as_calls(module)
        self.functions = {}
        self.pairs = {}
        self.queue = []
        self.generators = []
        self.writes = None
        self.write_only_ = {}
        self.read_only = {}          # callee -> its read-only pointer parameters (see program)

    def is_callee(self, instr):
        """True for a call to a function this module defines that has no custom rule."""
        return instr.opcode == "call" and instr.callee in self.kept and self.rule_of(instr) is None


    def float_writes(self, name):
        """Positions of the pointer arguments through which function ``name`` (or what it
        calls) may write floats: a fixed point over the functions kept as calls."""
        if self.writes is None:
            self.writes = {n: set() for n in self.kept}
            changed = True
            while changed:
                changed = False
                for n in self.kept:
                    new = self._written_arguments(self.function(n))
                    changed |= not new <= self.writes[n]
                    self.writes[n] |= new
        return self.writes[name]

    def _written_arguments(self, func):
        pointers, out = PointerBases(func), set()
        args = [a for a in func.args if a.type == "ptr"]

        def note(op):
            bs = pointers.bases(op)
            out.update(a.index for a in args if bs == UNKNOWN or a in bs)

        for instr in func.instructions():
            if instr.opcode == "store" and instr.operands[0].type != "ptr":
                note(instr.operands[1])
            elif instr.opcode in ("atomicrmw", "cmpxchg") or is_memory_intrinsic(instr):
                note(instr.operands[0])
            elif self.is_callee(instr):
                for k in self.writes[instr.callee]:
                    note(instr.operands[k])
            elif instr.opcode == "call" and not is_pure_call(instr) and instr.callee not in READS_NO_POINTERS:
                for o in instr.operands:
                    if o.type == "ptr":
                        note(o)
        return out

    def program(self, kernel, pointers, distinct):
        """Note the kernel that calls these functions (its ``pointers``: its
        :class:`PointerBases`; ``distinct``: whether its arrays share no memory): a callee
        may then load again the memory nothing writes
        (:func:`adcore.analysis.read_only.read_only_parameters`)."""
        self.read_only = read_only_parameters(self, kernel, pointers, distinct, is_pure_call)

    def write_only(self, name):
        """Positions of callee ``name``'s pointer parameters that it only stores through
        (:func:`adcore.reverse.call_slots.write_only_parameters`)."""
        if name not in self.write_only_:
            self.write_only_[name] = write_only_parameters(self.function(name))
        return self.write_only_[name]

    def function(self, name):
        if name not in self.functions:
            self.functions[name] = read_function(self.module.get_function(name), self.locations)
        return self.functions[name]

    def request(self, name, active, shadowed, ret_active):
        """The :class:`Pair` of callee ``name`` for one activity pattern (generated later,
        by :meth:`generate`)."""
        key = (name, active, shadowed, ret_active)
        if key not in self.pairs:
            func = self.function(name)
            types = [func.args[k].type for k in active]
            adjoint_type = "{ " + ", ".join(types) + " }" if types else "void"
            n = len(self.pairs)
            self.pairs[key] = Pair(f"{self.prefix}.aug.{n}", f"{self.prefix}.rev.{n}", adjoint_type)
            self.queue.append(key)
        return self.pairs[key]

    def generate(self):
        """IR text of every function requested so far (and of those they request)."""
        texts = []
        while self.queue:
            key = self.queue.pop(0)
            gen = self._generator(key)
            texts.append(gen.build())
            self.generators.append(gen)
        return texts

    def return_type(self, name):
        """The LLVM return type of callee ``name``: a float, an integer or void (else refused)."""
        ret_type = func_return_type(self.module.get_function(name))
        if ret_type not in ("void", "double", "float") and not ret_type.startswith("i"):
            pyname = numba_abi.python_name(name)
            raise UnsupportedError(f"the call of {pyname}", pyname,
                                   f"a function differentiated as a call may return a float, "
                                   f"an integer or nothing, not {ret_type}")
        return ret_type

    def _generator(self, key):
        name, active, shadowed, ret_active = key
        pyname, ret_type = numba_abi.python_name(name), self.return_type(name)
        func = self.function(name)
        spec = Spec(self.pairs[key].augmented, pyname, list(active), [(k, ["ptr"], 0) for k in shadowed],
                    ret_active, None, [], None, [a.index for a in func.args if a.type == "ptr"], False,
                    split=Split(self.pairs[key], ret_type))
        return AdjointGenerator(func, spec, self.analyses(name, active, shadowed, ret_active), self.context, self)

    def analyses(self, name, active, shadowed, ret_active):
        """The :class:`Analyses` of callee ``name`` for one activity pattern: its ``active``
        float arguments vary, its ``shadowed`` pointer arguments have shadows; refuses a
        callee that writes derivatives where its caller cannot follow them."""
        func, pyname = self.function(name), numba_abi.python_name(name)
        args = func.args
        pointers_ = [a for a in args if a.type == "ptr"]
        cfg, pointers = ControlFlow(func), PointerBases(func)
        memory = ShadowedMemory(func, pointers, [args[k] for k in shadowed], self.rule_of, pyname,
                                self.is_callee)
        mixed = memory.mixed_constants(pointers_)
        if mixed:
            raise UnsupportedError(f"the call of {pyname}", pyname,
                                   f"a pointer may point into argument {min(a.index for a in mixed)}, "
                                   f"which has no shadow, or into a differentiated array")
        activity = Activity(func, memory, [args[k] for k in active], None, ret_active, pointers_,
                            (self.rule_of, is_differentiable_call, is_pure_call), self)
        if activity.unshadowed_writes:
            k = min(a.index for a in activity.unshadowed_writes)
            raise UnsupportedError(f"the call of {pyname}", pyname,
                                   f"it writes a differentiable value into pointer argument {k}, "
                                   f"which has no shadow at this call (mark the array Duplicated)")
        _check_no_escape(func, pointers, pointers_, memory, pyname)
        read_only = self.read_only.get(name, ())
        clobbers = Clobbers(func, pointers, self.rule_of, is_pure_call, pointers_, False,
                            outside=[a for a in pointers_ if a.index not in read_only],
                            unwritten=[a for a in pointers_ if a.index in read_only])
        return Analyses(cfg, pointers, memory, activity, clobbers, self.rule_of)


def func_return_type(fn):
    """The LLVM return type of an llvmlite function."""
    return str(fn.global_value_type.get_function_return())


def _check_no_escape(func, pointers, args, memory, pyname):
    """A callee must not store a pointer to its own memory or to shadowed memory into its
    arguments (returning an array): its caller could not follow the shadow."""
    outside = set(args)
    for instr in func.instructions():
        if instr.opcode == "store" and instr.operands[0].type == "ptr" and instr.operands[0].defn is not None:
            where, what = pointers.bases(instr.operands[1]), pointers.bases(instr.operands[0])
            if (where == UNKNOWN or set(where) & outside) and (what == UNKNOWN or what):
                if what != UNKNOWN and set(what) <= outside and not memory.reaches_shadow(what):
                    continue
                raise UnsupportedError(f"'{instr.text}'", pyname,
                                       "a function differentiated as a call stores a pointer "
                                       "into its arguments (returns an array?)", instr.location)
