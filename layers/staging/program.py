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
import enum
import re
import threading

import numba
import numpy as np

from adcore import tape
from adcore.annotations import Const, Duplicated
from adcore import ReverseWithPrimal, compile_gradient
from adcore.calling import fastcall
from adcore.errors import ActivityError, ADError
from adcore.tape.tracked import Tracked
from adcore.tree import is_node

from optim.addresses import address, view

from . import direct_ir
from .guard import GuardWriter, emit_tree
from .lower import LEAVES, LINE_BYTES, SHADOWED, Kind, Lowering
from .reads import Reads
from .trace import Derived, ValueDependentError, tracing

_MAX_PER_FUNCTION = 8
VARYING = (Kind.INPUT, Kind.INDEX, Kind.INDEX_ND)   # new objects at each call, in general
WRITTEN = (Kind.STATE, Kind.WORK, Kind.KBUF)          # arrays the program writes
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


@numba.njit(cache=False)
def _zero(a):
    for i in range(a.size):
        a[i] = 0


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


class Staged:
    """The compiled gradient of ``f`` for arguments like ``args`` (see the module doc)."""

    def __init__(self, f, args, float_inputs=True):
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
        anns, gather, flat, shadows, dflat = [], [], [], [], []
        self.slots = []   # per driver argument: (Kind, argument index, path, sample value)
        samples, dsamples = [], []   # per driver argument and shadow: a sample of its value
        for a in low.args:
            if a.kind in LEAVES:
                expr, dvar, sample, j, path = exprs[a.name if a.kind != Kind.INDEX_ND else a.payload]
                self.slots.append((a.kind, j, path, sample))
                gather.append(expr)
                samples.append(sample)
                flat.append(a.kind != Kind.INDEX_ND and (a.kind != Kind.INPUT or
                                                        isinstance(a.payload, np.ndarray)))
            if a.kind == Kind.PARAM:
                value = a.payload.reshape(-1)
                anns.append(Duplicated(value, np.zeros_like(value)))
                shadows.append(dvar)
                dsamples.append(sample)
                dflat.append(True)
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
                    gather.append(w.const(value))
                    samples.append(value)
                    flat.append(False)
                    self.slots.append((a.kind, None, None, value))
            elif a.kind == Kind.INDEX_ND:
                anns.append(Const(np.ascontiguousarray(sample)))
            else:
                shape, dtype = a.payload
                buf, dbuf = line_aligned_zeros(shape, dtype), line_aligned_zeros(shape, dtype)
                anns.append(Duplicated(buf, dbuf))
                gather.append(w.const(buf))
                samples.append(buf)
                flat.append(False)
                self.slots.append((a.kind, None, None, buf))
                shadows.append(w.const(dbuf))
                dsamples.append(dbuf)
                dflat.append(False)
        program = direct_ir.translated(self.source, scope, [numba.typeof(a.val) for a in anns]) \
            or numba.njit(cache=False, error_model="numpy")(scope["program"])
        self.grad = compile_gradient(ReverseWithPrimal, program, *anns)
        for k in self.grad.shadowed[len(shadows):]:   # Const arrays given scratch shadows
            dsamples.append(np.zeros_like(anns[k].val))
            shadows.append(w.const(dsamples[-1]))
            dflat.append(False)
        self.program = program        # the generated function (for inspection)
        self.positions = {a.name: k for k, a in enumerate(low.args)}
        self.flat, self.dflat = flat, dflat
        self.shadow_of = [k for k, a in enumerate(low.args) if a.kind in SHADOWED]
        kinds = [a.kind for a in low.args if a.kind in SHADOWED]
        self.zeroing = [ZEROING.get(kind, Zeroing.ALWAYS) for kind in kinds] + \
            [Zeroing.ALWAYS] * (len(dflat) - len(kinds))
        # The stub's arrays that stay the same objects from call to call (all but the
        # inputs) reach the njit driver as addresses: {driver position: sample of the stub's}.
        # A gradient from the disk cache runs a Python driver over its ctypes call first.
        fixed = {k: anns[k].val for k, a in enumerate(low.args) if a.kind not in VARYING}
        fixed.update((len(flat) + q, anns[k].val) for q, k in enumerate(self.grad.shadowed))
        slots = _fast_slots(low.args, samples, dsamples, flat, dflat, self.zeroing)

        def builtin(busy):
            return fastcall.numba_caller(self.grad.symbol, *self.grad.stub_spec[:2], slots,
                                         zero=True, busy=busy)
        fast = builtin(self.lock.busy)
        if fast is not None:
            self.driver = _python_driver(self.grad, flat, dflat, self.zeroing, fixed, promote=False)
            self.call = _FastCaller(fast, lambda: builtin(None), self.driver)
        elif self.grad.from_disk:
            self.driver = _python_driver(self.grad, flat, dflat, self.zeroing, fixed)
            self.call = _DirectCaller(self.driver)
        else:
            self.driver = _driver(self.grad.native, flat, dflat, self.zeroing, fixed)
            self.call = _Caller(self.driver, sorted(fixed), len(flat) + len(dflat))
        self.loops = {}     # the compiled train loops (layers.staging.loop)
        self.plans = {}     # what train ran, per optimiser state (layers.staging.loop._Plan)
        self.varying = self._varying()
        items, mirror = ", ".join(gather + shadows), f"({''.join(g + ', ' for g in grads)})"
        self.gather = w.compile(f"({items},), {mirror}")
        self.guard_source = w.source(f"({items},), {mirror}")
        # The repeat gradient call: the guard that also runs the driver, returning
        # ``(loss, grads)``.
        if fast is not None:
            # The builtin checks the arrays it is passed (so the guard does not; an input
            # that is not C-contiguous is refused, and copied on the slow path) and returns
            # the loss as a float, else a status: a refusal (also while another thread holds
            # the lock) is a miss (``None``).  It runs no Python and holds the GIL, so it
            # needs no lock of its own.
            passed = [_CONTIGUOUS.sub(r"\1", x) for x in gather + shadows]
            self.call_gradient = w.compile(
                None, ("zero",), None, _passed_arrays(passed),
                _fast_tail(f"FAST(True if zero else False, {', '.join(passed)})", mirror,
                           mirrored),
                FAST=fast.call, MISS=self.call.miss, LAST=(None,) * (1 + len(mirrored)))
        else:
            self.call_gradient = w.compile(f"CALL(zero, {items}), {mirror}", ("zero",),
                                           self.lock, CALL=self.call.call)

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


class Zeroing(enum.Enum):
    """When the driver zeroes a shadow before a call."""
    ON_REQUEST = "when the call asks (``zero``)"
    NEVER = "never"
    ALWAYS = "before every call"


# A parameter's shadow is zeroed when the call asks; the workspace's never, because every
# workspace slot is written before it is read, so the reverse pass leaves its shadow zero
# (the adjoint of a value that was overwritten), and it starts zero; kernel buffers and
# the scratch shadows of Const arrays always.
ZEROING = {Kind.PARAM: Zeroing.ON_REQUEST, Kind.WORK: Zeroing.NEVER}


def _driver(stub, flat, dflat, zeroing, fixed):
    """An njit ``driver(zero, table, *others)``: zero the shadows as ``zeroing`` says
    (see ``ZEROING``), call the gradient, return the loss.  Its arguments are the stub's
    (``*args, *shadows``, the shadows in the order of the gradient's ``shadowed``: the
    parameters' and buffers', then those adcore gave Const arrays); those at the positions
    of ``fixed`` (``{position: the stub's sample array}``) come as the address ``table`` of
    an int64 array of their addresses (``_Caller``), the others in order as ``others``."""
    n, m = len(flat), len(dflat)
    names = [f"a{k}" for k in range(n)] + [f"d{k}" for k in range(m)]
    flags = list(flat) + list(dflat)
    others = "".join(", " + x for k, x in enumerate(names) if k not in fixed)
    lines = [f"def driver(zero, table{others}):",
             f"    addresses = view(table, ({len(fixed)},), np.int64)"]
    scope = {"stub": stub, "_zero": _zero, "view": view, "np": np}
    call = []
    for k, x in enumerate(names):
        if k in fixed:
            scope[f"T{k}"] = fixed[k].dtype.type
            lines.append(f"    {x} = view(addresses[{sorted(fixed).index(k)}], "
                         f"{fixed[k].shape!r}, T{k})")
            call.append(x)
        else:
            call.append(f"{x}.reshape(-1)" if flags[k] else x)
    for q in range(m):
        if zeroing[q] == Zeroing.ON_REQUEST:
            lines.append(f"    if zero:\n        _zero({call[n + q]}.reshape(-1))")
        elif zeroing[q] == Zeroing.ALWAYS:
            lines.append(f"    _zero({call[n + q]}.reshape(-1))")
    lines.append(f"    return stub({', '.join(call)})[0]")
    exec("\n".join(lines) + "\n", scope)
    return numba.njit(cache=False)(scope["driver"])


# Calls of a program through the Python driver before its njit driver is compiled (about
# 1.3 s of Numba): a first gradient (a test, an edit-run loop) skips that compile, and a
# training loop has paid for it, at full speed, by its 20th step.
DRIVER_AFTER = 20


def _python_driver(grad, flat, dflat, zeroing, fixed, promote=True):
    """``_driver`` in Python over the ctypes call of a fresh gradient or one loaded from
    adcore's disk cache: no Numba compile before the first call; after ``DRIVER_AFTER`` calls
    (when ``promote``), the njit driver through a ``_Caller``.  The arrays at the positions
    of ``fixed`` (``{position: sample}``) must be C-contiguous, as ``_Caller`` requires."""
    n = len(flat)
    zeroed = [k for k in range(len(dflat)) if zeroing[k] == Zeroing.ALWAYS]
    on_request = [k for k in range(len(dflat)) if zeroing[k] == Zeroing.ON_REQUEST]
    reshaped = list(flat) + list(dflat)
    calls, njit = [0], []

    def driver(zero, *args):
        if njit:
            return njit[0](zero, *args)
        calls[0] += 1
        if promote and calls[0] >= DRIVER_AFTER:
            njit.append(_Caller(_driver(grad.native, flat, dflat, zeroing, fixed),
                                sorted(fixed), len(reshaped)).call)
        if not all(args[k].flags.c_contiguous and args[k].flags.writeable for k in fixed):
            raise ActivityError(_NOT_CONTIGUOUS)
        for k in zeroed + (on_request if zero else []):
            args[n + k].fill(0)
        return grad.call(*[x.reshape(-1) if fl else x for x, fl in zip(args, reshaped)])[0]
    return driver


_NOT_CONTIGUOUS = ("a Duplicated model's arrays must be writeable C-contiguous arrays "
                   "(np.ascontiguousarray); one was replaced by another")


def _fast_slots(args, samples, dsamples, flat, dflat, zeroing):
    """How each driver argument reaches the gradient through its builtin caller
    (:func:`adcore.calling.fastcall.numba_caller`): the program's arguments, then the shadows
    (zeroed as ``zeroing`` says)."""
    zero = {Zeroing.ON_REQUEST: "on_request", Zeroing.ALWAYS: "always", Zeroing.NEVER: None}
    slots = []
    for a, sample, fl in zip(args, samples, flat):     # one sample per argument
        if isinstance(sample, np.ndarray):
            slots.append(fastcall.ArrayArg(sample, fl, written=a.kind in WRITTEN))
        elif a.kind == Kind.CONST:
            slots.append(fastcall.ConstArg(sample))
        else:
            slots.append(fastcall.ScalarArg(sample))
    slots += [fastcall.ArrayArg(d, fl, zero[z], written=True)
              for d, fl, z in zip(dsamples, dflat, zeroing)]
    return slots


class _FastCaller:
    """The gradient's builtins (:mod:`adcore.calling.fastcall`): ``fast``, which the repeat call
    calls without the program's lock and which refuses while the lock is held, and, for
    ``run`` under the lock, one that does not look at the lock's flag (``make_held()``,
    compiled at the first such call).  When a builtin refuses the arguments (one not
    C-contiguous, say), the Python ``driver`` runs, which copes or raises the error."""

    def __init__(self, fast, make_held, driver):
        self.fast, self.driver = fast, driver
        self.make_held, self.held = make_held, None

    def run(self, zero, dargs):
        """The gradient of ``dargs``; the caller holds the program's lock."""
        if self.held is None:
            self.held = self.make_held()
        r = self.held.call(True if zero else False, *dargs)
        if r is None:
            error = self.held.error()
            if error is not None:
                raise error
            return self.driver(zero, *dargs)
        return r

    def miss(self):
        """None when the builtin refused the arguments; else raises the gradient's
        exception."""
        error = self.fast.error()
        if error is not None:
            raise error


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


class _DirectCaller:
    """Calls a driver that takes every array itself (the Python driver)."""

    def __init__(self, driver):
        self.call = driver
        self.run = lambda zero, dargs: driver(zero, *dargs)


class _Caller:
    """Calls ``fn(*lead, table, *others)`` with gathered arguments: the arrays at ``fixed``
    positions as one int, the address of an int64 array of their addresses (see
    ``optim.addresses``; the njit side reads it with ``view(table, (len(fixed),),
    np.int64)``), computed again only when one of them is another object than at the last
    call (an array keeps its data while referenced), the others in order.  Numba's
    dispatcher and a ctypes call cost per array argument, little per int.
    ``call(*lead, *dargs)`` or ``run(*lead, dargs)``; ``lead`` names the leading arguments
    passed through (the driver's ``zero``).  ``run`` given the very tuple of its last call
    checks nothing again (a tuple holds the same objects)."""

    def __init__(self, fn, fixed, n, lead=("zero",)):
        self.objects, self.addresses = [None] * len(fixed), np.zeros(len(fixed), np.int64)
        names = "".join(f"a{k}, " for k in range(n))
        same = " and ".join(f"a{k} is F[{q}]" for q, k in enumerate(fixed)) or "True"
        others = "".join(f", a{k}" for k in range(n) if k not in fixed)
        head = "".join(x + ", " for x in lead)
        last = [None]
        scope = {"fn": fn, "F": self.objects, "TABLE": address(self.addresses), "LAST": last}
        again = "".join(f", dargs[{k}]" for k in range(n) if k not in fixed)
        exec(f"def call({head}{names}):\n"
             f"    if not ({same}):\n"
             f"        refresh(({names}))\n"
             f"    return fn({head}TABLE{others})\n"
             f"def run({head}dargs):\n"
             f"    if dargs is LAST[0]:\n"
             f"        return fn({head}TABLE{again})\n"
             f"    LAST[0] = None\n"
             f"    got = call({head}*dargs)\n"
             f"    if type(dargs) is tuple:\n"
             f"        LAST[0] = dargs\n"
             f"    return got\n", scope)
        scope["refresh"] = self._refresh
        self.fixed, self.call, self.run = fixed, scope["call"], scope["run"]

    def _refresh(self, dargs):
        for q, k in enumerate(self.fixed):
            a = dargs[k]
            if not (a.flags.c_contiguous and a.flags.writeable):
                raise ActivityError(_NOT_CONTIGUOUS)
            self.objects[q], self.addresses[q] = a, address(a)


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
    return e.run(dargs, grads, zero)


def gradients(f, args, zero):
    """The gradients of ``f(*args)`` by the compiled program matching ``args`` (a repeat
    call runs one generated function: the guard that calls the driver)."""
    for e in _cache.get(getattr(f, "__code__", f), ()):
        got = e.call_gradient(zero, f, *args)
        if got is not None:
            return got[1]
    return stage(f, args, zero)[1]
