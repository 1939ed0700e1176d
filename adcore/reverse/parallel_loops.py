"""The reverse pass of Numba's parallel loops, run on Numba's threads (Enzyme's treatment of
OpenMP's outlined regions).

Numba outlines the body of a parallel loop (a parfor: a ``prange`` loop, a reduction, a
parallel array expression) into a *chunk function* ``chunk(sched, inputs..., reduction
arrays...)`` that runs the iterations ``sched[0] .. sched[ndim]`` of the outermost loop.
For reverse mode adcore lowers the kernel with each parfor as one call of its chunk
function over the whole range (:func:`adcore.numba_abi.parfors_as_calls`), keeps those
calls as calls, and gives each a rule.  Its forward splits the range into chunks (up to 8
per thread) run on Numba's threading layer (``prange``), each through the augmented
forward of the chunk function (:mod:`adcore.reverse.chunk_tape`), which keeps the chunk's values on
a tape of its own; its reverse runs each chunk's reverse from that tape, on whichever
thread takes it.  No value stack is shared between threads.  Where a chunk cannot keep a
tape (:func:`taped`), the reverse runs adcore's own gradient of the chunk function on each
chunk instead: the chunk's iterations again (they read what they read the first time),
then their reverse.

A loop is run this way only when that is exactly the serial gradient (:func:`plan`):

* every array the chunk writes it writes only at the loop index ``out[i]`` (so chunks
  write disjoint elements, and their shadows too) and does not read;
* an array it reads is not written by the loop; where the kernel overwrites it after the
  loop, the chunks keep on their tapes the values of it their reverse needs
  (:func:`taped` with ``keep``), or, where they cannot, the kernel copies it just before
  the loop (adcore's check of custom-rule operands); its shadow receives only additions: a
  shared shadow where every read is at the loop index or in the loop index's row
  (``x[i, j]``, checked at each call as a write in its row is); a shared shadow too where
  every read is in a band of
  rows around the loop index's row (``u[i - 1, j] + u[i + 1, j]``,
  :mod:`adcore.reverse.row_spans`), the reverses of every other piece of the loop run at
  once, then the others; else one private zeroed shadow per thread, added up after the
  loop (a parameter read by every iteration, ``x[idx[i]]``);
* a reduction (``s += ...``) is a sum: its per-thread slot's adjoint is the same for every
  thread, whichever thread runs a chunk's reverse;
* no two of the kernel's arrays that reach the loop share memory (the kernel's arrays are
  distinct, and each is passed whole, not as a view of another).

A loop that does not qualify is differentiated serially: its chunk call, over the whole
range, is inlined like any callee.  Where the kernel's arrays may share memory, or an array
a loop reads is overwritten after it, the kernel is differentiated with all its parallel
loops lowered as loops (serially), which is always exact.  The plan report
(``adcore.cache_report``) and a compiled gradient's ``parallel_loops`` say which loops run
their reverse on threads, and why the others do not.
"""
import itertools
import os
import textwrap

import numba
import numpy as np
from numba import prange
from numba.core import types as nbtypes
from numba.np.numpy_support import as_dtype

from .. import numba_abi
from ..known_functions import RUNTIME_PREFIX
from ..frontend.capture import Kernel, unoptimised_module
from ..ir.model import gep_element_type
from ..rules.custom import carray
from ..rules.scalar import is_pure_call
from .range_copies import copied_range, range_copies
from .row_spans import band_checks, row_checks
from .value_stack import FRAME_BYTES

_counter = itertools.count()
_reverses = {}           # (chunk symbol, shadowed arrays) -> njit reverse


class ChunkKernel:
    """A parallel loop's chunk function, as a kernel adcore differentiates."""

    def __init__(self, call, pyname):
        self.call = call
        self.__name__ = f"the parallel loop at line {call.line} of {pyname}"

    def _adcore_capture(self, argtypes):
        cres = self.call.cres
        return Kernel(tuple(argtypes), nbtypes.none, self.call.symbol, unoptimised_module(cres.library),
                      self.__name__, cres.target_context, numba_abi.typed_variables(cres),
                      cres.environment)


class LoopPlan:
    """What :func:`plan` found for one parallel loop: ``reason`` (None when its reverse runs
    in parallel), ``written`` / ``private`` / ``shared`` (positions among the chunk
    function's arguments of the arrays it writes, of those read elsewhere than at the loop
    index or in a band of rows, and of those read only there), ``rows`` (those of the
    written arrays written in the loop index's row, :mod:`adcore.reverse.row_spans`) and
    ``checks`` (the Python conditions on the chunk function's arguments ``a<k>`` and the
    launcher's ``lo``, ``n``, ``chunks`` under which they are: where one fails at a call,
    the loop's pieces run one after another), ``bands`` (those read in a band of rows
    around the loop index's row) and ``band_checks`` (the conditions under which pieces
    two apart read disjoint bands: where one fails, the reverse runs the pieces one after
    another)."""

    def __init__(self, call, kernel, reason=None, written=(), private=(), shared=(), rows=(), checks=(),
                 bands=(), band_checks=()):
        self.call, self.kernel, self.reason = call, kernel, reason
        self.written, self.private, self.shared = tuple(written), tuple(private), tuple(shared)
        self.rows, self.checks = tuple(rows), tuple(checks)
        self.bands, self.band_checks = tuple(bands), tuple(band_checks)

    @property
    def parallel(self):
        return self.reason is None

    @property
    def contiguous(self):
        """Whether each thread runs one block of neighbouring ranges of the loop: where its
        iterations write rows or read bands of rows, the rows stay in one core's cache
        from the forward to the reverse (measured on a 2-D stencil: 6-8% faster at 2
        threads than ranges handed out in turn)."""
        return bool(self.rows or self.bands)

    def describe(self, taped=False, keep=False):
        """One line for the plan report; ``taped``: the chunks keep their values on tapes
        (``keep``: the values they read from arrays too)."""
        where = f"parallel loop at line {self.call.line}"
        if not self.parallel:
            return f"{where}: reverse runs serially ({self.reason})"
        how = "each chunk's iterations run again before their reverse"
        if taped:
            how = "each chunk keeps its values on a tape of its own" + (
                ", the values it reads from arrays included (the kernel overwrites an array it "
                "reads after the loop)" if keep else "")
        return (f"{where}: reverse runs on Numba's threads; arrays accessed only at the loop "
                f"index or reduced (shared shadows): {len(self.written) + len(self.shared)}, "
                f"read in a band of rows (a shared shadow, every other piece at once): "
                f"{len(self.bands)}, read elsewhere (a private shadow per thread, added after "
                f"the loop): {len(self.private)}; {self.rows_written()}{how}")

    def rows_written(self):
        if not self.rows:
            return ""
        return (f"written in the loop index's row: {len(self.rows)} (checked at each call: where "
                f"not, the pieces run one after another); ")


def _groups(func, ctx, argtypes):
    """``[(Numba type, LLVM arguments)]`` of a Numba-ABI function's flattened parameters."""
    starts, end = numba_abi.argument_starts(ctx, argtypes)
    return [(t, func.args[a:b]) for t, a, b in zip(argtypes, starts, starts[1:] + [end])]


def _loop_index(func, sched_data):
    """The outermost loop's counter: the phi ``i = phi [sched[0], entry], [i + 1, latch]``."""
    starts = {i for i in func.instructions() if i.opcode == "load" and i.operands
              and i.operands[0].defn is sched_data}
    for i in func.instructions():
        if i.opcode == "phi" and len(i.operands) == 2 and any(o.defn in starts for o in i.operands):
            step = next(o.defn for o in i.operands if o.defn not in starts)
            if getattr(step, "opcode", None) == "add" and step.operands[0].defn is i \
                    and step.operands[1].ref == "1":
                return i
    return None


def _accesses(users, data, index, copies):
    """``(reads, writes, reads elsewhere, writes elsewhere)`` through array data pointer
    ``data``; "elsewhere": at an element other than ``data[index]``; a copy of the piece's
    range (one of ``copies``, :func:`adcore.reverse.range_copies.range_copies`) reads or writes at the loop index.
    None when the pointer escapes (stored, passed to another call, compared)."""
    reads = writes = far_reads = far_writes = False
    stack = [(data, True, None)]
    while stack:
        ptr, far, element = stack.pop()
        for user, k in users.get(id(ptr), []):
            if user.opcode == "getelementptr" and k == 0:
                step = user.operands[1].defn if len(user.operands) == 2 else False
                if ptr is data:
                    at_index = _same_value(step, index)
                else:                    # data[i] then Numba's wrap of a negative i: no move
                    at_index = not far and _wraps(step, index) and gep_element_type(user) == element
                stack.append((user, not at_index, gep_element_type(user)))
            elif user.opcode == "load" and k == 0:       # an access of another width reaches
                reads = True                             # the next element
                far_reads = far_reads or far or user.type != element
            elif user.opcode == "store" and k == 1:
                writes = True
                far_writes = far_writes or far or user.operands[0].type != element
            elif user in copies and k in (0, 1) and ptr is not data and ptr.operands[0].defn is data:
                reads, writes = reads or k == 1, writes or k == 0
            elif not (user.opcode == "ptrtoint" and _only_compared(users, user)):
                return None
    return reads, writes, far_reads, far_writes


def _only_compared(users, value):
    """Whether integer ``value`` (an address) only reaches comparisons, through integer
    arithmetic and selects: Numba's test of whether two arrays overlap before it assigns
    one to a slice of the other (``D[i] = expr``), which touches no memory."""
    stack, seen = [value], set()
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        for user, _ in users.get(id(v), []):
            if user.opcode in ("add", "sub", "select", "phi"):
                stack.append(user)
            elif user.opcode != "icmp":
                return False
    return True


def _repeatable(call):
    """Whether running ``call`` again (the reverse reruns the loop's iterations) changes
    nothing the user sees: math, LLVM intrinsics, Numba's reference counts and allocations,
    the thread number."""
    callee = call.callee or ""
    return is_pure_call(call) or callee.startswith(("llvm.", RUNTIME_PREFIX)) or callee == "get_thread_id"


def _wraps(defn, index):
    """Whether ``defn`` is Numba's wrap-around of a negative index ``i``, ``i < 0 ? n : 0``:
    zero for the loop index, which the split ranges keep nonnegative (:data:`_SPLIT`)."""
    if getattr(defn, "opcode", None) != "select" or defn.operands[2].ref != "0":
        return False
    test = defn.operands[0].defn
    return (getattr(test, "opcode", None) == "icmp" and test.predicate == "slt"
            and _same_value(test.operands[0].defn, index) and test.operands[1].ref == "0")


def _same_value(defn, index):
    while defn is not None and getattr(defn, "opcode", None) in ("sext", "zext"):
        defn = defn.operands[0].defn
    return defn is index


def plan(chunk_primal, kernel):
    """The :class:`LoopPlan` of the parallel loop of ``kernel`` (a :class:`ChunkKernel`) from
    its chunk function's cleaned IR."""
    call = kernel.call
    func, ctx = chunk_primal.func, chunk_primal.kernel.context
    groups = _groups(func, ctx, call.argtypes)
    data = numba_abi.DATA
    sched = groups[0][1][data]
    index, copies = _loop_index(func, sched), range_copies(func, groups, sched)
    if index is None:
        copied = copied_range(func, copies)
        if copied is None:
            return LoopPlan(call, kernel, "Numba's compiled body of the loop has no loop over its range "
                                          "and is not a copy of that range")
        return LoopPlan(call, kernel, None, written=[copied[0]], shared=[copied[1]])
    effect = next((i for i in func.instructions() if i.opcode == "call" and not _repeatable(i)), None)
    if effect is not None:          # its reverse runs the iterations again: printed twice, ...
        return LoopPlan(call, kernel, f"the loop body calls {numba_abi.python_name(effect.callee)}, which "
                                      f"must not run twice")
    users = func.uses()
    written, private, shared, rows, checks, bands, banded = [], [], [], [], [], [], []
    for k, (t, args) in enumerate(groups[1:], 1):
        if isinstance(t, nbtypes.Array):
            found = _accesses(users, args[data], index, copies)
            if found is None:
                return LoopPlan(call, kernel, f"argument {k} of the loop body escapes")
            reads, writes, far_reads, far_writes = found
            if k in call.reductions:
                if call.reductions[k] not in _SUMS:
                    return LoopPlan(call, kernel, "a reduction other than a sum")
                written.append(k)
            elif writes and (reads or far_writes):
                in_rows = None if reads else row_checks(func, groups, args[data], index)
                if in_rows is None:
                    return LoopPlan(call, kernel, "an array written elsewhere than at the loop index "
                                                  "or in its row, or read and written")
                written.append(k)
                rows.append(k)
                checks += in_rows
            elif writes:
                written.append(k)
            elif reads and t.dtype in (nbtypes.float32, nbtypes.float64):
                in_rows = row_checks(func, groups, args[data], index, "load") if far_reads else None
                band = band_checks(func, groups, args[data], index) if far_reads and in_rows is None else None
                if in_rows is not None:         # read only in the loop index's row: x[i, j]
                    shared.append(k)
                    checks += in_rows
                elif band is not None:
                    bands.append(k)
                    banded += band
                else:
                    (private if far_reads else shared).append(k)
        elif not isinstance(t, (nbtypes.Float, nbtypes.Integer, nbtypes.Boolean)):
            return LoopPlan(call, kernel, f"an argument of type {t}")
    return LoopPlan(call, kernel, None, written, private, shared, rows, list(dict.fromkeys(checks)), bands,
                    list(dict.fromkeys(banded)))


def _sums():
    import operator
    return (operator.iadd, operator.isub, operator.add, operator.sub)


_SUMS = _sums()


def one_thread():
    """True when Numba runs on one thread (``NUMBA_NUM_THREADS=1``): a reverse on threads
    would only run the loops' iterations twice."""
    return numba.config.NUMBA_NUM_THREADS == 1


class Serial(Exception):
    """The kernel's parallel loops cannot all run their reverse on threads: ``plans`` says why."""

    def __init__(self, plans):
        super().__init__("; ".join(plans))
        self.plans = plans


def serial_reason(err):
    """Why the kernel's parallel loops are differentiated serially, from the error that
    differentiating them as chunk calls raised."""
    if "overwritten after the call" in str(err):
        why = "an array a parallel loop reads is overwritten after the loop"
    elif isinstance(err, NotImplementedError):
        why = "a parallel loop writes a scalar read after it (a race variable)"
    else:
        why = getattr(err, "detail", "") or str(err)
    return f"parallel loops: reverse runs serially ({why})"


def plans(kernel):
    """The :class:`LoopPlan` of each parallel loop of ``kernel`` (lowered as chunk calls);
    the calls of those whose reverse can run on threads are bound to their rule, the others
    are inlined by the cleanup (the chunk function over the whole range: the serial loop)."""
    from ..rules import custom as custom_rules
    from ..pipeline import primal
    found = []
    for call in kernel.chunk_calls:
        chunk = ChunkKernel(call, kernel.pyname)
        found.append(plan(primal(chunk, call.argtypes), chunk))
    for p in found:
        if p.parallel:
            starts, _ = numba_abi.argument_starts(kernel.context, p.call.argtypes)
            custom_rules.bind_parallel_loop(p, _only_written(p, kernel.context),
                                            [starts[k] + numba_abi.DATA for k in p.written])
    return found


def _only_written(loop, context):
    """Operand positions of the chunk call that its reverse does not read: the return slot,
    excinfo, every array's meminfo and parent, and the data of the arrays it writes."""
    starts, end = numba_abi.argument_starts(context, loop.call.argtypes)
    read = {starts[k] + numba_abi.DATA for k, t in enumerate(loop.call.argtypes)
            if isinstance(t, nbtypes.Array) and k not in loop.written}
    return tuple(k for k in range(end) if k not in read)


def check_distinct(loops, primal_, pointers):
    """:class:`Serial` unless, at every chunk call, the arrays passed are distinct objects
    (no two point into the same argument or allocation; none of unknown origin)."""
    from ..analysis.pointers import UNKNOWN
    symbols = {p.call.symbol: p for p in loops if p.parallel}
    ctx = primal_.kernel.context
    for instr in primal_.func.instructions():
        loop = symbols.get(instr.callee) if instr.opcode == "call" else None
        if loop is None:
            continue
        starts, _ = numba_abi.argument_starts(ctx, loop.call.argtypes)
        seen = set()
        for k, t in enumerate(loop.call.argtypes):
            if not isinstance(t, nbtypes.Array) or k == 0:
                continue
            bases = pointers.bases(instr.operands[starts[k] + numba_abi.DATA])
            if bases == UNKNOWN or any(id(b) in seen for b in bases):
                raise Serial([f"parallel loop at line {loop.call.line}: arrays it receives may "
                              f"share memory"])
            seen |= {id(b) for b in bases}


# -- the forward pass: the chunk function on every thread ----------------------------------
_forwards = {}           # chunk symbol -> njit forward


# A loop's range in ``per`` chunks per thread; thread t holds a contiguous block of chunk
# numbers (Numba's static schedule), which run ranges as :func:`_piece` says.
_SPLIT = """
    lo = np.int64(a0[0])
    hi = np.int64(a0[a0.shape[0] // 2])
    n = hi - lo + 1
    workers = numba.get_num_threads()
    threads = workers if lo >= 0 else 1    # a negative index wraps: one piece, the serial loop
    per = max(1, min(8, n // threads))
    chunks = threads * per
"""


def _rank(loop):
    """The range number of chunk ``c``: with :attr:`LoopPlan.contiguous` the chunk's own
    (each thread runs one block of neighbouring ranges), else ranges handed out in turn
    (thread t runs ranges t, t + threads, ...: loops whose iterations grow or shrink, a
    triangle of pairs, share the work evenly)."""
    return "c" if loop.contiguous else "(c % per) * threads + c // per"


def _piece(loop, slot="0"):
    """The lines giving chunk ``c`` its range ``first .. last`` and ``s``, the schedule of
    that range followed by the reduction slot ``slot`` its iterations use
    (:func:`adcore.reverse.chunk_tape.slotted_module`)."""
    return (f"        r = {_rank(loop)}\n"
            "        first = lo + (n * r) // chunks\n"
            "        last = lo + (n * (r + 1)) // chunks - 1\n"
            f"        s = piece_schedule(a0, first, last, {slot})[:a0.shape[0]]\n")


@numba.njit(cache=True)
def piece_schedule(a0, first, last, slot):
    """A copy of the schedule ``a0`` (lower bounds, then upper bounds) for the iterations
    ``first .. last`` of its outermost loop, followed by ``slot``.  Compiled once into
    Numba's disk cache, as are :func:`thread_shadow` and :func:`add_private_rows`: the
    launchers that call them are compiled in every process."""
    m = a0.shape[0]
    buf = np.empty(m + 1, a0.dtype)
    for i in range(m):
        buf[i] = a0[i]
    buf[0] = first
    buf[m // 2] = last
    buf[m] = slot
    return buf


@numba.njit(cache=True)
def thread_shadow(rows, d, t):
    """Thread ``t``'s private shadow of ``d`` (its row of ``rows``), shaped as ``d``."""
    return rows[t, :d.size].reshape(d.shape)


def _chunk_loop(loop, checks, body, backwards=False, phases=False):
    """The lines running ``body`` (lines indented 8 spaces, for chunk ``c``) for every
    chunk of ``loop`` on Numba's threads (``phases``: first the chunks of even range number
    in range order, then those of odd), only where ``checks``
    (:mod:`adcore.reverse.row_spans`) hold at the call, else for one chunk after another
    in the order of their ranges (backwards for a reverse): exactly the serial loop."""
    rank = "c = q\n" if loop.contiguous else "c = (q % threads) * per + q // threads\n"
    parallel = "    for c in numba.prange(chunks):\n" + body if not phases else (
        "    for phase in range(2):\n        for h in numba.prange((chunks + 1 - phase) // 2):\n"
        "            q = 2 * h + phase\n            " + rank + textwrap.indent(body, "    "))
    if not checks:
        return parallel
    order = "range(chunks - 1, -1, -1)" if backwards else "range(chunks)"
    return (f"    if {' and '.join(f'({c})' for c in checks)}:\n" + textwrap.indent(parallel, "    ") +
            f"    else:\n        for q in {order}:\n            " + rank + textwrap.indent(body, "    "))


def _reverse_chunk_loop(loop, shadowed, body):
    """:func:`_chunk_loop` for a reverse: in two phases where an array read in a band of
    rows has a shadow, under the row and band checks."""
    bands = any(k in shadowed for k in loop.bands)
    return _chunk_loop(loop, loop.checks + (loop.band_checks if bands else ()), body, True, bands)


def forward_function(loop):
    """The njit function running ``loop``'s chunk function on Numba's threads, one range
    per thread, with the chunk function's own arguments (what the gradient's forward pass
    calls instead of the whole range on one thread)."""
    if loop.call.symbol not in _forwards:
        names = ", ".join(f"a{k}" for k in range(len(loop.call.argtypes)))
        rest = ", ".join(f"a{k}" for k in range(1, len(loop.call.argtypes)))
        source = (f"def forward({names}):" + _SPLIT +
                  "    if n <= 0:\n        return\n" +
                  _chunk_loop(loop, loop.checks, _piece(loop) + f"        if first <= last:\n            run((s, {rest}))\n"))
        scope = {"np": np, "numba": numba, "run": numba_abi.chunk_runner(loop.call), **_launch_helpers()}
        exec(source, scope)
        numba_abi.start_threads()
        _forwards[loop.call.symbol] = numba.njit(parallel=True)(scope["forward"])
    return _forwards[loop.call.symbol]


def forward_call(gen, instr, rule):
    """The forward pass's call of a parallel loop's chunk function: the same arguments, to
    :func:`forward_function` (or, where the reverse reads the chunks' tapes, to
    :func:`taped_forward_function` with the tape's address)."""
    from ..rules.custom import native_symbol
    tape = gen.loop_tapes.get(instr)
    if tape is None:
        symbol, _ = native_symbol(forward_function(rule.loop), rule.argtypes)
        params = ", ".join(o.type for o in instr.operands)
        gen.e.declare(symbol, f"declare i32 @{symbol}({params})")
        return gen.copy_text(instr).replace(f"@{instr.callee}(", f"@{symbol}(", 1)
    address, shadowed, keep = tape
    symbol, _ = native_symbol(taped_forward_function(rule.loop, shadowed, keep),
                              list(rule.argtypes) + [nbtypes.int64])
    gen.e.declare(symbol, f"declare i32 @{symbol}({', '.join(o.type for o in instr.operands)}, i64)")
    args = ", ".join(f"{o.type} {o.ref}" for o in instr.operands)
    gen.loop_bytes_used = True         # the chunks' tapes count in the gradient's cached bytes
    gen.stack_types.add("ptr")         # and a failed gradient releases them (%ad.looptapes)
    head, word, kept, total, added = (gen.e.fresh(n) for n in ("head", "word", "kept", "total", "added"))
    return "\n  ".join([f"{instr.ref} = call i32 @{symbol}({args}, i64 {address})",
                        f"{head} = inttoptr i64 {address} to ptr",
                        f"{word} = getelementptr i8, ptr {head}, i64 {8 * _BYTES}",
                        f"{kept} = load i64, ptr {word}",
                        f"{total} = load i64, ptr %ad.loopbytes",
                        f"{added} = add i64 {total}, {kept}",
                        f"store i64 {added}, ptr %ad.loopbytes",
                        f"call void @ad.push.ptr(ptr %ad.looptapes, ptr {head})"])


# -- tapes: each chunk's values kept for its reverse (adcore.reverse.chunk_tape) --------------------
_tapes = {}              # (chunk symbol, shadowed arrays) -> TapedChunk or None
_taped_forwards = {}     # (chunk symbol, shadowed arrays) -> njit forward
_MAX_CHUNKS = 8 * numba.config.NUMBA_NUM_THREADS       # _SPLIT: at most 8 chunks a thread
_BYTES = 3 + _MAX_CHUNKS  # the word of a tape's head holding the bytes its chunks kept
_HEAD = 4 + _MAX_CHUNKS   # words: chunks, per, threads, the thread each chunk ran on, bytes
HEAD_BYTES = 8 * _HEAD    # a loop tape's head, before its chunks' frame stacks


def tape_bytes():
    """Bytes of a parallel loop's tape: its head, then each chunk's frame stacks."""
    return 8 * _HEAD + _MAX_CHUNKS * FRAME_BYTES


def taped(loop, shadowed, keep=False):
    """``loop``'s chunk function split at a tape of its own for the arrays ``shadowed``
    (:func:`adcore.reverse.chunk_tape.taped_chunk`, ``keep`` as there), or None: then its
    reverse runs each chunk's iterations again.  ``ADCORE_CHUNK_TAPES=0`` turns tapes off."""
    key = (loop.call.symbol, tuple(shadowed), keep)
    if key not in _tapes:
        from .chunk_tape import taped_chunk
        _tapes[key] = None if os.environ.get("ADCORE_CHUNK_TAPES", "1") == "0" else \
            taped_chunk(loop.kernel, _annotations(loop.call.argtypes, shadowed), loop.call.argtypes,
                        tuple(shadowed), keep)
    return _tapes[key]


def taped_forward_function(loop, shadowed, keep=False):
    """The njit function running ``loop``'s chunks on Numba's threads as
    :func:`forward_function`, each chunk through its augmented forward (of
    ``taped(loop, shadowed, keep)``) onto its own tape ``forward(args..., tape)``, and
    noting in the tape's head which thread ran it and the bytes the chunks' value stacks
    kept."""
    key = (loop.call.symbol, tuple(shadowed), keep)
    if key not in _taped_forwards:
        names = [f"a{k}" for k in range(len(loop.call.argtypes))]
        passed = ", ".join(names[1:] + [f"a{k}" for k in shadowed])
        source = (f"def forward({', '.join(names)}, tape):" + _SPLIT +
                  f"    head = carray(tape, {_HEAD}, np.int64)\n"
                  "    head[0] = chunks if n > 0 else 0\n"
                  "    head[1] = per\n"
                  "    head[2] = threads\n"
                  "    if n <= 0:\n        return\n" +
                  _chunk_loop(loop, loop.checks, "        slot = thread_id()\n" + _piece(loop, "slot") +
                              "        head[3 + c] = slot\n"
                              "        if first <= last:\n"
                              f"            aug(s, {passed}, tape + {8 * _HEAD} + c * {FRAME_BYTES}, "
                              f"{taped(loop, shadowed, keep).pool.ctypes.data})\n") +
                  "    kept = 0\n"
                  "    for c in range(chunks):\n"
                  f"        stack = carray(tape + {8 * _HEAD} + c * {FRAME_BYTES}, 2, np.int64)\n"
                  "        kept += stack[1] - stack[0]\n"
                  f"    head[{_BYTES}] = kept\n")
        scope = {"np": np, "numba": numba, "carray": carray, "thread_id": numba_abi.thread_id, **_launch_helpers(),
                 "aug": taped(loop, shadowed, keep).aug}
        exec(source, scope)
        numba_abi.start_threads()
        _taped_forwards[key] = numba.njit(parallel=True)(scope["forward"])
    return _taped_forwards[key]


# -- the reverse: one gradient of the chunk function per thread ----------------------------
def reverse_function(loop, shadowed):
    """The njit reverse of ``loop``'s chunk call, for the arrays ``shadowed`` (their
    positions among the chunk function's arguments): called as a custom rule's reverse
    ``reverse(args..., shadow per array argument)``; returns the adjoints of the float
    scalar arguments (a tuple) or None."""
    key = (loop.call.symbol, tuple(shadowed))
    if key not in _reverses:
        _reverses[key] = _build_reverse(loop, tuple(shadowed))
    return _reverses[key]


PAGE_BYTES = 4096


@numba.njit(cache=True)
def thread_rows(workers, d):
    """``workers`` zeroed rows of ``d.size`` elements of ``d``'s type, each on pages of its
    own: threads adding into rows that share a page slow each other down (a cache line
    shared, or, measured on the GMM loop's reverse, lines of one row drawn by a hardware
    prefetcher, which streams within a page, while another thread adds into them: one
    thread ran 2.8x slower)."""
    per = PAGE_BYTES // d.itemsize
    row = -(-d.size // per) * per
    flat = np.zeros(workers * row + per, d.dtype)
    start = (-flat.ctypes.data % PAGE_BYTES) // d.itemsize
    return flat[start:start + workers * row].reshape(workers, row)


@numba.njit(parallel=True, cache=True)
def add_private_rows(d, p):
    """``d`` plus the sum of ``p``'s rows (the threads' private shadows of ``d``, from
    :func:`thread_rows`: each row holds ``d``'s elements in C order), the rows added in
    order for each element, the elements shared among the threads by ``d``'s first index.
    Compiled once into Numba's disk cache: the array methods it stands for (``sum`` over an
    axis) cost a second of compiles at every process's first parallel gradient."""
    if d.size == 0:
        return
    inner = d.size // d.shape[0]
    for i in prange(d.shape[0]):
        k = i * inner
        for index in np.ndindex(d.shape[1:]):
            total = p[0, k]
            for t in range(1, p.shape[0]):
                total += p[t, k]
            d[(i,) + index] += total
            k += 1


def _launch_helpers():
    """The disk-cached njit helpers the generated launchers call, by name."""
    return {"piece_schedule": piece_schedule, "thread_shadow": thread_shadow,
            "thread_rows": thread_rows, "add_private_rows": add_private_rows}


def _private_shadow(k):
    """The line allocating the threads' private shadows of array ``d<k>``: one zeroed row
    per thread (:func:`thread_rows`)."""
    return f"    p{k} = thread_rows(workers, d{k})"


def _thread_shadow(k):
    """The running thread's private shadow of array ``d<k>``, shaped as ``d<k>``."""
    return f"thread_shadow(p{k}, d{k}, thread_id())"


def _annotations(argtypes, shadowed):
    from ..annotations import Active, Const, Duplicated
    anns = []
    for k, t in enumerate(argtypes):
        if isinstance(t, nbtypes.Array):
            sample = np.zeros((1,) * t.ndim, dtype=as_dtype(t.dtype))
            anns.append(Duplicated(sample, sample.copy()) if k in shadowed else Const(sample))
        elif isinstance(t, nbtypes.Float):
            anns.append(Active(0.0))
        else:
            anns.append(Const(0))
    return anns


def _build_reverse(loop, shadowed):
    from .. import pipeline
    from ..annotations import Const
    argtypes = loop.call.argtypes
    grad = pipeline.differentiate(loop.kernel, _annotations(argtypes, shadowed), argtypes, Const, True,
                                  parfors="loops")
    if list(grad.shadowed) != list(shadowed):
        raise Serial([f"parallel loop at line {loop.call.line}: its gradient needs shadows of "
                      f"arrays the kernel does not differentiate"])
    names = [f"a{k}" for k in range(len(argtypes))]
    arrays = [k for k, t in enumerate(argtypes) if isinstance(t, nbtypes.Array)]
    floats = [k for k, t in enumerate(argtypes) if isinstance(t, nbtypes.Float)]
    private = [k for k in loop.private if k in shadowed]
    empty = f"({', '.join('0.0' for _ in floats)},)" if floats else "None"
    lines = [f"def reverse({', '.join(names + [f'd{k}' for k in arrays])}):" + _SPLIT.rstrip("\n"),
             "    if n <= 0:", f"        return {empty}"]
    lines += [_private_shadow(k) for k in private]
    lines += [f"    r{k} = np.zeros(chunks)" for k in floats]
    call_shadows = [_thread_shadow(k) if k in private else f"d{k}" for k in shadowed]
    body = [_piece(loop).rstrip("\n"), "        if first <= last:",
            f"            out = grad(s, {', '.join(names[1:] + call_shadows)})"]
    body += [f"            r{k}[c] = out[{j}]" for j, k in enumerate(floats)]
    lines.append(_reverse_chunk_loop(loop, shadowed, "\n".join(body) + "\n").rstrip("\n"))
    lines += [f"    add_private_rows(d{k}, p{k})" for k in private]
    lines.append(f"    return ({', '.join(f'r{k}.sum()' for k in floats)},)" if floats else "    return None")
    scope = {"np": np, "numba": numba, "grad": grad.native, "thread_id": numba_abi.thread_id,
             **_launch_helpers()}
    exec("\n".join(lines), scope)
    numba_abi.start_threads()
    return numba.njit(parallel=True)(scope["reverse"])


def taped_reverse_function(loop, shadowed, keep=False):
    """The njit reverse of ``loop``'s chunk call reading the chunks' tapes (the rule's
    reverse as :func:`reverse_function`, with the tape's address last), every chunk on
    whichever thread takes it: a chunk reads its reduction slot's adjoint from a copy of its
    own (a sum's slot adjoint leaves a chunk's reverse as it came in), adds into the
    running thread's private shadows, and is given the slot number its forward used."""
    key = ("taped", loop.call.symbol, tuple(shadowed), keep)
    if key not in _reverses:
        _reverses[key] = _build_taped_reverse(loop, tuple(shadowed), keep)
    return _reverses[key]


def _build_taped_reverse(loop, shadowed, keep):
    argtypes = loop.call.argtypes
    names = [f"a{k}" for k in range(len(argtypes))]
    arrays = [k for k, t in enumerate(argtypes) if isinstance(t, nbtypes.Array)]
    floats = [k for k, t in enumerate(argtypes) if isinstance(t, nbtypes.Float)]
    private = [k for k in loop.private if k in shadowed]
    empty = f"({', '.join('0.0' for _ in floats)},)" if floats else "None"
    shadows = [f"d{k}.copy()" if k in loop.call.reductions else
               _thread_shadow(k) if k in private else f"d{k}" for k in shadowed]
    lines = [f"def reverse({', '.join(names + [f'd{k}' for k in arrays])}, tape):",
             f"    head = carray(tape, {_HEAD}, np.int64)",
             "    chunks = head[0]",
             "    if chunks <= 0:", f"        return {empty}",
             "    per, threads = head[1], head[2]",
             "    lo = np.int64(a0[0])",
             "    n = np.int64(a0[a0.shape[0] // 2]) - lo + 1",
             "    workers = numba.get_num_threads()"]
    lines += [_private_shadow(k) for k in private]
    lines += [f"    r{k} = np.zeros(chunks)" for k in floats]
    body = ["        slot = head[3 + c]", _piece(loop, "slot").rstrip("\n"), "        if first <= last:",
            f"            out = rev(s, {', '.join(names[1:] + shadows)}, tape + {8 * _HEAD} + c * {FRAME_BYTES}, "
            f"{taped(loop, shadowed, keep).pool.ctypes.data})"]
    body += [f"            r{k}[c] = out[{j}]" for j, k in enumerate(floats)]
    lines.append(_reverse_chunk_loop(loop, shadowed, "\n".join(body) + "\n").rstrip("\n"))
    lines += [f"    add_private_rows(d{k}, p{k})" for k in private]
    lines.append(f"    return ({', '.join(f'r{k}.sum()' for k in floats)},)" if floats else "    return None")
    scope = {"np": np, "numba": numba, "carray": carray, "thread_id": numba_abi.thread_id,
             "rev": taped(loop, shadowed, keep).rev, **_launch_helpers()}
    exec("\n".join(lines), scope)
    numba_abi.start_threads()
    return numba.njit(parallel=True)(scope["reverse"])
