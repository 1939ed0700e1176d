"""The user-facing entry points: ``autodiff``, ``gradient``, ``compile_gradient``,
``primal_ir``, ``adjoint_ir``; and the cache of compiled gradients."""
import os
import threading
import warnings
from collections import OrderedDict

import numba
import numpy as np

from . import numba_abi, pipeline, plan
from .annotations import Active, Annotation, Const, Duplicated, Mode
from .backend import disk_cache
from .calling import repeat_builtin, repeat_guard
from .calling.arguments import (
    annotate,
    check_plain_argument,
    distinct as _distinct,
    is_float_scalar,
    type_key,
)
from .frontend.capture import argument_types, as_dispatcher
from .calling.compiled import last_cached_bytes  # noqa: F401  (public)
from .errors import ActivityError, UnsupportedError

class _Bounded(OrderedDict):
    """A dict keeping the ``limit`` most recently used entries (``ADCORE_MEMORY_CACHE``,
    256 by default): a loop over new lambdas does not keep every compiled gradient."""

    limit = int(os.environ.get("ADCORE_MEMORY_CACHE", 256))

    def get(self, key):
        value = super().get(key)
        if value is not None:
            self.move_to_end(key)
        return value

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        while len(self) > self.limit:
            self.popitem(last=False)


_cache = _Bounded()          # (dispatcher, types, activities) -> CompiledGradient
_fast = _Bounded()           # the same, keyed by what a call can tell without Numba
_dispatchers = _Bounded()    # plain Python function -> its njit dispatcher
_repeat = _Bounded()         # repeat_guard.call_key -> the caller of repeat calls
_lock = threading.RLock()


def _split_return_activity(args):
    if args and isinstance(args[0], type) and issubclass(args[0], Annotation):
        return args[0], args[1:]
    return None, args


def _check_mode(mode, forward_ok=False):
    if not isinstance(mode, Mode):
        raise ActivityError(f"the first argument must be a mode (Reverse or ReverseWithPrimal), got {mode!r}")
    if mode.forward and not forward_ok:
        raise ActivityError(f"{mode} is not available here: this entry point is reverse mode "
                            f"(use autodiff({mode}, ...) or jacobian({mode}, ...))")


def _dispatcher(f):
    if numba_abi.is_dispatcher(f) or hasattr(f, "_adcore_capture"):
        return f
    with _lock:
        if f not in _dispatchers:
            _dispatchers[f] = as_dispatcher(f)
        return _dispatchers[f]


# -- compilation ----------------------------------------------------------------------
def _compiled(f, anns, ret_activity, dret=None, keep_primal=True):
    arrays = [a.val for a in anns if isinstance(a.val, np.ndarray)]
    distinct = _distinct(arrays)
    seed_key = None if dret is None else (dret.dtype.char, dret.ndim)
    fast = (f, tuple(type(a) for a in anns), tuple(type_key(a.val) for a in anns),
            ret_activity, distinct, seed_key, keep_primal, plan.disabled())
    entry = _fast.get(fast)
    if entry is None:
        seed_type = None if dret is None else numba.typeof(np.ascontiguousarray(dret))
        entry = _fast[fast] = _compiled_by_type(f, anns, ret_activity, distinct, seed_type, keep_primal)
    return entry


def _located(err, dispatcher, args, differentiate=None):
    """``err``, or the same error with its source line found by compiling the kernel
    again with debug info (done only on failure, to keep compiles fast) and running
    ``differentiate(twin, *args)`` (default: the reverse pipeline) on it."""
    if err.location is not None or not numba_abi.is_dispatcher(dispatcher) \
            or numba_abi.is_debug(dispatcher):
        return err
    twin = numba_abi.recompiled(dispatcher, debug=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            (differentiate or pipeline.differentiate)(twin, *args)
    except UnsupportedError as located:
        if located.location is not None and located.detail == err.detail:
            return located
    return err


def _compiled_by_type(f, anns, ret_activity, distinct, seed_type, keep_primal=True):
    dispatcher = _dispatcher(f)
    argtypes = argument_types(dispatcher, [a.val for a in anns])
    key = (dispatcher, argtypes, tuple(type(a) for a in anns), ret_activity, distinct, seed_type,
           keep_primal, plan.disabled())
    entry = _cache.get(key)
    if entry is None:
        with _lock:
            entry = _cache.get(key)
            if entry is None:
                args = (anns, argtypes, ret_activity, distinct, seed_type)

                def compile_(name):
                    try:
                        return pipeline.differentiate(dispatcher, *args, name=name, keep_primal=keep_primal)
                    except UnsupportedError as err:
                        raise _located(err, dispatcher, args) from None
                entry = _cache[key] = disk_cache.cached(dispatcher, argtypes, key[2], ret_activity,
                                                        distinct, seed_type, compile_, keep_primal)
    return entry


def _with_defaults(f, anns):
    """``anns`` and, for the trailing parameters not passed, ``Const`` of their default
    values (Numba compiles a kernel for all its parameters)."""
    py = getattr(f, "py_func", f)
    code, defaults = getattr(py, "__code__", None), getattr(py, "__defaults__", None) or ()
    missing = code.co_argcount - len(anns) if code is not None else 0
    if missing <= 0:
        return anns
    if missing > len(defaults):
        raise ActivityError(f"{getattr(py, '__qualname__', py)} takes {code.co_argcount} "
                            f"arguments, got {len(anns)}")
    return anns + [Const(d) for d in defaults[len(defaults) - missing:]]


def _remember(key, compiled, entry, args, everything, anns):
    """Keep the caller of repeat calls like this one (:mod:`adcore.calling.repeat_guard`), when
    ``compiled`` can check them; it is forgotten with the compiled gradients (same limit).
    An ``autodiff`` caller that has served ``repeat_builtin.PROMOTE_AFTER`` calls gives way
    to a native one (:mod:`adcore.calling.repeat_builtin`) where the arguments allow."""
    defaults = [a.val for a in everything[len(anns):]]

    def promote():
        if defaults or _repeat.get(key) is None:
            return
        kept = repeat_builtin.repeat_builtin(compiled.entry, compiled.shadowed, compiled.has_primal,
                                             args[len(args) - len(anns):], len(args) - len(anns))
        if kept is not None:
            _repeat[key] = (kept.call, repeat_builtin.after_builtin(kept, call))

    call = repeat_guard.checked_caller(compiled, entry, args, everything, defaults,
                                       promote if entry == "autodiff" else None)
    if call is not None:
        _repeat[key] = (call, _refused)


def _refused(args, got):
    """What a Python repeat caller's refusal leaves: the full way (None)."""
    return None


# -- public API --------------------------------------------------------------------------
def autodiff(mode, f, *args, dret=None):
    """Reverse-mode derivative of ``f`` with Enzyme.jl's semantics.

    ``args`` are annotated ``Active(x)`` (a float: its derivative is returned),
    ``Duplicated(x, dx)`` (an array: ``dx`` accumulates the derivative), or ``Const``
    (the default for plain values); an optional return activity (``Active`` or ``Const``)
    may come first.  A kernel that returns a new float array needs ``dret``, the seed of
    the returned array (its shadow when the reverse pass starts).  Returns one entry per
    argument (a float for ``Active``, else ``None``); with ``ReverseWithPrimal`` returns
    ``(derivatives, value)``.  ``Forward``/``ForwardWithPrimal``: see
    :func:`adcore.forward.api.autodiff_forward`.
    """
    _check_mode(mode, forward_ok=True)
    if mode.forward:
        if dret is not None:
            raise ActivityError("dret seeds reverse mode; forward mode takes tangents of the arguments")
        from .forward.api import autodiff_forward  # builds on this module: imported when first used
        return autodiff_forward(mode, f, *args)
    key = repeat_guard.call_key(("autodiff", mode.with_primal, plan.disabled()), f, args) if dret is None else None
    hit = _repeat.get(key)
    if hit is not None:
        got = hit[0](args)
        if type(got) is not tuple:
            got = hit[1](args, got)
        if got is not None:
            return got if mode.with_primal else got[0]
    given = args
    ret_activity, args = _split_return_activity(args)
    anns = annotate(args)
    if dret is not None and not (isinstance(dret, np.ndarray) and dret.dtype.kind == "f"):
        raise ActivityError(f"dret must be a float array (the seed of the returned array), "
                            f"got {type(dret).__name__}")
    everything = _with_defaults(f, anns)
    compiled = _compiled(f, everything, ret_activity, dret, keep_primal=mode.with_primal)
    derivs, value = compiled(everything, dret)
    derivs = derivs[:len(anns)]
    if key is not None:
        _remember(key, compiled, "autodiff", given, everything, anns)
    return (derivs, value) if mode.with_primal else derivs


def gradient(mode, f, *args):
    """Gradient of a float-valued ``f``: plain floats are Active, plain float arrays are
    Duplicated with fresh zero shadows, ``Const`` stays constant.  Returns one entry per
    argument (float, array or ``None``); with ``ReverseWithPrimal``, ``(grads, value)``."""
    _check_mode(mode)
    key = repeat_guard.call_key(("gradient", mode.with_primal, plan.disabled()), f, args)
    hit = _repeat.get(key)
    got = hit[0](args) if hit is not None else None
    if got is not None:
        return got if mode.with_primal else got[0]
    anns = []
    for k, a in enumerate(args):
        if isinstance(a, Annotation):
            anns.append(a)
        elif is_float_scalar(a):
            anns.append(Active(a))
        elif isinstance(a, np.ndarray) and a.dtype.kind == "f":
            anns.append(Duplicated(a, np.zeros_like(a)))
        else:
            check_plain_argument(k, a)
            anns.append(Const(a))
    anns = annotate(anns)
    everything = _with_defaults(f, anns)
    compiled = _compiled(f, everything, Active, keep_primal=mode.with_primal)
    derivs, value = compiled(everything)
    grads = tuple(a.dval if isinstance(a, Duplicated) else d for a, d in zip(anns, derivs))
    _remember(key, compiled, "gradient", args, everything, anns)
    return (grads, value) if mode.with_primal else grads


def compile_gradient(mode, f, *args, dret=None, passes=None):
    """The compiled gradient ``autodiff(mode, f, *args, dret=dret)`` would use, without
    running it: a :class:`CompiledGradient` whose ``native`` njit function can be called
    from other Numba code (a training loop, say).  ``passes`` switches passes of the plan
    on or off by name (``{"replays": False}``; the names are ``adcore.plan.PASSES``)."""
    _check_mode(mode)
    off = plan.switched_off(passes)
    ret_activity, args = _split_return_activity(args)
    with plan.using(off):
        return _compiled(f, annotate(args), ret_activity, dret)


def cache_report(f, *args, lines=False, passes=None):
    """What the reverse pass of ``f`` (arguments annotated as for :func:`autodiff`) caches
    per iteration of each loop: a :class:`adcore.plan.report.CacheReport`; ``print`` it.
    ``lines=True`` names source lines, from the kernel compiled again with debug info
    (whose plan may differ a little from the optimised kernel's); ``passes`` as for
    :func:`compile_gradient`."""
    from .plan.report import build_report
    off = plan.switched_off(passes)
    ret_activity, args = _split_return_activity(args)
    anns = _with_defaults(f, annotate(args))
    dispatcher = _dispatcher(f)
    argtypes = argument_types(dispatcher, [a.val for a in anns])
    if lines and numba_abi.is_dispatcher(dispatcher) and not numba_abi.is_debug(dispatcher):
        dispatcher = numba_abi.recompiled(dispatcher, debug=True)
    distinct = _distinct([a.val for a in anns if isinstance(a.val, np.ndarray)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with plan.using(off):
            generator = pipeline.generate(dispatcher, anns, argtypes, ret_activity, distinct)[2]
    return build_report(generator)


def primal_ir(f, *args):
    """The cleaned LLVM IR of ``f`` for these arguments: what the differentiator reads."""
    dispatcher = _dispatcher(f)
    return pipeline.primal(dispatcher, argument_types(dispatcher, [a.val for a in annotate(args)])).ir


def adjoint_ir(mode, f, *args, optimised=False, passes=None):
    """The LLVM IR adcore emits for the gradient of ``f`` (before O3, or after with
    ``optimised=True``); ``passes`` as for :func:`compile_gradient`."""
    _check_mode(mode)
    compiled = compile_gradient(mode, f, *args, passes=passes)
    return compiled.optimised_ir if optimised else compiled.adjoint_ir
