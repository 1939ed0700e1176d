"""The forward-mode pipeline: the stages of :mod:`adcore.pipeline` (capture, clean, read,
analyse) with the tangent generator of :mod:`adcore.forward.generator` in place of the adjoint one;
and calling a compiled tangent function on annotated arguments."""
import itertools

from numba.core import types as nbtypes

import numpy as np

from .. import numba_abi, pipeline
from ..annotations import Const, Duplicated
from ..backend import native
from .callees import ForwardCallees
from ..calling.compiled import CompiledGradient, _like_strides
from ..calling.njit_stub import make_stub
from ..errors import UnsupportedError
from ..frontend.constructs import in_user_words
from .generator import ForwardSpec, TangentGenerator, tangent_module
from .gradient_kernel import reverse_call_rule
from ..rules import custom as custom_rules
from ..timings import compiling, stage

_counter = itertools.count()
MAX_CHECKED_ARRAYS = 40      # a tangent function checks that its arrays share no memory up to this many (pairwise)


class ForwardLayout:
    """Where each argument sits among the tangent function's LLVM parameters, and its
    result struct ``(primal return?, k tangents of a float return..., status)``.
    ``tangent_floats`` are the float arguments with tangents, ``duplicated`` the arrays."""

    def __init__(self, primal_, argtypes, tangent_floats, duplicated, lanes):
        kernel, func = primal_.kernel, primal_.func
        self.pyname, ctx, restype = kernel.pyname, kernel.context, kernel.restype
        if isinstance(restype, nbtypes.Array):
            raise UnsupportedError("the returned array", self.pyname,
                                   "forward mode needs the result written into an argument "
                                   "(adcore.jacobian wraps such functions itself)")
        self.has_primal = restype is not nbtypes.none
        self.ret_float = isinstance(restype, nbtypes.Float)
        counts = [len(numba_abi.flat_types(ctx, t)) for t in argtypes]
        self.groups = [func.args[2 + sum(counts[:k]):2 + sum(counts[:k + 1])] for k in range(len(argtypes))]
        self.arrays = [k for k, t in enumerate(argtypes) if isinstance(t, nbtypes.Array)]
        self.tangent_floats, self.duplicated, self.lanes = tangent_floats, duplicated, lanes
        self.argtypes = argtypes
        self.checks_overlap = len(self.arrays) + lanes * len(duplicated) <= MAX_CHECKED_ARRAYS
        fields = [restype] if self.has_primal else []
        self.tangent_field = len(fields) if self.ret_float else None
        fields += [restype] * lanes if self.ret_float else []
        self.status_field = len(fields)
        self.result = nbtypes.Tuple(tuple(fields + [nbtypes.int64]))
        self.result_ir = str(ctx.get_value_type(self.result))
        self.func = func

    def data_pointer(self, k):
        return self.groups[k][numba_abi.DATA]

    def spec(self, symbol, scratch, distinct):
        args = self.func.args
        shadows = [(args.index(self.data_pointer(k)), [a.type for a in self.groups[k]], numba_abi.DATA)
                   for k in self.duplicated + sorted(scratch)]
        return ForwardSpec(symbol, self.pyname, self.lanes,
                           [args.index(self.groups[k][0]) for k in self.tangent_floats],
                           shadows, len(self.duplicated), self.result_ir, self.tangent_field, self.status_field,
                           {args.index(self.data_pointer(k)): self.argtypes[k].ndim for k in self.arrays}
                           if distinct else None, distinct and self.checks_overlap)


def differentiate_forward(dispatcher, argtypes, tangent_floats, duplicated, lanes, distinct,
                          stack_rule=None, seeds=None):
    """Every stage for one kernel in forward mode: a :class:`CompiledForward`.  ``stack_rule``
    and ``seeds(func)`` switch on stack mode (:mod:`adcore.forward.generator`), used by ``hvp``."""
    with compiling(getattr(dispatcher, "__name__", str(dispatcher))):
        primal_ = pipeline.primal(dispatcher, argtypes)
        with stage("layout"):
            layout = ForwardLayout(primal_, argtypes, tangent_floats, duplicated, lanes)
        symbol = f"adcore_tangent_{next(_counter)}"
        rule_of = callees = None
        if stack_rule is not None:
            base = custom_rules.lookup()
            rule_of = lambda instr: stack_rule(instr) or reverse_call_rule(instr) or base(instr)   # noqa: E731
        else:
            callees = ForwardCallees(primal_.module, custom_rules.lookup(), primal_.kernel.context, symbol,
                                     lanes, primal_.locations)
        try:
            with stage("analyse"):
                spec, analyses, scratch = pipeline.analyse(
                    primal_, layout, symbol, distinct, callees, rule_of=rule_of,
                    seeds=seeds(primal_.func) if seeds else ())
            with stage("generate"):
                gen = TangentGenerator(primal_.func, spec, analyses, primal_.kernel.context, stack_rule, callees)
                tangent_ir = tangent_module(primal_.module, gen)
        except UnsupportedError as err:
            raise in_user_words(err, primal_.func, primal_.kernel) from None
        with stage("compile"):
            optimised_ir = native.compile_ir(numba_abi.bind_environments(tangent_ir), symbol,
                                             layout.pyname).ir
        n = len(argtypes)
        with stage("stub"):
            floats = [argtypes[k] for k in tangent_floats for _ in range(lanes)]
            arrays = [argtypes[k] for k in duplicated for _ in range(lanes)]
            checks = [(n + len(floats) + i, k, f"the tangent of argument {k}")
                      for i, k in enumerate(k for k in duplicated for _ in range(lanes))]
            stub = make_stub(symbol, list(argtypes) + floats + arrays, layout.result, checks)
        irs = (primal_.ir, tangent_ir, optimised_ir)
        return CompiledForward(layout, symbol, stub, pipeline.written_arguments(layout, analyses.clobbers),
                               distinct, irs)


class CompiledForward(CompiledGradient):
    """One native tangent function: ``native(*arguments, *float tangents, *array tangents)``
    (k of each, lane by lane) returns ``(primal return?, k tangents of a float return...,
    status)`` (status: see :class:`adcore.forward.generator.ForwardSpec`)."""

    def __init__(self, layout, symbol, stub, written, distinct, irs):
        super().__init__(layout.pyname, symbol, layout.has_primal, layout.duplicated, written, distinct,
                         lambda: irs, stub, None, native=stub)
        self.lanes, self.ret_float = layout.lanes, layout.ret_float
        self.tangent_floats, self.duplicated = layout.tangent_floats, layout.duplicated
        self.argtypes, self.checks_overlap = layout.argtypes, layout.checks_overlap

    def run(self, anns, tangents):
        """Run on the primal values of ``anns`` with ``tangents[k]``, a list of k tangents
        per argument (None for Const): returns ``(tuple of k return tangents or None, value)``.
        The array tangents of the Duplicated arrays are updated in place."""
        if not self.distinct:          # each lane's tangents must alias as the arrays do
            for j in range(self.lanes):
                self.check_aliasing([Duplicated(a.val, ts[j]) if ts is not None and isinstance(ts[j], np.ndarray)
                                     else Const(a.val) for a, ts in zip(anns, tangents)])
        primals = [a.val for a in anns]
        floats = [t for k in self.tangent_floats for t in tangents[k]]
        shadows, copies = [], []
        for k in self.duplicated:
            for d in tangents[k]:
                if d.strides != primals[k].strides:
                    tmp = _like_strides(primals[k], d)
                    copies.append((d, tmp))
                    shadows.append(tmp)
                else:
                    shadows.append(d)
        out = self.native(*primals, *floats, *shadows)
        for user, tmp in copies:
            user[...] = tmp
        value = out[0] if self.has_primal else None
        if not self.ret_float:
            return None, value
        first = 1 if self.has_primal else 0
        return tuple(out[first:first + self.lanes]), value

    @property
    def checkable_natively(self):
        """Whether calls may leave the checks of shared memory to the native function (its
        status -1, :class:`adcore.forward.generator.ForwardSpec`): compiled for distinct arrays,
        every argument a number or an array that cannot overlap itself (C or F layout)."""
        return self.distinct and self.checks_overlap and all(isinstance(t, (nbtypes.Number, nbtypes.Boolean))
                                     or isinstance(t, nbtypes.Array) and t.layout in "CF" for t in self.argtypes)
