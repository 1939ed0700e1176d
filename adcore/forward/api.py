"""Forward mode and second derivatives: ``autodiff(Forward, ...)``, ``jacobian``, ``hvp``,
``hessian``.

``hvp`` differentiates adcore's own gradient IR in forward mode (forward over reverse):
the gradient of ``f`` is compiled as usual, its IR is captured as a kernel whose value-stack
calls are kept as calls, and the tangent generator runs on it in *stack mode*.
"""
import threading

import numba
import numpy as np

from .. import api, numba_abi, pipeline
from ..annotations import Active, Annotation, BatchDuplicated, Const, Duplicated, Reverse
from ..calling.arguments import (
    _check_memory,
    annotate,
    check_shadow,
    distinct as _distinct,
    is_float_scalar,
    share_memory,
    type_key,
)
from ..errors import ActivityError, UnsupportedError
from ..frontend.capture import argument_types
from .gradient_kernel import GradientKernel, float_pops, stack_rule
from .pipeline import differentiate_forward

BATCH = 8                        # directions per pass of jacobian(Forward) and hessian
_cache = api._Bounded()
_checked = {}                    # a call's _call_key -> its checked call (_checked_caller)
_lock = threading.RLock()


# -- annotations ------------------------------------------------------------------------
def _tangents(k, ann, lanes):
    """The checked tangents (a list of ``lanes``) of argument ``k``, or None for Const."""
    if isinstance(ann, Active):
        raise ActivityError(f"argument {k}: Active is reverse mode; in forward mode pass "
                            f"Duplicated(x, dx) with the tangent dx")
    if not isinstance(ann, (Duplicated, BatchDuplicated)):
        return None
    v = ann.val
    ts = list(ann.dval) if isinstance(ann, BatchDuplicated) else [ann.dval]
    if isinstance(ann, BatchDuplicated) and not isinstance(ann.dval, tuple):
        raise ActivityError(f"argument {k}: BatchDuplicated needs a tuple of tangents, got "
                            f"{type(ann.dval).__name__}")
    if len(ts) != lanes:
        raise ActivityError(f"argument {k}: {len(ts)} tangents, but other arguments have {lanes}")
    if is_float_scalar(v):
        for t in ts:
            if not (is_float_scalar(t) or isinstance(t, int) and not isinstance(t, bool)):
                raise ActivityError(f"argument {k}: the tangent of a float is a float, got "
                                    f"{type(t).__name__}")
        return [float(t) for t in ts]
    if not isinstance(v, np.ndarray) or v.dtype.kind != "f" or v.dtype.itemsize not in (4, 8):
        what = f"a {v.dtype} array" if isinstance(v, np.ndarray) else type(v).__name__
        raise ActivityError(f"argument {k}: {type(ann).__name__} on {what}; only floats and float32/"
                            f"float64 arrays carry tangents (pass it plainly or as Const)")
    for t in ts:
        check_shadow(k, v, t, "tangent")
    return ts


def _annotate(args):
    """``(annotations, tangents per argument, lanes)`` for forward mode, checked."""
    if args and isinstance(args[0], type) and issubclass(args[0], Annotation):
        raise ActivityError(f"a return activity ({args[0].__name__}) is reverse mode; forward mode "
                            f"returns the tangent of a float return")
    anns = [a if isinstance(a, Annotation) else Const(a) for a in args]
    batches = {len(a.dval) for a in anns if isinstance(a, BatchDuplicated) and isinstance(a.dval, tuple)}
    if len(batches) > 1:
        raise ActivityError(f"BatchDuplicated arguments have different numbers of tangents: {sorted(batches)}")
    lanes = batches.pop() if batches else 1
    if lanes == 0:
        raise ActivityError("BatchDuplicated needs at least one tangent")
    tangents = [_tangents(k, a, lanes) for k, a in enumerate(anns)]
    for j in range(lanes):            # each lane's tangents as reverse mode's shadows
        _check_memory([Duplicated(a.val, ts[j]) if ts is not None and isinstance(ts[0], np.ndarray)
                       else Const(a.val) for a, ts in zip(anns, tangents)])
    owned = [(k, j, t) for k, ts in enumerate(tangents) if ts and isinstance(ts[0], np.ndarray)
             for j, t in enumerate(ts)]
    for i, (k, j, t) in enumerate(owned):
        for k2, j2, u in owned[i + 1:]:
            if j2 != j and share_memory(t, u):
                raise ActivityError(f"arguments {k} and {k2}: tangents of two directions share memory")
    return anns, tangents, lanes


def _compiled(f, anns, tangents, lanes):
    """The compiled tangent function for these arguments (cached by what a call can tell
    without Numba's typeof, as reverse mode's ``api._compiled``)."""
    floats = tuple(k for k, t in enumerate(tangents) if t is not None and not isinstance(t[0], np.ndarray))
    arrays = tuple(k for k, t in enumerate(tangents) if t is not None and isinstance(t[0], np.ndarray))
    distinct = _distinct([a.val for a in anns if isinstance(a.val, np.ndarray)])
    key = (f, tuple(type_key(a.val) for a in anns), floats, arrays, lanes, distinct)
    entry = _cache.get(key)
    if entry is None:
        with _lock:
            entry = _cache.get(key)
            if entry is None:
                dispatcher = api._dispatcher(f)
                args = (argument_types(dispatcher, [a.val for a in anns]), list(floats), list(arrays), lanes, distinct)
                try:
                    entry = _cache[key] = differentiate_forward(dispatcher, *args)
                except UnsupportedError as err:
                    raise api._located(err, dispatcher, args, differentiate_forward) from None
    return entry


def autodiff_forward(mode, f, *args):
    """Forward-mode derivative of ``f`` (``adcore.autodiff(Forward, ...)``).

    ``Duplicated(x, dx)`` gives float or array ``x`` the tangent ``dx`` (array tangents are
    updated in place: on exit they hold the tangents of the arrays' new contents);
    ``BatchDuplicated(x, (v1, ..., vk))`` gives k directions at once; the rest is Const.
    Returns the tangent of ``f``'s float return (a tuple of k with BatchDuplicated;
    ``None`` when ``f`` returns no float); with ``ForwardWithPrimal`` ``(tangent, value)``."""
    key = _call_key(f, args)
    call = _checked.get(key)
    try:
        if call is None:
            raise Unchecked
        dy, value = call(args)
    except (Unchecked, ActivityError):     # ActivityError: a tangent laid out unlike its array
        dy, value = _call(f, args, key)
    except TypeError:                  # Numba's dispatch: types the checked call was not made for
        if _types(args) == call.types:     # no: the kernel raised it
            raise
        dy, value = _call(f, args, key)
    return (dy, value) if mode.with_primal else dy


def _call_key(f, args):
    """What a call can tell cheaply that selects its checked call (:func:`_checked_caller`):
    ``f``, and for each argument its annotation, the dtype and dimensions of an array
    (Numba's dispatch checks the rest of their types) or the type of a value, and the
    types of its tangents."""
    parts = [f]
    for a in args:
        cls = type(a)
        v = a.val if issubclass(cls, Annotation) else a
        kind = (v.dtype, v.ndim) if type(v) is np.ndarray else type(v)
        if cls is Duplicated or cls is BatchDuplicated:
            t = a.dval
            parts += (cls, kind, tuple(map(type, t)) if type(t) is tuple else type(t))
        else:
            parts += (cls, kind, None)
    return tuple(parts)


def _types(args):
    """The types of ``args``' values and tangents (:func:`adcore.calling.arguments.type_key`)."""
    return tuple((type_key(a.val), type_key(getattr(a, "dval", None))) if isinstance(a, Annotation)
                 else type_key(a) for a in args)


def _call(f, args, key):
    """``(tangent, value)`` of a call checked in Python (:meth:`CompiledForward.run`);
    the next calls of ``key`` take the checked call (:func:`_checked_caller`) when they can."""
    anns, tangents, lanes = _annotate(args)
    everything = api._with_defaults(f, anns)
    tangents += [None] * (len(everything) - len(anns))
    compiled = _compiled(f, everything, tangents, lanes)
    dys, value = compiled.run(everything, tangents)
    if _natively_checkable(compiled, everything, tangents):
        if len(_checked) >= api._Bounded.limit:        # the oldest goes
            _checked.pop(next(iter(_checked)), None)
        _checked[key] = _checked_caller(compiled, args, [a.val for a in everything[len(anns):]])
    batched = any(isinstance(a, BatchDuplicated) for a in anns)
    return (dys if dys is None or batched else dys[0]), value


def _natively_checkable(compiled, anns, tangents):
    """Whether calls like this one (same :func:`_call_key`) can take the checked
    call: arrays that share no memory, and tangents typed and laid out as their arrays."""
    return compiled.checkable_natively and all(
        numba.typeof(t) == compiled.argtypes[k] and t.strides == anns[k].val.strides
        for k in compiled.duplicated for t in tangents[k])


def _checked_caller(compiled, args, defaults):
    """``call(args) -> (tangent, value)`` for calls of ``args``' :func:`_call_key`: their
    arguments, tangents and result unpacked as this call's for the native function, which
    checks that no arrays share memory (raises :class:`Unchecked` when some do)."""
    def lanes(k, convert=""):
        dval = f"args[{k}].dval"
        if isinstance(args[k], BatchDuplicated):
            return [f"{convert}({dval}[{j}])" for j in range(compiled.lanes)]
        return [f"{convert}({dval})"]
    values = [f"args[{k}].val" if isinstance(a, Annotation) else f"args[{k}]" for k, a in enumerate(args)]
    values += [f"defaults[{i}]" for i in range(len(defaults))]
    values += [t for k in compiled.tangent_floats for t in lanes(k, "float")]
    values += [t for k in compiled.duplicated for t in lanes(k)]
    first = 1 if compiled.has_primal else 0
    batched = any(isinstance(a, BatchDuplicated) for a in args)
    dy = "None" if not compiled.ret_float else \
        f"out[{first}:{first + compiled.lanes}]" if batched else f"out[{first}]"
    scope = {"native": compiled.native, "defaults": defaults, "Unchecked": Unchecked}
    exec(f"def call(args):\n    out = native({', '.join(values)})\n    if out[-1]:\n        raise Unchecked\n"
         f"    return {dy}, {'out[0]' if compiled.has_primal else 'None'}\n", scope)
    call = scope["call"]
    call.types = _types(args)
    return call


class Unchecked(Exception):
    """A call that :func:`_call` checks in Python: none like it before, or its arrays share memory."""


# -- Jacobians --------------------------------------------------------------------------
def _array_arg(x, what):
    if not (isinstance(x, np.ndarray) and x.dtype.kind == "f" and x.dtype.itemsize in (4, 8)):
        raise ActivityError(f"{what}: x must be a float32 or float64 array, got "
                            f"{getattr(x, 'dtype', type(x).__name__)}")
    return x


_writers = api._Bounded()


def _writer(g, nconst):
    """An njit ``w(x, out, *consts)`` doing ``out[...] = g(x, *consts)`` (``out`` is
    C-contiguous; an element loop compiles faster than Numba's broadcasting assignment)."""
    key = (g, nconst)
    if key not in _writers:
        names = "".join(f", c{i}" for i in range(nconst))
        scope = {"g": api._dispatcher(g), "np": np}
        exec(f"def w(x, out{names}):\n    r = np.ravel(g(x{names}))\n    o = out.reshape(out.size)\n"
             f"    for i in range(o.size):\n        o[i] = r[i]\n", scope)
        _writers[key] = numba.njit(scope["w"])
    return _writers[key]


def jacobian(mode, g, x, *const_args):
    """The Jacobian of ``g(x, *const_args)`` (a float array) at ``x``: shape
    ``g(x).shape + x.shape``.  ``Forward`` builds it by columns (vector forward mode, 8
    directions a pass), ``Reverse`` by rows (one reverse pass per output)."""
    api._check_mode(mode, forward_ok=True)
    x = _array_arg(x, "jacobian")
    y = api._dispatcher(g)(x.copy(), *const_args)
    if not (isinstance(y, np.ndarray) and y.dtype.kind == "f"):
        raise ActivityError(f"jacobian: g must return a float array, got {type(y).__name__}")
    w = _writer(g, len(const_args))
    consts = [Const(c) for c in const_args]
    J = np.zeros((y.size, x.size))
    if mode.forward:
        for cols in _batches(x.size):
            seeds = tuple(_unit(x, i) for i in cols)
            douts = tuple(np.zeros_like(y) for _ in cols)
            autodiff_forward(mode, w, BatchDuplicated(x.copy(), seeds), BatchDuplicated(np.empty_like(y), douts),
                             *consts)
            for i, d in zip(cols, douts):
                if i is not None:
                    J[:, i] = d.ravel()
    else:
        for i in range(y.size):
            dx = np.zeros_like(x)
            api.autodiff(Reverse, w, Duplicated(x.copy(), dx), Duplicated(np.empty_like(y), _unit(y, i)), *consts)
            J[i] = dx.ravel()
    return J.reshape(y.shape + x.shape)


def _batches(n):
    """Column indices in batches of ``min(n, BATCH)``, the last padded with None (a zero
    direction), so that one compiled width serves every batch."""
    width = min(n, BATCH)
    cols = list(range(n)) + [None] * (-n % width)
    return [cols[k:k + width] for k in range(0, len(cols), width)]


def _unit(x, i):
    """The unit direction along element ``i`` of ``x`` (zero for None)."""
    e = np.zeros_like(x)
    if i is not None:
        e.flat[i] = 1
    return e


# -- second derivatives: forward over reverse --------------------------------------------
_kernels = api._Bounded()       # (f, argument types, distinct) -> (GradientKernel, f's default values)


def _gradient_kernel(f, x, const_args):
    """``(the gradient of f read back as a kernel, the Const values with f's defaults)``
    for ``hvp`` at ``x``; a call like the last (same types, same verdict on shared memory)
    takes the kernel it found."""
    fast = (f, type_key(x), tuple(type_key(c) for c in const_args),
            _distinct([x] + [c for c in const_args if isinstance(c, np.ndarray)]))
    hit = _kernels.get(fast)
    if hit is None:
        anns = api._with_defaults(f, annotate([Duplicated(x, np.zeros_like(x))] + [Const(c) for c in const_args]))
        compiled = api._compiled(f, anns, Active)
        dispatcher = api._dispatcher(f)
        argtypes = argument_types(dispatcher, [a.val for a in anns])
        if numba_abi.is_parallel(dispatcher):
            # forward mode reads the gradient with its parallel loops lowered as loops
            compiled = pipeline.differentiate(dispatcher, anns, argtypes, Active, compiled.distinct,
                                              parfors="loops")
        elif compiled.native_parts is None and "@adcore_rule_" in compiled.adjoint_ir:
            # from the disk cache: its IR names the rules' reverses as the writing process did
            compiled = pipeline.differentiate(dispatcher, anns, argtypes, Active, compiled.distinct)
        shadows = tuple(argtypes[k] for k in compiled.shadowed)
        name = getattr(getattr(f, "py_func", f), "__qualname__", str(f))
        hit = _kernels[fast] = (GradientKernel(compiled, argtypes + shadows, name),
                                [a.val for a in anns[1 + len(const_args):]])
    gk, defaults = hit
    return gk, list(const_args) + defaults


def _hvps(f, x, directions, const_args):
    """``[H(x) v for v in directions]`` in one forward pass over the gradient of ``f``."""
    gk, consts = _gradient_kernel(f, x, const_args)
    compiled = gk.compiled
    written = 0 in compiled.written                    # f overwrites x: work on copies
    values = [x.copy() if written else x] + consts
    shadows = [np.zeros_like(values[k]) for k in compiled.shadowed]
    dx_position = len(values) + compiled.shadowed.index(0)
    tangents = [None] * (len(values) + len(shadows))
    tangents[0] = [np.array(v, x.dtype, copy=written).reshape(x.shape) for v in directions]
    tangents[dx_position] = [np.zeros_like(x) for _ in directions]
    everything = [Duplicated(values[0], tangents[0][0])] + [Const(v) for v in values[1:]] + \
                 [Duplicated(s, tangents[dx_position][0]) if k == 0 else Const(s)
                  for k, s in zip(compiled.shadowed, shadows)]
    key = (gk, tuple(type_key(a.val) for a in everything), len(directions))
    entry = _cache.get(key)
    if entry is None:
        with _lock:
            try:
                entry = _cache.get(key) or differentiate_forward(
                    gk, tuple(numba.typeof(a.val) for a in everything), [], [0, dx_position], len(directions),
                    _distinct([a.val for a in everything]), stack_rule=stack_rule,
                    seeds=lambda func: float_pops(func, gk.__name__))
            except UnsupportedError as err:
                raise UnsupportedError(f"the Hessian of {gk.pyname}", None,
                                       f"forward mode over its gradient: {err}") from None
            _cache[key] = entry
    entry.run(everything, tangents)
    return tangents[dx_position]


def _objective_args(f, x, v=None):
    x = _array_arg(x, "hvp")
    if v is not None and (not isinstance(v, np.ndarray) or v.shape != x.shape):
        raise ActivityError(f"hvp: v must be an array of x's shape {x.shape}, got "
                            f"{getattr(v, 'shape', type(v).__name__)}")
    return x


def hvp(f, x, v, *const_args):
    """``H(x) @ v`` for the Hessian H of the float function ``f(x, *const_args)``: forward
    mode applied to adcore's reverse-mode IR of ``f`` (exact, no finite differences);
    the result has ``x``'s shape."""
    x = _objective_args(f, x, v)
    return _hvps(f, x, [v], const_args)[0]


def hessian(f, x, *const_args):
    """The Hessian of the float function ``f(x, *const_args)`` at ``x``, shape
    ``x.shape + x.shape``: columns by vector forward mode over the gradient (8 a pass)."""
    x = _objective_args(f, x)
    H = np.zeros((x.size, x.size))
    for cols in _batches(x.size):
        for i, column in zip(cols, _hvps(f, x, [_unit(x, i) for i in cols], const_args)):
            if i is not None:
                H[:, i] = column.ravel()
    return H.reshape(x.shape + x.shape)

