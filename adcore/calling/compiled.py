"""A compiled gradient, and calling it on annotated arguments."""
import ctypes
import itertools

import numpy as np

from ..annotations import Active, Duplicated
from .arguments import mirrored, share_memory
from .ctypes_entry import EntryCall
from .njit_stub import make_stub, stub_call
from ..errors import ActivityError, UnsupportedError
from ..timings import compiling, stage

# the bytes cached by the most recent gradient call: a cell native repeat calls store into too
last_cached_cell = ctypes.c_int64(0)

# Calls of a gradient made through its ctypes entry before its njit stub is built: by then
# the slower calls have cost about what the stub's Numba compile costs (ski rental: never
# more than twice the better choice in hindsight).
PROMOTE_AFTER = 5000


def last_cached_bytes():
    """Bytes the reverse pass kept on its value stack in the most recent gradient call."""
    return last_cached_cell.value


class CompiledGradient:
    """One native gradient of a kernel for fixed argument types and activities.

    ``native`` is an njit function that other Numba code may call (made on first use:
    until then Python calls go through the ctypes entry compiled with the gradient,
    :mod:`adcore.calling.ctypes_entry`):
    ``native(*arguments, *shadows[, dret])`` with the primal arguments in order, then the
    shadow array of each position in ``shadowed`` (Duplicated arguments, then Const arrays
    that need an internal zeroed shadow), then the seed of a returned array; it returns a
    tuple ``(primal return if any, adjoint of each Active argument..., bytes cached)``.
    ``written`` are the array arguments the kernel may write; ``distinct`` tells whether
    it was compiled for arrays that share no memory; ``symbol`` names its native code.  ``primal_ir``, ``adjoint_ir`` and
    ``optimised_ir`` are the IR of the pipeline's stages (``irs()`` returns the three).
    ``call`` runs the gradient on the arguments as ``native`` does (``native`` itself, or
    the ctypes entry, replaced by ``native`` after ``PROMOTE_AFTER`` calls); ``stub_spec``
    is ``(argument types, result type, same_layout)`` of :func:`adcore.calling.njit_stub.make_stub`,
    which builds ``native`` (its time is a compile report of its own,
    ``adcore.timings.compile_reports()``); ``njit_call`` is the intrinsic that njit code
    generated to call the gradient may call instead, with no compile of its own."""

    native_parts = None      # what the disk cache stores (pipeline.NativeParts), when fresh

    def __init__(self, pyname, symbol, has_primal, shadowed, written, distinct, irs, call,
                 stub_spec, native=None):
        self.pyname, self.symbol, self.has_primal = pyname, symbol, has_primal
        self.shadowed, self.written, self.distinct = shadowed, written, distinct
        self.irs, self.call = irs, call
        self.entry = call if isinstance(call, EntryCall) else None    # kept when the stub replaces it
        self.stub_spec = stub_spec
        self._native = native
        self._njit_call = None
        self._ctypes_calls = 0

    @property
    def native(self):
        if self._native is None:
            with compiling(f"the njit stub of {self.pyname}"), stage("stub"):
                self._native = make_stub(self.symbol, *self.stub_spec)
        return self._native

    @property
    def njit_call(self):
        if self._njit_call is None:
            self._njit_call = stub_call(self.symbol, *self.stub_spec)
        return self._njit_call

    @property
    def from_disk(self):
        """Whether this gradient has no njit stub yet: Python calls it through its ctypes
        entry (fresh from the pipeline or loaded from the disk cache), and njit code
        that calls it (``native``) compiles the stub first."""
        return self._native is None

    primal_ir = property(lambda self: self.irs()[0])
    adjoint_ir = property(lambda self: self.irs()[1])
    optimised_ir = property(lambda self: self.irs()[2])

    def check_aliasing(self, anns):
        """Arrays that share memory the kernel writes must alias in their shadows too: a
        Duplicated array may not share such memory with a Const one, and two Duplicated
        arrays that do need shadows that alias the same way (else ActivityError)."""
        arrays = [k for k, a in enumerate(anns) if isinstance(a.val, np.ndarray)]
        for i, j in itertools.combinations(arrays, 2):
            a, b = anns[i], anns[j]
            if not (isinstance(a, Duplicated) or isinstance(b, Duplicated)) or \
                    (i not in self.written and j not in self.written) or not share_memory(a.val, b.val):
                continue
            if not (isinstance(a, Duplicated) and isinstance(b, Duplicated)):
                const, dup = (j, i) if isinstance(a, Duplicated) else (i, j)
                raise ActivityError(f"argument {const} shares memory with Duplicated argument {dup} "
                                    f"and {self.pyname} writes it: pass both as Duplicated with views "
                                    f"of one shadow, or pass a copy")
            if not (share_memory(a.dval, b.dval) and mirrored(a, b)):
                raise ActivityError(f"arguments {i} and {j} share memory that {self.pyname} writes: "
                                    f"their shadows must be views of one shadow laid out as the arrays are")

    def __call__(self, anns, dret=None):
        if not self.distinct:
            self.check_aliasing(anns)
        primals = [a.val for a in anns]
        shadows, copies = [], []
        for k in self.shadowed:
            a = anns[k]
            if not isinstance(a, Duplicated):
                shadows.append(_like_strides(a.val, None))
                continue
            d = a.dval
            if d.strides != a.val.strides:
                d = _like_strides(a.val, d)
                copies.append((a.dval, d))
            shadows.append(d)
        seed, before = [], []
        if dret is not None:     # a wrong seed is found after the forward pass: keep what it writes
            seed = [np.ascontiguousarray(dret)]
            before = [(primals[k], primals[k].copy()) for k in self.written]
        if self._native is None:
            self._ctypes_calls += 1
            if self._ctypes_calls >= PROMOTE_AFTER:
                self.call = self.native
        out = self.call(*primals, *shadows, *seed)
        if out[-1] < 0:
            for array, old in before:
                array[...] = old
            if dret.shape != out[0].shape:
                raise ActivityError(f"dret has shape {dret.shape} but {self.pyname} returned an "
                                    f"array of shape {out[0].shape}")
            raise UnsupportedError("the returned array", self.pyname,
                                   "it is not C-contiguous (return np.ascontiguousarray of it)")
        for user, tmp in copies:
            user[...] = tmp
        last_cached_cell.value = int(out[-1])
        offset = 1 if self.has_primal else 0
        derivs, j = [], offset
        for a in anns:
            if isinstance(a, Active):
                derivs.append(out[j])
                j += 1
            else:
                derivs.append(None)
        return tuple(derivs), (out[0] if self.has_primal else None)


def _like_strides(x, d):
    """A copy of ``d`` (zeros if None) laid out with exactly the strides of ``x``."""
    reach = [s * (n - 1) for s, n in zip(x.strides, x.shape)] if x.size else []
    lo, hi = sum(r for r in reach if r < 0), sum(r for r in reach if r > 0)
    buf = np.zeros(hi - lo + x.itemsize, np.uint8)
    tmp = np.ndarray(x.shape, x.dtype, buffer=buf, offset=-lo, strides=x.strides)
    if d is not None:
        tmp[...] = d
    return tmp
