"""The tracked array: a numpy value plus its id on a tape; every op on it is recorded."""
import math
from operator import attrgetter

import numpy as np

from ..errors import ADError, UnsupportedError
from . import observe
from .recording import Record
from .rules import OPERATORS, RULES

EMPTY = {}


def apply(op, args, attrs=EMPTY):
    """Run op ``op`` of the rule table on ``args``; record it when an operand is tracked.

    Returns a ``Tracked`` when some operand is tracked, otherwise the plain numpy
    result (so every public function of ``adcore.tape`` also works on plain arrays).
    A tracked result that is not floating-point (or complex for a rule that is not
    ``complex_ok``) raises ``UnsupportedError``: the path is never dropped silently.
    """
    # The dispatch path of every recorded op: kept short (see bench.tape_bench and
    # tests/tape/test_tape_dispatch.py, which counts its Python calls).
    rule = RULES[op]
    tape = None
    ids = []
    vals = []
    for a in args:
        if type(a) is Tracked:
            if tape is None:
                tape = a._tape
            elif a._tape is not tape:
                raise ADError("an operation mixes tracked arrays of two different tapes "
                              "(nested adcore.tape.gradient calls are not supported)")
            ids.append(a._id)
            vals.append(a.value)
        else:
            ids.append(None)
            vals.append(a)
    if tape is None:
        return rule.forward(*args, **attrs)
    out = rule.forward(*vals, **attrs) if attrs else rule.forward(*vals)
    return _record(tape, rule, op, tuple(ids), tuple(vals), out, attrs, args)


def apply1(op, x, attrs=EMPTY):
    """``apply`` of a one-operand op to the tracked ``x`` (array methods, unary ufuncs)."""
    rule = RULES[op]
    v = x.value
    out = rule.forward(v, **attrs) if attrs else rule.forward(v)
    return _record(x._tape, rule, op, (x._id,), (v,), out, attrs, (x,))


def _record(tape, rule, op, ids, vals, out, attrs, args):
    """Append the record of ``out = op(*vals)`` (the operands ``args``) to ``tape`` and
    return its tracked output; a view's output and tracked operands are marked as aliased."""
    kind = out.dtype.kind
    if kind != "f":
        if kind != "c" or not rule.complex_ok:
            raise _untracked(op, out)
    elif not rule.complex_ok:
        j = 0
        for v in vals:  # (indexing: a zip costs more than the check itself)
            if ids[j] is not None and v.dtype.kind == "c":
                raise _untracked(op, out)
            j += 1
    records = tape.records
    t = _new(Tracked)
    t.value = out
    t._tape = tape
    t._alias = False
    t._id = n = len(records)
    rec = _new(Record)  # Record(op, ids, vals, n, out, attrs) without the call of __init__
    rec.op = op
    rec.inputs = ids
    rec.args = vals
    rec.out = n
    rec.value = out
    rec.attrs = attrs
    records.append(rec)
    if rule.view:
        t._alias = True  # in-place updates of either are refused
        for a in args:
            if type(a) is Tracked:
                a._alias = True
    return t


_new = object.__new__


def _untracked(op, out):
    """The error for a result the tape cannot follow (never returned as an untracked array)."""
    what = f"a {out.dtype} (not floating-point) result" if out.dtype.kind not in "fc" else \
        "a complex result or operand"
    return UnsupportedError(f"numpy.{op} with {what}",
                            detail="adcore.tape's rule for it is for real values only")


def primal(x):
    """The plain value of ``x``: tracked arrays inside tuples, lists and dicts are replaced by their values."""
    if type(x) is Tracked:
        return x.value
    if isinstance(x, (tuple, list)):
        items = [primal(v) for v in x]
        return type(x)(*items) if hasattr(x, "_fields") else type(x)(items)
    if isinstance(x, dict):
        return type(x)((k, primal(v)) for k, v in x.items())
    return x


def _axis(a, ndim):
    """One axis as a non-negative int, checked as numpy does."""
    a = int(a)
    if not -ndim <= a < ndim:
        raise np.exceptions.AxisError(a, ndim)
    return a % ndim


def _norm_axis(axis, ndim):
    """``axis`` as given to numpy -> ``None`` or a sorted tuple of non-negative ints."""
    if axis is None:
        return None
    if type(axis) is int:
        return (_axis(axis, ndim),)
    axes = (axis,) if isinstance(axis, np.integer) else axis
    try:
        return tuple(sorted(_axis(a, ndim) for a in axes))
    except TypeError:
        raise TypeError(f"axis must be an int or a tuple of ints, not {axis!r}") from None


def _resolve_shape(shape, size):
    """A reshape target as a tuple of ints, with a ``-1`` entry resolved against ``size``."""
    if type(shape) is int:
        shape = (shape,)
    elif isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    else:
        shape = tuple([int(n) for n in shape])
    if -1 in shape:
        known = math.prod([n for n in shape if n != -1])
        shape = tuple([size // known if known and n == -1 else n for n in shape])
    if math.prod(shape) != size:
        raise ValueError(f"cannot reshape an array of size {size} into shape {shape}")
    return shape


_REVERSED = [tuple(range(n))[::-1] for n in range(64)]  # the axes of .T by ndim
_TRANSPOSE = RULES["transpose"]


def _binary(op):
    rule = RULES[op]
    forward = OPERATORS.get(op, rule.forward)

    def method(self, other):  # apply without its walk over the operands
        x = self.value
        if type(other) is Tracked:
            if other._tape is not self._tape:
                return apply(op, (self, other))     # its error
            y = other.value
            return _record(self._tape, rule, op, (self._id, other._id), (x, y),
                           forward(x, y), EMPTY, (self, other))
        return _record(self._tape, rule, op, (self._id, None), (x, other), forward(x, other),
                       EMPTY, (self,))

    def reflected(self, other):
        if type(other) is Tracked:
            return apply(op, (other, self))
        x = self.value
        return _record(self._tape, rule, op, (None, self._id), (other, x), forward(other, x),
                       EMPTY, (self,))

    def inplace(self, other):
        return self._update(apply(op, (self, other)))

    method.__name__ = reflected.__name__ = inplace.__name__ = op
    BINARY[op] = method, reflected
    return method, reflected, inplace


BINARY = {}  # op -> the operator's (method, reflected method), for numpy_api's ufunc calls


class Tracked:
    """A numpy float or complex value recorded on a tape.

    ``x.value`` is the plain value.  Arithmetic operators, ``@``, indexing, the
    common array methods and numpy functions/ufuncs (through ``__array_ufunc__``
    and ``__array_function__``) are recorded; numpy functions without a rule raise
    ``UnsupportedError`` naming them.  Comparisons and ``float(x)`` give plain values.
    """

    __slots__ = ("value", "_tape", "_id", "_alias")
    __hash__ = None

    def __init__(self, value, tape):
        """Track ``value`` (a float or complex array or scalar) as a new leaf of ``tape``."""
        if not isinstance(value, (np.ndarray, np.generic)):
            value = np.asarray(value)[()]
        self.value = value
        self._tape = tape
        self._id = tape.leaf(value)
        self._alias = True  # the caller holds the array: never update it in place

    @property
    def id(self):
        """The id of the record that produced this value on its tape."""
        return self._id

    @property
    def tape(self):
        return self._tape

    # ------------------------------------------------------------ attributes
    # ``value`` is always a numpy array or scalar (``track`` and the rules make sure); the
    # getters are C functions (attrgetter), not Python ones: layers read them on every call
    shape = property(attrgetter("value.shape"))
    ndim = property(attrgetter("value.ndim"))
    size = property(attrgetter("value.size"))
    dtype = property(attrgetter("value.dtype"))
    @property
    def T(self):
        """The transpose (recorded; a view)."""
        v = self.value
        axes = _REVERSED[v.ndim]
        out = v.transpose(axes) if type(v) is np.ndarray else np.transpose(v, axes)
        return _record(self._tape, _TRANSPOSE, "transpose", (self._id,), (v,), out, {"axes": axes}, (self,))
    real = property(lambda self: apply1("real", self))
    imag = property(lambda self: apply1("imag", self))

    def __len__(self):
        return len(self.value)

    def __iter__(self):
        return (self[i] for i in range(len(self.value)))

    def __repr__(self):
        return f"Tracked({self.value!r}, id={self._id})"

    def __format__(self, spec):
        return format(self.value, spec)

    # conversions to Python values and plain results are reported to ``observe``
    def __float__(self):
        observe.to_python("float()")
        raise UnsupportedError(
            "float() of a tracked value (also math.* functions, which call it, and the "
            "assignment of a tracked scalar into a plain array, a[i] = x)",
            detail="it would drop the gradient; use numpy functions (np.sin(x) for "
                   "math.sin(x)), build arrays from tracked values with np.array([...]) or "
                   "np.stack, or use x.item() / tape.primal(x) to leave the gradient on purpose")

    def __complex__(self):
        observe.to_python("complex()")
        raise UnsupportedError(
            "complex() of a tracked value (also cmath.* functions, which call it)",
            detail="it would drop the gradient; use numpy functions, or x.item() to leave "
                   "the gradient on purpose")

    def __int__(self):
        observe.to_python("int()")
        return int(self.value)

    def __bool__(self):
        observe.to_python("bool()")
        return bool(self.value)

    def item(self, *args):
        """The value as a Python scalar (not tracked)."""
        observe.to_python(".item()")
        return self.value.item(*args)

    def tolist(self):
        observe.to_python(".tolist()")
        return np.asarray(self.value).tolist()

    def __array__(self, dtype=None, copy=None):
        raise UnsupportedError(
            "conversion of a tracked array to a plain numpy array (assignment into a plain "
            "array, a list holding tracked values given to a numpy function or ufunc, "
            "np.array & co. outside adcore.tape.gradient)",
            detail="it would drop the gradient; use numpy functions on the tracked array, build "
                   "arrays from tracked values with np.array([...]) or np.stack inside the "
                   "differentiated function, or adcore.tape.primal(x) to stop differentiating on purpose")

    # ------------------------------------------------------------ arithmetic
    __add__, __radd__, __iadd__ = _binary("add")
    __sub__, __rsub__, __isub__ = _binary("subtract")
    __mul__, __rmul__, __imul__ = _binary("multiply")
    __truediv__, __rtruediv__, __itruediv__ = _binary("divide")
    __pow__, __rpow__, __ipow__ = _binary("power")
    __matmul__, __rmatmul__, __imatmul__ = _binary("matmul")
    __mod__, __rmod__, __imod__ = _binary("remainder")

    def __floordiv__(self, other):   # piecewise constant: derivative 0
        return observe.plain(np.floor_divide(self.value, primal(other)), "floor_divide", (self, other))

    def __rfloordiv__(self, other):
        return observe.plain(np.floor_divide(primal(other), self.value), "floor_divide", (other, self))

    def __divmod__(self, other):
        return self // other, self % other

    def __rdivmod__(self, other):
        return other // self, other % self

    def __neg__(self):
        return apply1("negative", self)

    def __pos__(self):
        return apply1("positive", self)

    def __abs__(self):
        return apply1("absolute", self)

    # comparisons are not differentiable: plain boolean arrays
    def __lt__(self, other):
        return observe.plain(self.value < primal(other), "less", (self, other))

    def __le__(self, other):
        return observe.plain(self.value <= primal(other), "less_equal", (self, other))

    def __gt__(self, other):
        return observe.plain(self.value > primal(other), "greater", (self, other))

    def __ge__(self, other):
        return observe.plain(self.value >= primal(other), "greater_equal", (self, other))

    def __eq__(self, other):
        return observe.plain(self.value == primal(other), "equal", (self, other))

    def __ne__(self, other):
        return observe.plain(self.value != primal(other), "not_equal", (self, other))

    # ------------------------------------------------------------ in place
    def _update(self, new):
        """Make this handle refer to ``new`` (the functional result of an in-place op)."""
        if self._alias:
            raise UnsupportedError(
                "an in-place update of a tracked array that shares memory with another "
                "(an argument of the differentiated function, a view, or an array that has views)",
                detail="write `x = x + y` instead of `x += y`, or update a copy (`x = x.copy()`)")
        if new.shape != self.shape:
            raise ValueError(f"in-place update cannot change the shape {self.shape} to {new.shape}")
        if new.dtype != self.dtype:
            new = apply1("astype", new, {"dtype": self.dtype})
        self.value = new.value
        self._id = new._id
        return self

    def __setitem__(self, index, v):
        index = primal(index)
        self._update(apply("setitem", (self, v), {"index": index}))

    # ------------------------------------------------------------ indexing
    def __getitem__(self, index):
        index = primal(index)
        if type(index) is Tracked:
            raise TypeError("a tracked float array cannot be used as an index")
        return apply1("getitem", self, {"index": index})

    # ------------------------------------------------------------ methods
    def sum(self, axis=None, keepdims=False):
        return apply1("sum", self, {"axis": _norm_axis(axis, self.ndim), "keepdims": keepdims})

    def mean(self, axis=None, keepdims=False):
        return apply1("mean", self, {"axis": _norm_axis(axis, self.ndim), "keepdims": keepdims})

    def max(self, axis=None, keepdims=False):
        return apply1("max", self, {"axis": _norm_axis(axis, self.ndim), "keepdims": keepdims})

    def min(self, axis=None, keepdims=False):
        return apply1("min", self, {"axis": _norm_axis(axis, self.ndim), "keepdims": keepdims})

    def var(self, axis=None, ddof=0, keepdims=False):
        return np.var(self, axis=axis, ddof=ddof, keepdims=keepdims)

    def std(self, axis=None, ddof=0, keepdims=False):
        return np.std(self, axis=axis, ddof=ddof, keepdims=keepdims)

    def reshape(self, *shape, order="C"):
        if order != "C":
            raise UnsupportedError(f"reshape with order={order!r}", detail="only order='C' is recorded")
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = shape[0]
        return apply1("reshape", self, {"shape": _resolve_shape(shape, self.size)})

    def ravel(self):
        return self.reshape(-1)

    flatten = ravel

    def squeeze(self, axis=None):
        shape = self.shape
        axes = [a for a, n in enumerate(shape) if n == 1] if axis is None else _norm_axis(axis, len(shape))
        for a in axes:
            if shape[a] != 1:
                raise ValueError(f"cannot squeeze axis {a} of length {shape[a]}")
        return self.reshape(tuple(n for a, n in enumerate(shape) if a not in axes))

    def transpose(self, *axes):
        if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
            axes = axes[0]
        axes = None if not axes else tuple(_axis(a, self.ndim) for a in axes)
        if axes is None:
            axes = tuple(range(self.ndim))[::-1]
        return apply1("transpose", self, {"axes": axes})

    def swapaxes(self, a, b):
        axes = list(range(self.ndim))
        a, b = _axis(a, self.ndim), _axis(b, self.ndim)
        axes[a], axes[b] = axes[b], axes[a]
        return self.transpose(axes)

    def astype(self, dtype, copy=True):
        dtype = np.dtype(dtype)
        if dtype == self.dtype:
            return self.copy() if copy else self
        if dtype.kind not in "fc":
            return self.value.astype(dtype)  # integers, booleans: derivative 0
        return apply1("astype", self, {"dtype": dtype})

    def conj(self):
        return apply1("conj", self)

    conjugate = conj

    def copy(self):
        return apply1("copy", self)

    def dot(self, other):
        return np.dot(self, other)

    def clip(self, a_min=None, a_max=None):
        return apply("clip", (self, a_min, a_max))

    def take(self, indices, axis=None):
        return np.take(self, indices, axis=axis)

    def prod(self, axis=None, keepdims=False):
        return np.prod(self, axis=axis, keepdims=keepdims)

    def cumsum(self, axis=None):
        return np.cumsum(self, axis=axis)

    def cumprod(self, axis=None):
        return np.cumprod(self, axis=axis)

    def diagonal(self, offset=0, axis1=0, axis2=1):
        return np.diagonal(self, offset, axis1, axis2)

    def trace(self, offset=0, axis1=0, axis2=1):
        return np.trace(self, offset, axis1, axis2)

    def repeat(self, repeats, axis=None):
        return np.repeat(self, repeats, axis=axis)

    def round(self, decimals=0):
        return observe.plain(np.round(self.value, decimals), None, (self,))  # derivative 0

    def argmax(self, axis=None):
        return observe.plain(np.argmax(self.value, axis=axis), None, (self,))

    def argmin(self, axis=None):
        return observe.plain(np.argmin(self.value, axis=axis), None, (self,))

    # numpy protocols: __array_ufunc__ and __array_function__ are installed by numpy_api
