"""The differentiation pipeline, stage by stage, in the order data flows.

    capture   frontend/capture.py   the kernel's unoptimised LLVM module (Numba's, or
                                    foreign IR: frontend/foreign.py)
    clean     frontend/cleanup.py   one self-contained scalar function: callees inlined,
                                    SSA, loops simplified
    read      ir/model.py           adcore's model of that function
    layout    here                  which LLVM parameters are Active, shadowed, seeded;
                                    the result struct
    analyse   analysis/             control flow (cfg.py), pointer bases (pointers.py),
                                    shadowed memory and clobbers (memory.py), activity and
                                    refusals (activity.py)
    plan      plan/                 what the reverse pass keeps or recomputes (values.py,
                                    cache_cut.py), scratch arrays copied or refilled
                                    (snapshots.py, replays.py), loop order (loop_order.py)
    generate  reverse/generator.py  the gradient function's IR (one instruction's reverse:
                                    reverse/instructions.py; rules: rules/); forward mode:
                                    forward/generator.py (forward/pipeline.py drives it)
    compile   backend/native.py     O3 with vectorisation, MCJIT, external symbols checked;
                                    the entry Python calls through ctypes
                                    (calling/ctypes_entry.py)
    stub      calling/njit_stub.py  an njit function calling it with Numba's calling
                                    convention (when njit code first needs it, unless
                                    Python cannot use the entry)

:func:`differentiate` runs them all; :func:`primal` stops after ``read`` (what
``adcore.primal_ir`` shows).  Const arrays that receive derivatives get scratch shadows:
the analyses run again with them until nothing more is needed (a fixed point).
"""
import itertools

from numba.core import types as nbtypes

from . import numba_abi
from .analysis.activity import Activity
from .analysis.cfg import ControlFlow
from .analysis.memory import Clobbers, ShadowedMemory
from .analysis.pointers import UNKNOWN, PointerBases
from .annotations import Active, Const, Duplicated
from .backend import native
from .calling import ctypes_entry
from .calling.compiled import CompiledGradient
from .calling.njit_stub import make_stub
from .errors import ActivityError, UnsupportedError
from .frontend.capture import capture
from .frontend.cleanup import clean
from .frontend.constructs import in_user_words
from .frontend.index_signs import array_sizes, remove_negative_index_tests
from .ir.model import read_function, source_locations
from .reverse import parallel_loops
from .reverse.callees import Callees
from .reverse.generator import AdjointGenerator, Analyses, Spec, gradient_module
from .rules import custom as custom_rules
from .rules.scalar import is_differentiable_call, is_pure_call
from .timings import compiling, stage

_counter = itertools.count()


class Primal:
    """The cleaned primal: its kernel (types, symbol, context), module and IR model
    (``parfors``: how a ``parallel=True`` kernel's parallel loops are lowered, as
    :func:`adcore.frontend.capture.capture` takes it)."""

    def __init__(self, dispatcher, argtypes, parfors="loops"):
        with stage("capture"):
            self.kernel = capture(dispatcher, argtypes, parfors)
        self.loops = []
        if getattr(self.kernel, "chunk_calls", ()):
            with stage("parallel loops"):   # those whose reverse runs on threads stay calls
                self.loops = parallel_loops.plans(self.kernel)
        with stage("clean"):
            keep = {fn.name for fn in self.kernel.module.functions
                    if not fn.is_declaration and custom_rules.find(fn.name) is not None}
            keep |= set(getattr(self.kernel, "keep", ()))     # calls a generator handles itself
            keep |= {loop.call.symbol for loop in self.loops if loop.parallel}
            self.module = clean(self.kernel.module, self.kernel.symbol, keep)
        with stage("read"):
            self.ir = str(self.module)
            self.locations = source_locations(self.ir)
            self.func = read_function(self.module.get_function(self.kernel.symbol), self.locations)


def primal(dispatcher, argtypes, parfors="loops"):
    """Stages capture, clean and read."""
    return Primal(dispatcher, argtypes, parfors)


class Layout:
    """Where each annotated argument sits among the gradient function's LLVM parameters
    (Numba flattens an array into several), and the result struct
    ``(primal return?, Active adjoints..., bytes cached)``.  Checks the return against its
    annotation and ``dret`` (``seed_type``)."""

    def __init__(self, primal_, anns, argtypes, ret_activity, seed_type, keep_primal=True):
        kernel, func = primal_.kernel, primal_.func
        self.pyname, ctx, restype = kernel.pyname, kernel.context, kernel.restype
        self.returns_array = _check_return(self.pyname, restype, ret_activity, seed_type)
        self.ret_active = isinstance(restype, nbtypes.Float) and ret_activity is not Const
        self.has_primal = restype is not nbtypes.none
        self.keep_primal = keep_primal or not isinstance(restype, nbtypes.Float)
        counts = [len(numba_abi.flat_types(ctx, t)) for t in argtypes]
        self.groups = [func.args[2 + sum(counts[:k]):2 + sum(counts[:k + 1])] for k in range(len(argtypes))]
        self.arrays = [k for k, t in enumerate(argtypes) if isinstance(t, nbtypes.Array)]
        self.contiguous = [k for k in self.arrays if argtypes[k].layout in "CF"]
        self.duplicated = [k for k, a in enumerate(anns) if isinstance(a, Duplicated)]
        fields = [restype] if self.has_primal else []
        self.active, self.active_fields = [], []
        for k, ann in enumerate(anns):
            if isinstance(ann, Active):
                self.active.append(func.args.index(self.groups[k][0]))
                self.active_fields.append(len(fields))
                fields.append(argtypes[k])
        self.result = nbtypes.Tuple(tuple(fields + [nbtypes.int64]))
        self.result_ir = str(ctx.get_value_type(self.result))
        self.seed = (numba_abi.flat_types(ctx, seed_type), str(ctx.get_value_type(seed_type.dtype))) \
            if self.returns_array else None
        self.func = func

    def data_pointer(self, k):
        """The LLVM argument holding array argument ``k``'s data pointer."""
        return self.groups[k][numba_abi.DATA]

    def shadow(self, k):
        """``(data parameter index, flattened types, data position)`` of ``k``'s shadow."""
        return (self.func.args.index(self.data_pointer(k)), [a.type for a in self.groups[k]],
                numba_abi.DATA)

    def spec(self, symbol, scratch, distinct):
        return Spec(symbol, self.pyname, self.active,
                    [self.shadow(k) for k in self.duplicated + sorted(scratch)], self.ret_active,
                    self.result_ir, self.active_fields, len(self.result.types) - 1,
                    [self.func.args.index(self.data_pointer(k)) for k in self.arrays], distinct,
                    seed=self.seed, extents=self.extents(), keep_primal=self.keep_primal)

    def extents(self):
        """Each contiguous array's data parameter index -> its (nitems, itemsize) indices."""
        index = self.func.args.index
        return {index(g[numba_abi.DATA]): (index(g[numba_abi.NITEMS]), index(g[numba_abi.ITEMSIZE]))
                for g in (self.groups[k] for k in self.contiguous)}


def _check_return(pyname, restype, ret_activity, seed_type):
    """True when the kernel returns a new float array (seeded by ``dret``); refuses a
    return that does not match its annotation or the seed."""
    if ret_activity is Active and not isinstance(restype, nbtypes.Float):
        raise ActivityError(f"return annotated Active but {pyname} returns {restype}, which is not a float")
    returns_array = isinstance(restype, nbtypes.Array) and isinstance(restype.dtype, nbtypes.Float)
    if returns_array and seed_type is None:
        raise ActivityError(f"{pyname} returns a {restype.dtype} array: pass the seed of the "
                            f"returned array with dret=")
    if seed_type is not None and not (returns_array and seed_type.dtype == restype.dtype
                                      and seed_type.ndim == restype.ndim):
        raise ActivityError(f"dret is a {seed_type.dtype} array of {seed_type.ndim} dimensions but "
                            f"{pyname} returns {restype}")
    if not (restype is nbtypes.none or returns_array
            or isinstance(restype, (nbtypes.Number, nbtypes.Boolean))):
        raise UnsupportedError(f"return type {restype}", pyname,
                               "kernels may return a float, an integer, a bool, a float array or None")
    return returns_array


def analyse(primal_, layout, symbol, distinct, callees=None, rule_of=None, seeds=(), arrays_change=False):
    """Stage ``analyse``, with the scratch-shadow fixed point: returns ``(spec, analyses,
    scratch)``, ``scratch`` the Const array arguments given internal shadows (those a
    pointer may reach together with shadowed memory, and those that receive derivatives).
    ``callees``: the functions differentiated as calls (:class:`adcore.reverse.callees.Callees`), else
    ``rule_of`` (default: the custom rules) finds the calls a generator handles itself;
    ``seeds`` are values that carry derivatives besides the Active arguments;
    ``arrays_change``: the arrays' memory may change between the forward and the reverse
    pass (every value the reverse needs from it is kept)."""
    func, args = primal_.func, primal_.func.args
    cfg, pointers = ControlFlow(func), PointerBases(func)
    remove_negative_index_tests(func, cfg, array_sizes(layout.groups, layout.arrays))
    rule_of = callees.rule_of if callees is not None else rule_of or custom_rules.lookup()
    is_callee = callees.is_callee if callees is not None else None
    by_pointer = {layout.data_pointer(k): k for k in layout.arrays}
    data_args = list(by_pointer)
    scratch = set()
    while True:
        spec = layout.spec(symbol, scratch, distinct)
        memory = ShadowedMemory(func, pointers, [args[s[0]] for s in spec.shadows], rule_of, spec.pyname,
                                is_callee)
        more = {by_pointer[p] for p in memory.mixed_constants(data_args)} - scratch
        if not more:
            activity = Activity(func, memory, [args[i] for i in spec.active] + list(seeds), args[0],
                                spec.ret_active, data_args,
                                (rule_of, is_differentiable_call, is_pure_call), callees)
            more = {by_pointer[p] for p in activity.unshadowed_writes} - scratch
        if not more:
            clobbers = Clobbers(func, pointers, rule_of, is_pure_call, data_args, distinct,
                                outside=data_args if arrays_change else ())
            return spec, Analyses(cfg, pointers, memory, activity, clobbers, rule_of), scratch
        scratch |= more


def written_arguments(layout, clobbers):
    """Array arguments the kernel may write."""
    written = clobbers.written_bases()
    return [k for k in layout.arrays if written == UNKNOWN or layout.data_pointer(k) in written]


class NativeParts:
    """What the disk cache stores of a fresh gradient besides its :class:`CompiledGradient`:
    the symbol and :class:`native.Compiled`, the stub's argument types (``types``) and
    their LLVM parameter types (``flat``, per argument), those of its result struct
    (``fields``), the result's Numba type, the shadow layout checks, and the arrays its
    entry from Python takes (``kinds``: :func:`adcore.calling.ctypes_entry.array_kinds`; None
    without an entry)."""

    def __init__(self, symbol, compiled, types, flat, fields, result, same_layout, kinds):
        self.symbol, self.compiled, self.types, self.flat = symbol, compiled, types, flat
        self.fields, self.result, self.same_layout, self.kinds = fields, result, same_layout, kinds


def generate(dispatcher, anns, argtypes, ret_activity, distinct, seed_type=None, name="", keep_primal=True,
             parfors=None):
    """Stages capture to generate: ``(primal, layout, generator, gradient module IR,
    scratch)`` (the generator's ``pushes.per_iteration`` is what :func:`adcore.cache_report` shows).
    A ``parallel=True`` kernel's parallel loops get a reverse on Numba's threads
    (``parfors="calls"``, :mod:`adcore.reverse.parallel_loops`) where that is exactly the serial
    gradient, else the kernel is differentiated with them lowered as loops (``"loops"``);
    the generator's ``parallel_loops`` says which it did and why."""
    if parfors is None:
        parfors = "calls" if numba_abi.is_parallel(dispatcher) else "loops"
    if parfors == "calls" and parallel_loops.one_thread():
        result = _generate(dispatcher, anns, argtypes, ret_activity, distinct, seed_type, name,
                           keep_primal, "loops")
        result[2].parallel_loops = ["parallel loops: reverse runs serially (Numba has one thread: "
                                    "NUMBA_NUM_THREADS=1)"]
        return result
    if parfors == "calls":
        try:
            return _generate(dispatcher, anns, argtypes, ret_activity, distinct, seed_type, name,
                             keep_primal, "calls")
        except parallel_loops.Serial as serial:
            reasons = serial.plans
        except (UnsupportedError, NotImplementedError) as err:
            reasons = [parallel_loops.serial_reason(err)]
        result = _generate(dispatcher, anns, argtypes, ret_activity, distinct, seed_type, name,
                           keep_primal, "loops")
        result[2].parallel_loops = reasons
        return result
    return _generate(dispatcher, anns, argtypes, ret_activity, distinct, seed_type, name, keep_primal,
                     parfors)


def _generate(dispatcher, anns, argtypes, ret_activity, distinct, seed_type, name, keep_primal, parfors):
    primal_ = primal(dispatcher, argtypes, parfors)
    loops = primal_.loops
    if not distinct and any(loop.parallel for loop in loops):
        raise parallel_loops.Serial(["parallel loops: reverse runs serially (the kernel's arrays "
                                     "may share memory)"])
    with stage("layout"):
        layout = Layout(primal_, anns, argtypes, ret_activity, seed_type, keep_primal)
    symbol = f"adcore_grad_{next(_counter)}" + (f"_{name[:24]}" if name else "")
    callees = Callees(primal_.module, custom_rules.lookup(), primal_.kernel.context, symbol,
                      primal_.locations)
    try:
        with stage("analyse"):
            spec, analyses, scratch = analyse(primal_, layout, symbol, distinct, callees)
            if callees.kept:
                callees.program(primal_.func, analyses.pointers, distinct)
        with stage("generate"):
            parallel_loops.check_distinct(loops, primal_, analyses.pointers)
            generator = AdjointGenerator(primal_.func, spec, analyses, primal_.kernel.context, callees)
            adjoint_ir = gradient_module(primal_.module, generator)
    except UnsupportedError as err:
        raise in_user_words(err, primal_.func, primal_.kernel) from None
    taped = {instr.callee: keep for instr, (_, _, keep) in generator.loop_tapes.items()}
    generator.parallel_loops = [loop.describe(loop.call.symbol in taped, taped.get(loop.call.symbol, False))
                                for loop in loops]
    return primal_, layout, generator, adjoint_ir, scratch


def differentiate(dispatcher, anns, argtypes, ret_activity, distinct, seed_type=None, name="",
                  keep_primal=True, parfors=None):
    """Run every stage for one kernel, argument types and activities: a
    :class:`CompiledGradient` (the seconds of each stage: ``adcore.last_compile_report()``).
    ``name`` (the disk cache's key) goes into the gradient's symbol; ``keep_primal=False``
    (Reverse mode) returns NaN for a float primal and skips the code only it needs."""
    with compiling(getattr(dispatcher, "__name__", str(dispatcher))):
        primal_, layout, generator, adjoint_ir, scratch = generate(
            dispatcher, anns, argtypes, ret_activity, distinct, seed_type, name, keep_primal, parfors)
        symbol = generator.spec.symbol
        analyses = generator.analyses
        ctx = primal_.kernel.context
        shadowed = layout.duplicated + sorted(scratch)
        seed = [seed_type] if layout.returns_array else []
        n = len(argtypes)
        stub_types = list(argtypes) + [argtypes[k] for k in shadowed] + seed
        same_layout = [(n + j, k, f"the shadow of argument {k}") for j, k in enumerate(shadowed)]
        flat = [numba_abi.flat_types(ctx, t) for t in stub_types]
        fields = [str(ctx.get_value_type(t)) for t in layout.result.types]
        kinds = ctypes_entry.array_kinds(stub_types)
        if kinds is None or not ctypes_entry.callable_from_python(flat, fields):
            kinds = None
        with stage("compile"):
            bound_ir = numba_abi.bind_environments(adjoint_ir)
            compiled = native.compile_ir(bound_ir, symbol, layout.pyname, custom_rules.linkable,
                                         python_entry=(flat, kinds, same_layout) if kinds else None)
            compiled.holds_process_addresses = bound_ir != adjoint_ir
        irs = (primal_.ir, adjoint_ir, compiled.ir)
        stub_spec = (stub_types, layout.result, same_layout)
        if kinds:            # Python calls the entry; the stub is made when njit code needs it
            call = ctypes_entry.EntryCall(native.entry_address(symbol), flat, fields, kinds, same_layout,
                                          ctypes_entry.integer_ranges(stub_types))
            stub = None
        else:
            with stage("stub"):
                stub = call = make_stub(symbol, *stub_spec)
        grad = CompiledGradient(layout.pyname, symbol, layout.has_primal, shadowed,
                                written_arguments(layout, analyses.clobbers), distinct,
                                lambda: irs, call, stub_spec, native=stub)
        grad.native_parts = NativeParts(symbol, compiled, stub_types, flat, fields, layout.result,
                                        same_layout, kinds)
        grad.parallel_loops = generator.parallel_loops
        return grad
