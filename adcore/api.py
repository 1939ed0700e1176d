"""The user-facing entry points: ``autodiff``, ``gradient``, ``primal_ir``, ``adjoint_ir``."""
import itertools
import threading
import time
import warnings

import numba
import numpy as np
from numba.core import types as nbtypes

from . import custom_rules, native, numba_abi
from .activity import UNKNOWN
from .adjoint import AdjointGenerator, Spec, gradient_module
from .annotations import Active, Annotation, Const, Duplicated, Mode
from .capture import as_dispatcher, capture
from .cleanup import clean
from .errors import ActivityError, UnsupportedError
from .ir import read_function, source_locations

_cache = {}
_fast = {}
_dispatchers = {}
_counter = itertools.count()
_lock = threading.RLock()
_last = {"cached_bytes": 0}


def last_cached_bytes():
    """Bytes the reverse pass kept on its value stack in the most recent gradient call."""
    return _last["cached_bytes"]


# -- argument checking -----------------------------------------------------------------
def _is_float_scalar(v):
    return isinstance(v, (float, np.floating)) and not isinstance(v, bool)


def _annotate(args):
    out = []
    for k, a in enumerate(args):
        ann = a if isinstance(a, Annotation) else Const(a)
        v = ann.val
        if isinstance(ann, Active):
            if isinstance(v, np.ndarray):
                raise ActivityError(f"argument {k}: Active on an array ({v.dtype}{list(v.shape)}); "
                                    f"use Duplicated(x, dx) for arrays")
            if not _is_float_scalar(v):
                raise ActivityError(f"argument {k}: Active needs a float scalar, got {type(v).__name__}")
        elif isinstance(ann, Duplicated):
            if _is_float_scalar(v):
                raise ActivityError(f"argument {k}: Duplicated on a float scalar; use Active(x)")
            if not isinstance(v, np.ndarray):
                raise ActivityError(f"argument {k}: Duplicated needs a numpy array, got {type(v).__name__}")
            if v.dtype.kind != "f" or v.dtype.itemsize not in (4, 8):
                raise ActivityError(f"argument {k}: Duplicated on a {v.dtype} array; only float32 and "
                                    f"float64 arrays carry derivatives (pass it plainly or as Const)")
            d = ann.dval
            if not isinstance(d, np.ndarray) or d.shape != v.shape or d.dtype != v.dtype:
                got = f"{d.dtype}{list(d.shape)}" if isinstance(d, np.ndarray) else type(d).__name__
                raise ActivityError(f"argument {k}: shadow is {got} but its primal is "
                                    f"{v.dtype}{list(v.shape)}; they must match in shape and dtype")
            if not d.flags.writeable:
                raise ActivityError(f"argument {k}: the shadow array is read-only")
        out.append(ann)
    _check_memory(out)
    return out


def _overlaps_itself(x):
    """True when two elements of array ``x`` may share memory (a zero stride from
    ``np.broadcast_to``, or an ``as_strided`` view whose rows overlap)."""
    if x.flags.c_contiguous or x.flags.f_contiguous or x.size == 0:
        return False
    span = x.itemsize
    for stride, n in sorted((abs(s), n) for s, n in zip(x.strides, x.shape) if n > 1):
        if stride < span:
            return True
        span += stride * (n - 1)
    return False


def _share_memory(a, b):
    """True when arrays ``a`` and ``b`` may have an element in common."""
    if not np.may_share_memory(a, b):
        return False
    try:
        return bool(np.shares_memory(a, b, max_work=100_000))
    except np.exceptions.TooHardError:
        return True


def _address(x):
    return x.__array_interface__["data"][0]


def _mirrored(a, b):
    """True when Duplicated ``a`` and ``b`` alias as their shadows do: each shadow laid out
    like its array, and the shadows as far apart as the arrays (``f(x[1:], x[:-1])`` with
    ``dx[1:], dx[:-1]``)."""
    return a.val.strides == a.dval.strides and b.val.strides == b.dval.strides \
        and _address(a.dval) - _address(b.dval) == _address(a.val) - _address(b.val)


def _check_memory(anns):
    """Shadows must be memory of their own: not overlapping themselves, any primal
    array, or another shadow (unless the shadows alias as their arrays do: ``f(x, x)``)."""
    arrays = [(k, a.val) for k, a in enumerate(anns) if isinstance(a.val, np.ndarray)]
    dups = [(k, a) for k, a in enumerate(anns) if isinstance(a, Duplicated)]
    for k, a in dups:
        for what, x in (("array", a.val), ("shadow", a.dval)):
            if _overlaps_itself(x):
                raise ActivityError(f"argument {k}: the {what}'s elements overlap in memory (strides "
                                    f"{x.strides}, as from np.broadcast_to or as_strided), so its "
                                    f"derivative is not defined per element; pass the base array or "
                                    f"a copy")
        for j, x in arrays:
            if _share_memory(a.dval, x):
                whose = "its own array" if j == k else f"the array of argument {j}"
                raise ActivityError(f"argument {k}: the shadow shares memory with {whose}; a "
                                    f"shadow must be separate memory (e.g. np.zeros_like(x))")
    for i, (k, a) in enumerate(dups):
        for j, b in dups[i + 1:]:
            if _share_memory(a.dval, b.dval) and not _mirrored(a, b):
                raise ActivityError(f"arguments {k} and {j}: their shadows share memory but not "
                                    f"as their arrays do")


def _split_return_activity(args):
    if args and isinstance(args[0], type) and issubclass(args[0], Annotation):
        return args[0], args[1:]
    return None, args


def _check_mode(mode):
    if not isinstance(mode, Mode):
        raise ActivityError(f"the first argument must be a mode (Reverse or ReverseWithPrimal), got {mode!r}")


def _dispatcher(f):
    if numba_abi.is_dispatcher(f) or hasattr(f, "_adcore_capture"):
        return f
    with _lock:
        if f not in _dispatchers:
            _dispatchers[f] = as_dispatcher(f)
        return _dispatchers[f]


def _distinct(arrays):
    for i in range(len(arrays)):
        for j in range(i + 1, len(arrays)):
            if np.may_share_memory(arrays[i], arrays[j]):
                return False
    return True


# -- compilation -----------------------------------------------------------------------
class CompiledGradient:
    """One native gradient of a kernel for fixed argument types and activities.

    ``native`` is an njit function that other Numba code may call:
    ``native(*arguments, *shadows[, dret])`` with the primal arguments in order, then the
    shadow array of each position in ``shadowed`` (Duplicated arguments, then Const arrays
    that need an internal zeroed shadow), then the seed of a returned array; it returns a
    tuple ``(primal return if any, adjoint of each Active argument..., bytes cached)``."""

    def __init__(self, dispatcher, anns, argtypes, ret_activity, distinct, seed_type=None):
        t0 = time.perf_counter()
        self.distinct = distinct
        kernel = capture(dispatcher, argtypes)
        self.pyname = kernel.pyname
        restype = kernel.restype
        ctx = kernel.context
        keep = {fn.name for fn in kernel.module.functions
                if not fn.is_declaration and custom_rules.find(fn.name) is not None}
        module = clean(kernel.module, kernel.symbol, keep)
        self.primal_ir = str(module)
        func = read_function(module.get_function(kernel.symbol), source_locations(self.primal_ir))
        is_float_ret = isinstance(restype, nbtypes.Float)
        if ret_activity is Active and not is_float_ret:
            raise ActivityError(f"return annotated Active but {self.pyname} returns {restype}, "
                                f"which is not a float")
        returns_array = isinstance(restype, nbtypes.Array) and isinstance(restype.dtype, nbtypes.Float)
        if returns_array and seed_type is None:
            raise ActivityError(f"{self.pyname} returns a {restype.dtype} array: pass the seed of "
                                f"the returned array with dret=")
        if seed_type is not None and not (returns_array and seed_type.dtype == restype.dtype
                                          and seed_type.ndim == restype.ndim):
            raise ActivityError(f"dret is a {seed_type.dtype} array of {seed_type.ndim} dimensions but "
                                f"{self.pyname} returns {restype}")
        if not (restype is nbtypes.none or returns_array
                or isinstance(restype, (nbtypes.Number, nbtypes.Boolean))):
            raise UnsupportedError(f"return type {restype}", self.pyname,
                                   "kernels may return a float, an integer, a bool, a float array or None")
        self.ret_active = is_float_ret and ret_activity is not Const
        self.has_primal = restype is not nbtypes.none
        fields = ([restype] if self.has_primal else [])
        counts = [len(numba_abi.flat_types(ctx, t)) for t in argtypes]
        starts = [2 + sum(counts[:k]) for k in range(len(argtypes))]
        data_pos = numba_abi.DATA
        active, active_fields, shadows, data_args = [], [], [], []

        def scratch_shadow(k):
            group = func.args[starts[k]:starts[k] + counts[k]]
            return (starts[k] + data_pos, [a.type for a in group], data_pos)

        for k, (ann, t) in enumerate(zip(anns, argtypes)):
            if isinstance(t, nbtypes.Array):
                data_args.append(starts[k] + data_pos)
            if isinstance(ann, Active):
                active.append(starts[k])
                active_fields.append(len(fields))
                fields.append(t)
            elif isinstance(ann, Duplicated):
                shadows.append(scratch_shadow(k))
        fields.append(nbtypes.int64)
        result = nbtypes.Tuple(tuple(fields))
        symbol = f"adcore_grad_{next(_counter)}"
        # Const arrays that receive differentiable values get an internal scratch shadow,
        # so derivatives flowing through them are not lost (found by a fixed point).
        self.scratch = set()
        while True:
            spec = Spec(symbol, self.pyname, active, shadows + [scratch_shadow(k) for k in sorted(self.scratch)],
                        self.ret_active, str(ctx.get_value_type(result)), active_fields,
                        len(fields) - 1, data_args, distinct, seed=_seed_params(ctx, seed_type) if returns_array else None)
            gen = AdjointGenerator(func, spec, ctx)
            lost = {k for k in range(len(anns))
                    if isinstance(argtypes[k], nbtypes.Array)
                    and func.args[starts[k] + data_pos] in gen.act.unshadowed_writes}
            if lost <= self.scratch:
                break
            self.scratch |= lost
        data_pointers = [func.args[starts[k] + data_pos] if isinstance(t, nbtypes.Array) else None
                         for k, t in enumerate(argtypes)]
        self.written = _written_arguments(gen.act, data_pointers)    # restored after a bad dret
        self.adjoint_ir = gradient_module(module, gen)
        self.optimised_ir = native.compile_ir(self.adjoint_ir, symbol, self.pyname)
        self.shadowed = [k for k, a in enumerate(anns) if isinstance(a, Duplicated)] + sorted(self.scratch)
        seed = [seed_type] if returns_array else []
        nargs = len(argtypes)
        self.native = native.make_stub(
            symbol, list(argtypes) + [argtypes[k] for k in self.shadowed] + seed, result,
            [(nargs + n, k, f"the shadow of argument {k}") for n, k in enumerate(self.shadowed)])
        self.compile_seconds = time.perf_counter() - t0

    def check_aliasing(self, anns):
        """Arrays that share memory the kernel writes must alias in their shadows too: a
        Duplicated array may not share such memory with a Const one, and two Duplicated
        arrays that do need shadows that alias the same way (else ActivityError)."""
        arrays = [k for k, a in enumerate(anns) if isinstance(a.val, np.ndarray)]
        for i, j in itertools.combinations(arrays, 2):
            a, b = anns[i], anns[j]
            if not (isinstance(a, Duplicated) or isinstance(b, Duplicated)) or \
                    (i not in self.written and j not in self.written) or not _share_memory(a.val, b.val):
                continue
            if not (isinstance(a, Duplicated) and isinstance(b, Duplicated)):
                const, dup = (j, i) if isinstance(a, Duplicated) else (i, j)
                raise ActivityError(f"argument {const} shares memory with Duplicated argument {dup} "
                                    f"and {self.pyname} writes it: pass both as Duplicated with views "
                                    f"of one shadow, or pass a copy")
            if not (_share_memory(a.dval, b.dval) and _mirrored(a, b)):
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
        out = self.native(*primals, *shadows, *seed)
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
        _last["cached_bytes"] = int(out[-1])
        offset = 1 if self.has_primal else 0
        derivs, j = [], offset
        for a in anns:
            if isinstance(a, Active):
                derivs.append(out[j])
                j += 1
            else:
                derivs.append(None)
        return tuple(derivs), (out[0] if self.has_primal else None)


def _written_arguments(act, data_pointers):
    """Indices of the array arguments (``data_pointers[k]``, None for scalars) the kernel
    may write."""
    written = set()
    for writes in act.written.values():
        for _, bases in writes:
            if bases == UNKNOWN:
                return [k for k, p in enumerate(data_pointers) if p is not None]
            written |= bases
    return [k for k, p in enumerate(data_pointers) if p is not None and p in written]


def _seed_params(ctx, seed_type):
    """LLVM parameter types of the flattened seed array, and the float type it holds."""
    return numba_abi.flat_types(ctx, seed_type), str(ctx.get_value_type(seed_type.dtype))


def _like_strides(x, d):
    """A copy of ``d`` (zeros if None) laid out with exactly the strides of ``x``."""
    reach = [s * (n - 1) for s, n in zip(x.strides, x.shape)] if x.size else []
    lo, hi = sum(r for r in reach if r < 0), sum(r for r in reach if r > 0)
    buf = np.zeros(hi - lo + x.itemsize, np.uint8)
    tmp = np.ndarray(x.shape, x.dtype, buffer=buf, offset=-lo, strides=x.strides)
    if d is not None:
        tmp[...] = d
    return tmp


def _arg_key(v):
    if isinstance(v, np.ndarray):
        flags = v.flags
        layout = "C" if flags.c_contiguous else ("F" if flags.f_contiguous else "A")
        return (v.dtype.char, v.ndim, layout, flags.writeable, flags.aligned)
    return type(v)


def _compiled(f, anns, ret_activity, dret=None):
    arrays = [a.val for a in anns if isinstance(a.val, np.ndarray)]
    distinct = _distinct(arrays)
    seed_key = None if dret is None else (dret.dtype.char, dret.ndim)
    fast = (f, tuple(type(a) for a in anns), tuple(_arg_key(a.val) for a in anns),
            ret_activity, distinct, seed_key)
    entry = _fast.get(fast)
    if entry is None:
        seed_type = None if dret is None else numba.typeof(np.ascontiguousarray(dret))
        entry = _fast[fast] = _compiled_by_type(f, anns, ret_activity, distinct, seed_type)
    return entry


def _located(err, dispatcher, args):
    """``err``, or the same error with its source line found by compiling the kernel
    again with debug info (done only on failure, to keep compiles fast)."""
    if err.location is not None or not numba_abi.is_dispatcher(dispatcher) \
            or numba_abi.is_debug(dispatcher):
        return err
    twin = numba_abi.recompiled(dispatcher, debug=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            CompiledGradient(twin, *args)
    except UnsupportedError as located:
        if located.location is not None and located.detail == err.detail:
            return located
    return err


def _compiled_by_type(f, anns, ret_activity, distinct, seed_type):
    dispatcher = _dispatcher(f)
    argtypes = tuple(numba.typeof(a.val) for a in anns)
    key = (dispatcher, argtypes, tuple(type(a) for a in anns), ret_activity, distinct, seed_type)
    entry = _cache.get(key)
    if entry is None:
        with _lock:
            entry = _cache.get(key)
            if entry is None:
                args = (anns, argtypes, ret_activity, distinct, seed_type)
                try:
                    entry = CompiledGradient(dispatcher, *args)
                except UnsupportedError as err:
                    raise _located(err, dispatcher, args) from None
                _cache[key] = entry
    return entry


# -- public API --------------------------------------------------------------------------
def autodiff(mode, f, *args, dret=None):
    """Reverse-mode derivative of ``f`` with Enzyme.jl's semantics.

    ``args`` are annotated ``Active(x)`` (a float: its derivative is returned),
    ``Duplicated(x, dx)`` (an array: ``dx`` accumulates the derivative), or ``Const``
    (the default for plain values); an optional return activity (``Active`` or ``Const``)
    may come first.  A kernel that returns a new float array needs ``dret``, the seed of
    the returned array (its shadow when the reverse pass starts).  Returns one entry per
    argument (a float for ``Active``, else ``None``); with ``ReverseWithPrimal`` returns
    ``(derivatives, value)``.
    """
    _check_mode(mode)
    ret_activity, args = _split_return_activity(args)
    anns = _annotate(args)
    if dret is not None and not (isinstance(dret, np.ndarray) and dret.dtype.kind == "f"):
        raise ActivityError(f"dret must be a float array (the seed of the returned array), "
                            f"got {type(dret).__name__}")
    compiled = _compiled(f, anns, ret_activity, dret)
    derivs, value = compiled(anns, dret)
    return (derivs, value) if mode.with_primal else derivs


def gradient(mode, f, *args):
    """Gradient of a float-valued ``f``: plain floats are Active, plain float arrays are
    Duplicated with fresh zero shadows, ``Const`` stays constant.  Returns one entry per
    argument (float, array or ``None``); with ``ReverseWithPrimal``, ``(grads, value)``."""
    _check_mode(mode)
    anns = []
    for a in args:
        if isinstance(a, Annotation):
            anns.append(a)
        elif _is_float_scalar(a):
            anns.append(Active(a))
        elif isinstance(a, np.ndarray) and a.dtype.kind == "f":
            anns.append(Duplicated(a, np.zeros_like(a)))
        else:
            anns.append(Const(a))
    anns = _annotate(anns)
    compiled = _compiled(f, anns, Active)
    derivs, value = compiled(anns)
    grads = tuple(a.dval if isinstance(a, Duplicated) else d for a, d in zip(anns, derivs))
    return (grads, value) if mode.with_primal else grads


def compile_gradient(mode, f, *args, dret=None):
    """The compiled gradient ``autodiff(mode, f, *args, dret=dret)`` would use, without
    running it: a :class:`CompiledGradient` whose ``native`` njit function can be called
    from other Numba code (a training loop, say)."""
    _check_mode(mode)
    ret_activity, args = _split_return_activity(args)
    return _compiled(f, _annotate(args), ret_activity, dret)


def primal_ir(f, *args):
    """The cleaned LLVM IR of ``f`` for these arguments: what the differentiator reads."""
    anns = _annotate(args)
    kernel = capture(_dispatcher(f), tuple(numba.typeof(a.val) for a in anns))
    return str(clean(kernel.module, kernel.symbol))


def adjoint_ir(mode, f, *args, optimised=False):
    """The LLVM IR adcore emits for the gradient of ``f`` (before O3, or after with
    ``optimised=True``)."""
    _check_mode(mode)
    ret_activity, args = _split_return_activity(args)
    compiled = _compiled(f, _annotate(args), ret_activity)
    return compiled.optimised_ir if optimised else compiled.adjoint_ir
