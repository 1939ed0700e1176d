"""One staged loss: trace it, lower the recording, differentiate the program with adcore,
and generate the guard and the driver that call it.

``Staged(f, args)`` compiles; ``staged.gather(f, *args)`` returns ``None`` when the arguments
do not match what was compiled (other shapes, another model structure, another
activation, a rebound captured variable...), else the driver's arguments, which
``staged.run`` uses (``staged.call_gradient(zero, f, *args)`` checks and runs in one
call).  ``lookup`` keeps the compiled programs per loss function (per code
object, so a closure made anew over the same values reuses them) and picks the one that
matches.
"""
import re
import threading

import numba
import numpy as np

from adcore import tape
from adcore.annotations import Const, Duplicated
from adcore import ReverseWithPrimal, compile_gradient
from adcore.calling import fastcall
from adcore.calling.addresses import AddressTable
from adcore.errors import ActivityError, ADError
from adcore.tape.tracked import Tracked
from adcore.tree import is_node

from . import direct_ir, row_split
from .drivers import ZEROING, BuiltinDriver, PythonDriver, Zeroing, builtin_slots, njit_driver, refused
from .guard import GuardWriter, emit_tree
from .arguments import LEAVES, SHADOWED, Kind
from .lower import Lowering
from .operands import LINE_BYTES
from .reads import Reads
from .trace import Derived, ValueDependentError, tracing

_MAX_PER_FUNCTION = 8
VARYING = (Kind.INPUT, Kind.INDEX, Kind.INDEX_ND)   # new objects at each call, in general
_cache = {}
_cache_lock = threading.RLock()


def loss_part(out):
    """The differentiated part of a loss's output: itself, or the first element of a
    tuple or dict."""
    if isinstance(out, tuple) and out:
        return out[0]
    if isinstance(out, dict) and out:
        return next(iter(out.values()))
    return out


def _type_checked(value):
    """Whether ``emit_tree`` checks the exact type of ``value`` (then it cannot be a
    ``Const`` or ``Duplicated``)."""
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "fiu"
    return isinstance(value, (float, np.floating, tuple, list, dict)) or is_node(value)


def _tracked_leaves(tree):
    if type(tree) is Tracked:
        return [tree]
    if is_node(tree):
        kids = [getattr(tree, k) for k in type(tree).__tree_fields__]
    elif isinstance(tree, (tuple, list)):
        kids = list(tree)
    elif isinstance(tree, dict):
        kids = list(tree.values())
    else:
        return []
    return [t for k in kids for t in _tracked_leaves(k)]


def line_aligned_zeros(shape, dtype):
    """A zeroed C-contiguous array whose data starts on a cache line (for the workspace,
    whose buffers start on lines: ``lower.LINE_BYTES``)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.zeros(nbytes + LINE_BYTES, np.uint8)
    start = -raw.ctypes.data % LINE_BYTES
    return raw[start:start + nbytes].view(dtype).reshape(shape)


class Exclusive:
    """The lock of a compiled program's buffers; while it is held, ``busy[0]`` is 1, and
    the native repeat call (which never waits, see ``adcore.calling.fastcall``) refuses to run."""

    def __init__(self):
        self._lock, self.busy = threading.Lock(), np.zeros(1, np.int64)

    def __enter__(self):
        self._lock.acquire()
        self.busy[0] = 1

    def __exit__(self, *exc):
        self.busy[0] = 0
        self._lock.release()


class _DriverArgs:
    """Per driver argument, then per shadow: the guard's expression that gathers it, a
    sample of its value and whether the driver flattens it."""

    def __init__(self):
        self.gather, self.samples, self.flat = [], [], []
        self.shadows, self.dsamples, self.dflat = [], [], []

    def add(self, expr, sample, flat):
        self.gather.append(expr)
        self.samples.append(sample)
        self.flat.append(flat)

    def add_shadow(self, expr, sample, flat):
        self.shadows.append(expr)
        self.dsamples.append(sample)
        self.dflat.append(flat)


class Staged:
    """The compiled gradient of ``f`` for arguments like ``args`` (see the module doc)."""

    def __init__(self, f, args, float_inputs=True, split=True):
        self.lock = Exclusive()
        w = GuardWriter(len(args))
        t = tape.Tape()
        reads = Reads(w, t, float_inputs)
        walked, grads = [], []
        for j, a in enumerate(args):
            v, val, dv, dval = self._arg(w, j, a)
            found = []
            mirror = emit_tree(w, reads, v, val, dv, dval, lambda *leaf: found.append(leaf))
            grads.append(mirror if dv is not None else "None")
            walked.append((val, found))
        reads.value(f, "fn", "the loss")
        leaves, indices, states, exprs = {}, {}, {}, {}
        for gather, sample, tr in reads.inputs:
            name = f"X{len(exprs)}"
            leaves[tr.id] = (Kind.INPUT, name, tr.value)
            exprs[name] = (gather, None, sample, None, ())
        with reads.substituted():
            tracked = [tape.track(val, t) for val, _ in walked]
            for j, ((val, found), tr) in enumerate(zip(walked, tracked)):
                self._arg_leaves(j, found, tr, leaves, indices, states, exprs)
            with tracing():
                out = f(*tracked)
        self._check_output(out)
        loss = loss_part(out)
        if type(loss) is Tracked:
            if loss.size != 1:
                raise ADError(f"gradient needs a scalar loss, but f returned an array of shape "
                              f"{loss.shape}; reduce it (e.g. np.sum)")
            loss_id = loss.id
        else:
            if np.size(loss) != 1 or not isinstance(np.asarray(loss).item(), (int, float)):
                raise ADError(f"gradient needs a scalar float loss, but f returned {loss!r}")
            loss_id = None
        low = Lowering(t.records, leaves, indices, states,
                       {v.id for v in _tracked_leaves(out) + [loss] if type(v) is Tracked})
        self.source = low.source(loss_id, loss)
        self.out, self.views = out, low.views
        self.scalar = out.value.dtype.type if type(out) is Tracked and out.ndim == 0 else None
        self._compile(low, w, exprs, grads, [leaf[2] for _, found in walked for leaf in found
                                             if leaf[2] is not None])
        self._split_rows(f, args, [v for v, _ in walked], tracked, t.records, loss_id, states,
                         float_inputs, split)

    def _split_rows(self, f, args, values, tracked, records, loss_id, states, float_inputs, split):
        """What the program does with threads (``self.row_threads``, a
        ``row_split.RowThreads``): calls of a loss proved row-independent may split.  A
        part of a split batch (not ``split``) keeps its recording's ``row_signature``."""
        if not split:
            self.row_threads = row_split.RowThreads(serial="one part of a split batch")
            self.row_signature = row_split.signature_of(args, values, records, tracked, loss_id)
            return
        if self.scalar is None or states:
            self.row_threads = row_split.RowThreads(serial="a layer keeps state (BatchNorm, "
                                                    "Dropout)" if states else
                                                    "the loss returns more than a number")
            return

        def part(f, args):
            return type(self)(f, args, float_inputs, split=False)
        self.row_threads = row_split.RowThreads(self, part, args, values, records, tracked, loss_id)
        if self.row_threads.splits:
            self.call_gradient = self.row_threads.call_gradient(self.call_gradient)

    @staticmethod
    def _arg(w, j, a):
        var = f"a{j}"
        if isinstance(a, Duplicated):
            w.check(f"type({var}) is Duplicated")
            return w.let(f"{var}.val"), a.val, w.let(f"{var}.dval"), a.dval
        if isinstance(a, Const):
            w.check(f"type({var}) is Const")
            return w.let(f"{var}.val"), a.val, None, None
        if not _type_checked(a):    # else the guard checks its exact type
            w.check(f"not isinstance({var}, (Const, Duplicated))")
        return var, a, None, None

    def _arg_leaves(self, j, found, tr, leaves, indices, states, exprs):
        """Name the leaves and state arrays of argument ``j`` (``found`` by ``emit_tree``,
        tracked as ``tr``)."""
        floats = iter(_tracked_leaves(tr))
        for path, var, dvar, value, state in found:
            if state:
                name = f"S{len(exprs)}"
                states[id(value)] = name
                exprs[name] = (var, None, value, j, path)
                continue
            if isinstance(value, np.ndarray) and value.dtype.kind in "iu":
                name = f"I{len(exprs)}"
                indices[id(value)] = name
                exprs[name] = (f"_contiguous({var})", None, value, j, path)
                continue
            name = f"{'P' if dvar is not None else 'X'}{len(exprs)}"
            leaves[next(floats).id] = (Kind.PARAM if dvar is not None else Kind.INPUT, name,
                                       self._leaf_value(value, dvar, path, j))
            exprs[name] = (var if dvar is not None or not isinstance(value, np.ndarray)
                           else f"_contiguous({var})", dvar, value, j, path)

    @staticmethod
    def _leaf_value(value, dvar, path, j):
        if not isinstance(value, np.ndarray):
            return value
        if dvar is not None and not (value.flags.c_contiguous and value.flags.writeable):
            where = ".".join(map(str, path)) or "the array"
            raise ActivityError(f"argument {j}: {where} is not a writeable C-contiguous array; "
                                "Duplicated models need those (np.ascontiguousarray)")
        return value

    def _check_output(self, out):
        if isinstance(out, Derived):
            raise ValueDependentError("returns a value computed from traced arrays outside "
                                      "recorded operations")
        if isinstance(out, (tuple, list)):
            for v in out:
                self._check_output(v)
        elif isinstance(out, dict):
            for v in out.values():
                self._check_output(v)

    def _compile(self, low, w, exprs, grads, mirrored):
        """Compile the program and the calls; ``mirrored``: the guard's variables of the
        shadow arrays in the gradient mirror."""
        scope = dict(low.globals)
        exec(self.source, scope)
        anns, d = self._arguments(low, w, exprs)
        program = direct_ir.translated(self.source, scope, [numba.typeof(a.val) for a in anns]) \
            or numba.njit(cache=False, error_model="numpy")(scope["program"])
        self.grad = compile_gradient(ReverseWithPrimal, program, *anns)
        for k in self.grad.shadowed[len(d.shadows):]:   # Const arrays given scratch shadows
            d.dsamples.append(np.zeros_like(anns[k].val))
            d.shadows.append(w.const(d.dsamples[-1]))
            d.dflat.append(False)
        self.program = program        # the generated function (for inspection)
        self.positions = {a.name: k for k, a in enumerate(low.args)}
        self.flat, self.dflat = d.flat, d.dflat
        self.driver_shadow_samples = d.dsamples
        self.shadow_of = [k for k, a in enumerate(low.args) if a.kind in SHADOWED]
        kinds = [a.kind for a in low.args if a.kind in SHADOWED]
        self.zeroing = [ZEROING.get(kind, Zeroing.ALWAYS) for kind in kinds] + \
            [Zeroing.ALWAYS] * (len(d.dflat) - len(kinds))
        fast = self._drivers(low, anns, d)
        self.loops = {}     # the compiled train loops (layers.staging.loop)
        self.plans = {}     # what train ran, per optimiser state (layers.staging.loop._Plan)
        self.varying = self._varying()
        self._guards(w, d.gather + d.shadows, grads, mirrored, fast)

    def _arguments(self, low, w, exprs):
        """The annotated sample arguments of the program's gradient, and per driver
        argument (``self.slots``) and shadow what the guard gathers and how it is passed
        (a ``_DriverArgs``)."""
        anns, d = [], _DriverArgs()
        self.slots = []   # per driver argument: (Kind, argument index, path, sample value)
        for a in low.args:
            if a.kind in LEAVES:
                expr, dvar, sample, j, path = exprs[a.name if a.kind != Kind.INDEX_ND else a.payload]
                d.add(expr, sample, a.kind != Kind.INDEX_ND and (a.kind != Kind.INPUT or
                                                                 isinstance(a.payload, np.ndarray)))
                self.slots.append((a.kind, j, path, sample))
            if a.kind == Kind.PARAM:
                value = a.payload.reshape(-1)
                anns.append(Duplicated(value, np.zeros_like(value)))
                d.add_shadow(dvar, sample, True)
            elif a.kind == Kind.STATE:
                anns.append(Const(sample.reshape(-1).copy()))
            elif a.kind in (Kind.INPUT, Kind.INDEX, Kind.CONST):
                value = a.payload
                if isinstance(value, np.ndarray) and a.kind == Kind.INPUT:
                    value = np.ascontiguousarray(value).reshape(-1)
                if a.kind == Kind.INDEX:
                    value = np.ascontiguousarray(sample).reshape(-1)
                anns.append(Const(value))
                if a.kind == Kind.CONST:
                    d.add(w.const(value), value, False)
                    self.slots.append((a.kind, None, None, value))
            elif a.kind == Kind.INDEX_ND:
                anns.append(Const(np.ascontiguousarray(sample)))
            else:
                shape, dtype = a.payload
                buf, dbuf = line_aligned_zeros(shape, dtype), line_aligned_zeros(shape, dtype)
                anns.append(Duplicated(buf, dbuf))
                d.add(w.const(buf), buf, False)
                self.slots.append((a.kind, None, None, buf))
                d.add_shadow(w.const(dbuf), dbuf, False)
        return anns, d

    def _drivers(self, low, anns, d):
        """Choose how the gradient is called (``drivers``): its builtin (returned), else a
        Python driver over its ctypes entry, else the njit driver through an address
        table.  The stub's arrays that stay the same objects from call to call (all but
        the inputs) reach the njit driver as addresses: ``fixed``, ``{driver position:
        sample of the stub's}``."""
        fixed = {k: anns[k].val for k, a in enumerate(low.args) if a.kind not in VARYING}
        fixed.update((len(d.flat) + q, anns[k].val) for q, k in enumerate(self.grad.shadowed))
        slots = builtin_slots(low.args, d.samples, d.dsamples, d.flat, d.dflat, self.zeroing)

        def builtin(busy):
            return fastcall.numba_caller(self.grad.symbol, *self.grad.stub_spec[:2], slots,
                                         zero=True, busy=busy)
        fast = builtin(self.lock.busy)
        if fast is not None:
            self.driver = PythonDriver(self.grad, d.flat, d.dflat, self.zeroing, fixed, promote=False)
            self.call = BuiltinDriver(fast, lambda: builtin(None), self.driver)
        elif self.grad.from_disk:
            self.driver = self.call = PythonDriver(self.grad, d.flat, d.dflat, self.zeroing, fixed)
        else:
            self.driver = njit_driver(self.grad.native, d.flat, d.dflat, self.zeroing, fixed)
            self.call = AddressTable(self.driver, sorted(fixed), len(d.flat) + len(d.dflat), refused)
        return fast

    def _guards(self, w, gathered, grads, mirrored, fast):
        """``gather`` and the repeat gradient call ``call_gradient`` (the guard that also
        runs the driver, returning ``(loss, grads)``)."""
        items, mirror = ", ".join(gathered), f"({''.join(g + ', ' for g in grads)})"
        self.gather = w.compile(f"({items},), {mirror}")
        self.guard_source = w.source(f"({items},), {mirror}")
        if fast is None:
            self.call_gradient = w.compile(f"CALL(zero, {items}), {mirror}", ("zero",),
                                           self.lock, CALL=self.call.call)
            return
        # The builtin checks the arrays it is passed (so the guard does not; an input that
        # is not C-contiguous is refused, and copied on the slow path) and returns the loss
        # as a float, else a status: a refusal (also while another thread holds the lock)
        # is a miss (``None``).  It runs no Python and holds the GIL, so it needs no lock
        # of its own.
        passed = [_CONTIGUOUS.sub(r"\1", x) for x in gathered]
        self.call_gradient = w.compile(
            None, ("zero",), None, _passed_arrays(passed),
            _fast_tail(f"FAST(True if zero else False, {', '.join(passed)})", mirror, mirrored),
            FAST=fast.call, MISS=self.call.miss, LAST=(None,) * (1 + len(mirrored)))

    def _varying(self):
        """``{driver position: argument index - 1}`` of the inputs that are whole arguments
        after the first (what ``train`` takes from each data item), or ``None`` when one
        is nested inside an argument."""
        varying = {}
        for k, (kind, j, path, _) in enumerate(self.slots):
            if j is not None and j > 0 and kind in (Kind.INPUT, Kind.INDEX, Kind.INDEX_ND):
                if path != ():
                    return None
                varying[k] = j - 1
        return varying

    def run(self, dargs, grads, zero):
        """``(val, grads)`` for the driver arguments ``dargs`` gathered from a call."""
        with self.lock:
            r = self.call.run(zero, dargs)
            val = self.scalar(r) if self.scalar is not None else self._value(self.out, dargs)
        return val, grads

    def _value(self, out, dargs):
        """The loss's output with traced arrays replaced by their values after the run."""
        if type(out) is Tracked:
            return self.read(self.views[out.id], dargs)
        if isinstance(out, (tuple, list)):
            items = [self._value(v, dargs) for v in out]
            return type(out)(*items) if hasattr(out, "_fields") else type(out)(items)
        if isinstance(out, dict):
            return type(out)((k, self._value(v, dargs)) for k, v in out.items())
        return out

    def read(self, view, dargs):
        """A copy of ``view``'s current value."""
        if view.base is None:
            k = self.positions.get(view.expr)
            return view.dtype.type(dargs[k] if k is not None else float(view.expr))
        base = np.asarray(dargs[self.positions[view.base]]).reshape(-1)
        item = base.itemsize
        v = np.lib.stride_tricks.as_strided(base[view.off:], view.shape,
                                            [s * item for s in view.strides]).copy()
        return v if view.shape else v[()]


def _fast_tail(call, mirror, names):
    """The repeat call's last statements: ``call`` the builtin, then return the loss and
    the gradient ``mirror``, whose arrays are the variables ``names``.  The mirror of the
    last call, kept in ``LAST`` with those arrays, is returned again when they are the
    same objects (its dicts are ``FrozenDict``s: nobody changed it), so a repeat call
    builds no containers."""
    if not names:
        return [f"r = {call}", "return MISS() if r is None else (r, " + mirror + ")"]
    same = " and ".join(f"{v} is {v}_" for v in names)
    return ["global LAST",
            f"r = {call}",
            "if r is None:",
            "    return MISS()",
            f"m, {', '.join(v + '_' for v in names)}, = LAST",
            f"if {same}:",
            "    return r, m",
            f"m = {mirror}",
            f"LAST = (m, {', '.join(names)},)",
            "return r, m"]


def _passed_arrays(items):
    """The guard's variables that are driver arguments themselves among ``items``
    (expressions: an input made contiguous, ``_contiguous(v)``, keeps its check)."""
    return {x for x in items if _VARIABLE.fullmatch(x)}


_VARIABLE = re.compile(r"[va]\d+")
_CONTIGUOUS = re.compile(r"_contiguous\(([va]\d+)\)")


def cache_key(f):
    """Programs are kept per code object (a bound method or callable object: per object)."""
    return getattr(f, "__code__", f)


def lookup(f, args):
    """``(staged, (dargs, grads))``: the compiled program matching ``args`` (compiling
    one when none does) and what its guard gathered from them."""
    for e in _cache.get(cache_key(f), ()):   # without the lock: the lists only change under
        got = e.gather(f, *args)             # it, and a miss is looked up again there
        if got is not None:
            return e, got
    with _cache_lock:
        entries = _cache.setdefault(cache_key(f), [])
        for e in entries:
            got = e.gather(f, *args)
            if got is not None:
                return e, got
        e = _new(f, args)
        entries.insert(0, e)
        del entries[_MAX_PER_FUNCTION:]
    got = e.gather(f, *args)
    if got is None:
        raise ADError("a freshly compiled program does not accept the arguments it was "
                      "compiled for: the loss changed something it reads (a global, a "
                      "captured variable, an attribute) while it ran, which the compiled "
                      "path cannot replay; if it does not, please report this")
    return e, got


def _new(f, args):
    """Stage ``f`` with float scalars it reads as inputs; when that fails (the loss uses
    one in Python code, e.g. ``range(int(n))``), with them compared by value instead."""
    try:
        return Staged(f, args)
    except ADError:
        return Staged(f, args, float_inputs=False)


def stage(f, args, zero):
    """``(val, grads)`` of ``f(*args)`` by the compiled program matching ``args`` (a
    repeat call of a scalar loss runs one generated function, as ``gradients`` does)."""
    for e in _cache.get(getattr(f, "__code__", f), ()):   # the repeat call: lookup's first loop
        if e.scalar is not None:
            got = e.call_gradient(zero, f, *args)
            if got is not None:
                return e.scalar(got[0]), got[1]
            continue
        got = e.gather(f, *args)
        if got is not None:
            return e.run(got[0], got[1], zero)
    e, (dargs, grads) = lookup(f, args)
    if e.row_threads.splits:
        got = e.call_gradient(zero, f, *args)
        if got is not None:
            return e.scalar(got[0]), got[1]
    return e.run(dargs, grads, zero)


def gradients(f, args, zero):
    """The gradients of ``f(*args)`` by the compiled program matching ``args`` (a repeat
    call runs one generated function: the guard that calls the driver)."""
    for e in _cache.get(getattr(f, "__code__", f), ()):
        got = e.call_gradient(zero, f, *args)
        if got is not None:
            return got[1]
    return stage(f, args, zero)[1]
