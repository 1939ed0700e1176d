"""A parallel loop's chunk function split into an augmented forward, which records what its
reverse needs on a tape of its own, and that reverse (Enzyme's caches indexed by the loop
counter, here by chunk): each chunk's iterations run once, whichever thread runs their
reverse.

:func:`taped_chunk` differentiates the chunk function as a kernel (the same analyses and
save-or-recompute plan as a kernel's gradient) but splits the gradient where it goes from
its forward to its reverse pass, as for a function differentiated as a call
(:mod:`adcore.reverse.callees`).  The two halves are reached through Numba-ABI wrappers that njit
code calls (``aug(sched, args..., shadows..., tape)`` and ``rev(...)``), ``tape`` the
address of the chunk's four frame stacks (:data:`adcore.reverse.value_stack.FRAME_STACKS`, zeroed
before ``aug``; ``rev`` frees what they hold).

Numba's chunk function indexes a reduction's per-thread slot by the running thread's
number; here the number is read from the word after the schedule instead
(:func:`slotted_module`), so that a chunk's reverse uses the slot its forward used,
whichever thread runs it.

A split that could give another number than the serial gradient is not made (None): when
the forward half would keep a pointer on its tape (the reverse may be given copies of the
arrays) or read a shadow (it is given none), or the gradient needs shadows the loop's rule
does not give.
"""
import itertools
import re

import llvmlite.binding as llvm
import numpy as np
from numba.core import types as nbtypes

from .. import numba_abi
from ..annotations import Const
from ..backend import native
from ..calling import njit_stub
from .callees import Callees, Pair, Split
from ..errors import ADError
from ..frontend.capture import Kernel
from ..ir.writer import Emitter
from ..known_functions import CALL_DTOR, FREE
from .generator import AdjointGenerator, gradient_module
from ..rules import custom as custom_rules
from .value_stack import FRAME_BYTES, FRAME_STACKS, STACK_BYTES

_counter = itertools.count()


# Value-stack buffers a parallel loop's pieces keep between calls: enough for every piece of
# every call of the loop in one gradient (a stencil's 10 steps of 16 pieces hold 160 at once);
# a buffer past the pool is freed, and its fresh memory page-faults on the next call.
POOL_SLOTS = 1024


class TapedChunk:
    """The njit intrinsics ``aug`` and ``rev`` of one chunk function and shadow pattern
    (their last two arguments: the address of the piece's frame stacks, and ``pool``'s);
    ``rev`` returns the adjoints of the float scalar arguments (a tuple) or None.  ``pool``
    holds the pieces' value-stack buffers between calls (``POOL_SLOTS`` addresses), kept
    for the life of the process.  ``reread`` are the array arguments whose memory ``rev``
    reads (the others' values it needs are on the tape: the kernel may overwrite them
    between the halves without a copy)."""

    def __init__(self, aug, rev, floats, reread):
        self.aug, self.rev, self.floats, self.reread = aug, rev, floats, frozenset(reread)
        self.pool = np.zeros(POOL_SLOTS, np.int64)


def slotted_module(module, symbol):
    """``module`` with each ``get_thread_id()`` in chunk function ``symbol`` replaced by a
    load of the word after its schedule; None when the thread's number is read elsewhere."""
    fn = module.get_function(symbol)
    names = [a.name for a in fn.arguments]
    data, length = names[2 + numba_abi.DATA], names[2 + numba_abi.shape_field(0)]
    text = str(module)
    found = re.search(rf"^define [^@\n]*@\"?{re.escape(symbol)}\"?\(", text, re.M)
    if found is None:
        return None
    head, end = found.start(), text.index("\n}\n", found.start())
    body = re.sub(r"(%[\w.$-]+) = (?:tail )?call i64 @get_thread_id\(\)",
                  lambda m: (f"{m[1]}.at = getelementptr i64, ptr %\"{data}\", i64 %\"{length}\"\n"
                             f"  {m[1]} = load i64, ptr {m[1]}.at"), text[head:end])
    text = text[:head] + body + text[end:]
    if "call i64 @get_thread_id()" in text:
        return None
    return llvm.parse_assembly(text)


class SlottedChunk:
    """A chunk function whose reduction slot is the word after its schedule, as a kernel."""

    def __init__(self, chunk_kernel):
        self.kernel = chunk_kernel
        self.__name__ = chunk_kernel.__name__

    def _adcore_capture(self, argtypes):
        kernel = self.kernel._adcore_capture(argtypes)
        module = slotted_module(kernel.module, kernel.symbol)
        if module is None:
            raise NotImplementedError("the loop body reads the thread's number")
        return Kernel(kernel.argtypes, kernel.restype, kernel.symbol, module, kernel.pyname,
                      kernel.context, kernel.variables, kernel.environment)


def taped_chunk(chunk_kernel, anns, argtypes, shadowed, keep=False):
    """The :class:`TapedChunk` of ``chunk_kernel`` (an :class:`adcore.reverse.parallel_loops.ChunkKernel`)
    for annotations ``anns`` (``shadowed``: the array arguments that are Duplicated), or
    None when the split is not made (module docstring).  ``keep``: every value the reverse
    needs from the arrays goes on the tape (the kernel may overwrite them before the
    reverse runs), else the reverse may read arrays again that the chunk does not write."""
    from .. import pipeline
    try:
        primal_ = pipeline.primal(SlottedChunk(chunk_kernel), argtypes, "loops")
        layout = pipeline.Layout(primal_, anns, argtypes, Const, None)
        ctx = primal_.kernel.context
        symbol = f"adcore_chunk_{next(_counter)}"
        callees = Callees(primal_.module, custom_rules.lookup(), ctx, symbol, primal_.locations)
        spec, analyses, scratch = pipeline.analyse(primal_, layout, symbol, True, callees, arrays_change=keep)
        if scratch or list(layout.duplicated) != list(shadowed):
            return None
        floats = [primal_.func.args[i].type for i in spec.active]
        adjoint_type = "{ " + ", ".join(floats) + " }" if floats else "void"
        spec.split = Split(Pair(f"{symbol}.aug", f"{symbol}.rev", adjoint_type), "i32")
        gen = AdjointGenerator(primal_.func, spec, analyses, ctx, callees)
        text = gradient_module(primal_.module, gen)
    except (ADError, NotImplementedError):
        return None
    if gen.snapshots.at or _keeps_pointers(text, f"{symbol}.aug"):
        return None
    flat_args = [t for t in argtypes for t in numba_abi.flat_types(ctx, t)]
    flat = flat_args + [t for k in shadowed for t in numba_abi.flat_types(ctx, argtypes[k])]
    float_types = tuple(t for t in argtypes if isinstance(t, nbtypes.Float))
    restype = nbtypes.Tuple(float_types) if float_types else nbtypes.none
    if not re.search(r"^declare [^\n]*@llvm\.memcpy\.p0\.p0\.i64\(", text, re.M):
        text += "\ndeclare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)\n"
    text += _wrappers(symbol, flat, adjoint_type, floats, str(ctx.get_value_type(restype)))
    stub_types = list(argtypes) + [argtypes[k] for k in shadowed] + [nbtypes.int64, nbtypes.int64]
    stubs, starts = [], numba_abi.argument_starts(ctx, argtypes)[0]
    for half, result in (("aug", nbtypes.none), ("rev", restype)):
        wrapper = f"{symbol}.{half}.w"
        compiled = native.compile_ir(text, wrapper, chunk_kernel.__name__, custom_rules.linkable)
        if half == "aug" and _reads_parameters(compiled.ir, wrapper, range(len(flat_args), len(flat))):
            return None
        stubs.append(njit_stub.stub_call(wrapper, stub_types, result))
    reread = [k for k, t in enumerate(argtypes) if isinstance(t, nbtypes.Array) and
              _reads_parameters(compiled.ir, wrapper, [starts[k] - 2 + numba_abi.DATA])]
    return TapedChunk(*stubs, floats=len(float_types), reread=reread)


def _keeps_pointers(text, symbol):
    """Whether function ``symbol`` of ``text`` pushes a pointer on its value stack (its
    reverse may be given copies of the arrays: a kept pointer would read the original)."""
    head = text.index(f"@{symbol}(")
    return re.search(r"@ad\.push\.(reserved\.)?ptr\(ptr %ad\.stack,", text[head:text.index("\n}\n", head)]) is not None


def _reads_parameters(ir, symbol, positions):
    """Whether optimised function ``symbol`` of ``ir`` uses a parameter ``%p<j>`` for j in
    ``positions`` (the shadows: the forward half is given the primal arrays in their place)."""
    head = re.search(rf"^define [^\n]*@\"?{re.escape(symbol)}\"?\(", ir, re.M).start()
    body = ir[ir.index("{", head):ir.index("\n}\n", head)]
    return any(re.search(rf"%p{j}\b", body) for j in positions)


def _wrappers(symbol, flat, adjoint_type, floats, result_type):
    """Numba-ABI wrappers of the split: ``i32 @<symbol>.aug.w(ret, exc, <flat>, i64 tape)``
    and ``.rev.w``, which stores the adjoints in its return slot and frees the chunk's
    tape (its deferred destructors and frees, and its value stack)."""
    args = ", ".join(f"{t} %p{j}" for j, t in enumerate(flat))
    signature = f"i32 @{symbol}.{{}}.w(ptr %ret, ptr %exc, {args}, i64 %tape, i64 %pool)"
    aug = Emitter()
    slot, stacks, tape = _frame_stacks(aug)
    pool = aug("inttoptr i64 %pool to ptr", "pool")
    aug.line(f"call void @ad.stack.take(ptr {stacks[0]}, ptr {pool}, i64 {POOL_SLOTS})")
    status = aug(f"call i32 @{symbol}.aug(ptr {slot}, ptr %exc, {args}, {_passed(stacks)})", "status")
    aug.line(f"call void @llvm.memcpy.p0.p0.i64(ptr {tape}, ptr {stacks[0]}, i64 {FRAME_BYTES}, i1 false)")
    aug.line(f"ret i32 {status}")
    rev = Emitter()
    slot, stacks, _ = _frame_stacks(rev)
    call = f"call {adjoint_type} @{symbol}.rev(ptr {slot}, ptr %exc, {args}, {_passed(stacks)})"
    if floats:
        adjoints = rev(call, "adj")
        for j, t in enumerate(floats):
            field = rev(f"getelementptr inbounds {result_type}, ptr %ret, i32 0, i32 {j}")
            rev.line(f"store {t} {rev(f'extractvalue {adjoint_type} {adjoints}, {j}')}, ptr {field}")
    else:
        rev.line(call)
    rev.line(f"call void @ad.release(ptr {stacks[1]}, ptr @{CALL_DTOR})")
    rev.line(f"call void @ad.release(ptr {stacks[2]}, ptr @{FREE})")
    rev.line(f"call void @ad.stack.keep(ptr {stacks[0]}, ptr {rev('inttoptr i64 %pool to ptr', 'pool')}, "
             f"i64 {POOL_SLOTS})")
    rev.line(f"ret i32 {numba_abi.STATUS_OK}")
    return "\n" + aug.define(signature.format("aug")) + rev.define(signature.format("rev"))


def _frame_stacks(e):
    """``(a return slot, the chunk's frame stacks, their place on the tape)``: the stacks
    are copied from the address ``%tape`` into the running thread's own stack frame (each
    pop stores a stack's top: in the tape, the pieces' stacks share pages, and threads
    storing into one page slow each other down); ``aug`` copies them back."""
    tape = e("inttoptr i64 %tape to ptr", "tape")
    first = e.alloca(f"[{FRAME_BYTES} x i8]", "stack")
    e.line(f"call void @llvm.memcpy.p0.p0.i64(ptr {first}, ptr {tape}, i64 {FRAME_BYTES}, i1 false)")
    return e.alloca("ptr", "slot"), [first] + [
        e(f"getelementptr i8, ptr {first}, i64 {STACK_BYTES * j}", "stack") for j in range(1, len(FRAME_STACKS))], tape


def _passed(stacks):
    return ", ".join(f"ptr {s}" for s in stacks)
