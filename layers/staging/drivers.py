"""The drivers of a staged program: what calls its gradient with the program's arrays,
zeroing the shadows first (see ``Zeroing``).

Three, by what the gradient offers: its builtin caller (``BuiltinDriver`` over
:func:`adcore.calling.fastcall.numba_caller`, which checks the arrays natively), else a
Python driver over its ctypes entry (``PythonDriver``), which after ``DRIVER_AFTER``
calls becomes the njit driver (``njit_driver``), called through the call layer's address
table (:class:`adcore.calling.addresses.AddressTable`).
"""
import enum

import numba
import numpy as np

from adcore.calling import fastcall
from adcore.calling.addresses import AddressTable, view
from adcore.errors import ActivityError

from .arguments import Kind

WRITTEN = (Kind.STATE, Kind.WORK, Kind.KBUF)          # arrays the program writes


@numba.njit(cache=False)
def _zero(a):
    for i in range(a.size):
        a[i] = 0


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


def njit_driver(stub, flat, dflat, zeroing, fixed):
    """An njit ``driver(zero, table, *others)``: zero the shadows as ``zeroing`` says
    (see ``ZEROING``), call the gradient, return the loss.  Its arguments are the stub's
    (``*args, *shadows``, the shadows in the order of the gradient's ``shadowed``: the
    parameters' and buffers', then those adcore gave Const arrays); those at the positions
    of ``fixed`` (``{position: the stub's sample array}``) come as the address ``table`` of
    an int64 array of their addresses (``AddressTable``), the others in order as ``others``."""
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


class PythonDriver:
    """``njit_driver`` in Python over the ctypes call of a fresh gradient or one loaded
    from adcore's disk cache: no Numba compile before the first call; after
    ``DRIVER_AFTER`` calls (when ``promote``), the njit driver through an
    ``AddressTable``.  The arrays at the positions of ``fixed`` (``{position: sample}``)
    must be C-contiguous, as the table requires.  ``driver(zero, *dargs)`` or
    ``run(zero, dargs)``."""

    def __init__(self, grad, flat, dflat, zeroing, fixed, promote=True):
        self.grad, self.flat, self.dflat, self.zeroing, self.fixed = grad, flat, dflat, zeroing, fixed
        self.zeroed = [k for k in range(len(dflat)) if zeroing[k] == Zeroing.ALWAYS]
        self.on_request = [k for k in range(len(dflat)) if zeroing[k] == Zeroing.ON_REQUEST]
        self.reshaped = list(flat) + list(dflat)
        self.calls, self.promote, self.njit = 0, promote, None

    def __call__(self, zero, *args):
        if self.njit is not None:
            return self.njit(zero, *args)
        self.calls += 1
        if self.promote and self.calls >= DRIVER_AFTER:
            driver = njit_driver(self.grad.native, self.flat, self.dflat, self.zeroing, self.fixed)
            self.njit = AddressTable(driver, sorted(self.fixed), len(self.reshaped), refused).call
        if not all(args[k].flags.c_contiguous and args[k].flags.writeable for k in self.fixed):
            raise refused(None)
        n = len(self.flat)
        for k in self.zeroed + (self.on_request if zero else []):
            args[n + k].fill(0)
        return self.grad.call(*[x.reshape(-1) if fl else x for x, fl in zip(args, self.reshaped)])[0]

    call = __call__

    def run(self, zero, dargs):
        return self(zero, *dargs)


def refused(_array):
    """The error of an array the drivers cannot take by address."""
    return ActivityError("a Duplicated model's arrays must be writeable C-contiguous arrays "
                         "(np.ascontiguousarray); one was replaced by another")


def builtin_slots(args, samples, dsamples, flat, dflat, zeroing):
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


class BuiltinDriver:
    """The gradient's builtins (:mod:`adcore.calling.fastcall`): ``fast``, which the repeat call
    calls without the program's lock and which refuses while the lock is held, and, for
    ``run`` under the lock, one that does not look at the lock's flag (``make_held()``,
    compiled at the first such call).  When a builtin refuses the arguments (one not
    C-contiguous, say), the Python ``driver`` runs, which copes or raises the error."""

    def __init__(self, fast, make_held, driver):
        self.fast, self.driver, self.miss = fast, driver, fast.miss
        self.make_held, self.held = make_held, None

    def run(self, zero, dargs):
        """The gradient of ``dargs``; the caller holds the program's lock."""
        if self.held is None:
            self.held = self.make_held()
        r = self.held.call(True if zero else False, *dargs)
        if r is None:
            self.held.miss()
            return self.driver(zero, *dargs)
        return r
