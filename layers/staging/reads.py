"""What a loss reads besides its arguments: inputs of the program, or guarded.

The compiled program replays one recording, so everything the loss's Python code reads
must either reach the program as an input, read at call time, or be checked by the guard
before each call.  ``Reads`` walks, once at staging time, what the loss can read: its
closure cells, the globals its code (and nested code) names, its default arguments, and
transitively the functions, objects (their ``__dict__`` and ``__slots__``), classes
(methods, properties, class attributes) and containers found there.  Each value found:

- float32/float64 arrays and float scalars become program inputs: while the loss is
  traced they are swapped for tracked leaves (so conversions, views and arithmetic on
  them are recorded and recomputed per call), and the guard re-reads them on each call;
- other arrays (integer, bool, ...) are compared by content with a copy;
- ints, strings and other plain values are compared by value;
- functions, classes and objects are checked by type (and code), and walked;
- library code (numpy, the standard library, adcore, layers, ...) is checked by identity
  and not walked.  Anything staging cannot see into (an object without ``__dict__``, a
  random-number generator, a bound method of such an object) raises ``HiddenStateError``.

Not seen: names looked up dynamically (``globals()[...]``, ``getattr(obj, name)`` with a
computed name, ``eval``), and state inside library objects.
"""
import contextlib
import functools
import sys
import types

import numba
import numpy as np

from adcore.backend.code_reads import global_reads, library
from adcore.errors import UnsupportedError
from adcore.tape.tracked import Tracked

_RANDOM = ("numpy.random", "random")
_SCALARS = (bool, int, complex, str, bytes, type(None), np.integer, np.bool_, np.complexfloating)
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_IMMUTABLE = (np.ufunc, np.dtype, numba.core.dispatcher.Dispatcher, slice, range,
              type(Ellipsis), type(NotImplemented), types.CodeType, types.MethodDescriptorType,
              types.WrapperDescriptorType, types.GetSetDescriptorType,
              types.MemberDescriptorType, types.ClassMethodDescriptorType)
_CLASS_METADATA = {"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__",
                   "__slots__", "__annotations__", "__dataclass_fields__",
                   "__dataclass_params__", "__match_args__", "_abc_impl"}
_MAX_VALUES = 20000
_ARGUMENT = object()


class HiddenStateError(UnsupportedError):
    """The loss reads something whose changes staging cannot see."""

    def __init__(self, where, why):
        super().__init__(
            f"a loss that reads {where}",
            detail=f"{why}. The compiled path (Duplicated) replays one recording and must "
                   "see every change of what the loss reads; pass such values as "
                   "arguments, or pass the plain model to use the tape engine")


def _equal(x, ref):
    """``x`` is an array of ``ref``'s type, shape and dtype with the same contents."""
    return (type(x) is type(ref) and x.shape == ref.shape and x.dtype == ref.dtype and
            np.array_equal(x, ref))


def _contiguous(x):
    """``x``, or a C-contiguous copy unless it is C-contiguous, aligned and writeable
    (``flags.carray``: one flags object instead of two)."""
    return x if x.flags.carray else np.array(x, order="C")


class Reads:
    """Walks what a loss reads, writing its checks into the guard writer ``w``.

    ``inputs`` lists ``(gather, value, tracked)`` per float input found (``gather`` the
    guard's expression for it); ``substituted()`` puts the tracked leaves in place while
    the loss is traced.  With ``float_inputs=False`` float scalars are compared by value
    instead (for losses that use them in Python control flow)."""

    def __init__(self, w, tape, float_inputs=True):
        self.w, self.tape, self.float_inputs = w, tape, float_inputs
        w.env.update(_equal=_equal, FunctionType=types.FunctionType)
        self.seen = {}          # id(value) -> (guard variable, replacement or _ARGUMENT)
        self.places = {}        # (id(holder), key) of a location walked -> its refusals
        self.beneath = {}       # id(value) walked -> its refusals
        self.classes = set()
        self.swaps = []         # (setter, original, replacement)
        self.inputs = []
        self.count = 0
        self.code = None        # the code whose reads are being walked (None: the arguments)
        self.refused = []       # (code, error): raised when that code runs while tracing

    def argument(self, var, value):
        """Mark an array of an argument: a read reaching it again is refused."""
        self.seen[id(value)] = (var, _ARGUMENT)

    @contextlib.contextmanager
    def substituted(self):
        """While the loss is traced: put the tracked leaves in place of the float values
        they stand for, and note which functions run; then raise the refusal of anything
        unseeable that was reached from a function that ran (or from the arguments)."""
        done, ran, profile = [], set(), sys.getprofile()

        def watch(frame, event, arg):
            if event == "call":
                ran.add(frame.f_code)

        try:
            for setter, original, replacement in self.swaps:
                setter(replacement)
                done.append((setter, original))
            sys.setprofile(watch)
            yield
        finally:
            sys.setprofile(profile)
            for setter, original in reversed(done):
                setter(original)
        for code, error in self.refused:
            if code is None or code in ran:
                raise error

    def refuse(self, v, var, where, why):
        """``v`` at ``where`` cannot be seen into: refused if the code reaching it runs
        (see ``substituted``), else only checked by identity (when ``var`` is given)."""
        self.refused.append((self.code, HiddenStateError(where, why)))
        if var is not None:
            self.w.check(f"{var} is {self.w.const(v)}")

    def _found_beneath(self, start):
        """The refusals found since ``start`` by the current code (not nested functions):
        a later visit of the same value from other code is refused with that code too."""
        return [e for c, e in self.refused[start:] if c is self.code]

    def _revisit(self, errors):
        self.refused += [(self.code, e) for e in errors]

    # -- locations -------------------------------------------------------------------
    def item(self, holder, key, var, where):
        """Walk ``holder[key]`` (a dict or list entry, an attribute or a cell through
        ``_Attributes``), read by the guard as ``var``; each place is walked once."""
        place = (id(getattr(holder, "obj", holder)), key if isinstance(key, (str, int)) else id(key))
        if place in self.places:
            self._revisit(self.places[place])
            return
        self.places[place], start = [], len(self.refused)
        original = holder[key]
        rep = self.value(original, self.w.let(var), where)
        self.places[place] = self._found_beneath(start)
        if rep is not None:
            self.swaps.append((functools.partial(holder.__setitem__, key), original, rep))

    def value(self, v, var, where):
        """Check ``var`` holds a value like ``v`` and walk it; returns the replacement
        for an immutable value holding tracked leaves (a float, a tuple), else ``None``."""
        self.count += 1
        if self.count > _MAX_VALUES:
            raise HiddenStateError(where, f"the loss reaches more than {_MAX_VALUES} values")
        w = self.w
        t = type(v)
        if t in (float, np.float32, np.float64) and self.float_inputs:
            w.check(f"type({var}) is {w.const(t)}")
            return self._input(var, v, np.float64(v) if t is float else v)
        if isinstance(v, _SCALARS + (float, np.floating)):
            w.same(var, v)
            return None
        if id(v) in self.seen:
            first, rep = self.seen[id(v)]
            if rep is _ARGUMENT:
                self.refuse(v, var, where, "it is also an argument's array; use the argument")
                return None
            w.check(f"{var} is {first}")
            self._revisit(self.beneath.get(id(v), ()))
            return rep
        self.seen[id(v)], start = (var, None), len(self.refused)
        rep = self._compound(v, var, where)
        self.seen[id(v)], self.beneath[id(v)] = (var, rep), self._found_beneath(start)
        return rep

    def _input(self, gather, sample, value):
        tracked = Tracked(value, self.tape)
        self.inputs.append((gather, sample, tracked))
        return tracked

    def _compound(self, v, var, where):
        w, t = self.w, type(v)
        if t is np.ndarray and v.dtype in _FLOATS:
            w.array(var, v, skippable=False)
            return self._input(f"_contiguous({var})", v, v)
        if isinstance(v, np.ndarray):
            if v.dtype.hasobject:
                self.refuse(v, var, where, "it is an object array")
                return None
            w.check(f"_equal({var}, {w.const(v.copy())})")
            return None
        if t in (tuple, list) or isinstance(v, tuple):
            return self._sequence(v, var, where)
        if t in (set, frozenset) and all(isinstance(x, _SCALARS + (float,)) for x in v):
            w.check(f"type({var}) is {w.const(t)} and {var} == {w.const(frozenset(v))}")
            return None
        if t is dict:
            w.check(f"type({var}) is dict and tuple({var}) == {w.const(tuple(v))}")
            for k in v:
                self.item(v, k, f"{var}[{w.const(k)}]", f"{where}[{k!r}]")
            return None
        if t is types.FunctionType:
            self.function(v, var, where)
            return None
        if isinstance(v, type):
            w.same(var, v)
            self.cls(v)
            return None
        if t is types.ModuleType or isinstance(v, _IMMUTABLE) or \
                (t is types.BuiltinFunctionType and isinstance(v.__self__, (types.ModuleType,
                                                                            type(None)))):
            w.same(var, v)
            return None
        w.check(f"type({var}) is {w.const(t)}")
        if t is types.MethodType or t is types.BuiltinMethodType:
            if isinstance(v.__self__, np.ndarray):
                self.refuse(v, var, where, "it is a method bound to an array")
                return None
            self.value(v.__self__, w.let(f"{var}.__self__"), f"{where}.__self__")
            if t is types.MethodType:
                self.value(v.__func__, w.let(f"{var}.__func__"), f"{where}.__func__")
            return None
        if t is functools.partial:
            return self._partial(v, var, where)
        if t in (staticmethod, classmethod):
            self.value(v.__func__, w.let(f"{var}.__func__"), f"{where}.__func__")
            return None
        if t is property:
            for name in ("fget", "fset", "fdel"):
                self.value(getattr(v, name), w.let(f"{var}.{name}"), f"{where}.{name}")
            return None
        return self._object(v, var, where)

    def _sequence(self, v, var, where):
        w, t = self.w, type(v)
        w.check(f"type({var}) is {w.const(t)} and len({var}) == {len(v)}")
        reps = []
        for k, x in enumerate(v):
            if t is list:
                self.item(v, k, f"{var}[{k}]", f"{where}[{k}]")
            else:
                reps.append(self.value(x, w.let(f"{var}[{k}]"), f"{where}[{k}]"))
        if all(r is None for r in reps):
            return None
        items = [x if r is None else r for x, r in zip(v, reps)]
        return t(*items) if hasattr(v, "_fields") else t(items)

    def _partial(self, v, var, where):
        func, args, keywords, state = v.__reduce__()[2]
        self.value(func, self.w.let(f"{var}.func"), f"{where}.func")
        rep_args = self.value(args, self.w.let(f"{var}.args"), f"{where}.args")
        self.value(keywords or {}, self.w.let(f"{var}.keywords"), f"{where}.keywords")
        if rep_args is not None:
            self.swaps.append((v.__setstate__, (func, args, keywords, state),
                               (func, rep_args, keywords, state)))
        return None

    def _object(self, v, var, where):
        t, w = type(v), self.w
        d = getattr(v, "__dict__", None)
        slots = [s for k in t.__mro__ for s in k.__dict__.get("__slots__", ())
                 if s not in ("__dict__", "__weakref__") and hasattr(v, s)]
        if type(d) is not dict and not slots:
            self.refuse(v, var, where, f"it is a {t.__module__}.{t.__qualname__} object, "
                                       "whose state staging cannot see")
            return None
        if not library(t):
            self.cls(t)
            if type(d) is dict:     # a new attribute may shadow a class attribute
                w.check(f"tuple({var}.__dict__) == {w.const(tuple(d))}")
        for s in slots:
            self.item(_Attributes(v), s, f"{var}.{s}", f"{where}.{s}")
        for k in d if type(d) is dict else ():
            self.item(d, k, f"{var}.__dict__[{k!r}]", f"{where}.{k}")
        return None

    # -- functions and classes ---------------------------------------------------------
    def function(self, f, var, where):
        """Check ``var`` is a function with ``f``'s code and walk what it reads."""
        w = self.w
        if library(f):
            w.same(var, f)
            return
        outer, self.code = self.code, f.__code__
        try:
            self._function(f, var, where)
        finally:
            self.code = outer

    def _function(self, f, var, where):
        w = self.w
        w.check(f"type({var}) is FunctionType and {var}.__code__ is {w.const(f.__code__)}")
        g = f.__globals__
        gv = w.const(g)
        w.check(f"{var}.__globals__ is {gv}")
        for name, chains in sorted(global_reads(f.__code__).items()):
            if name not in g:
                w.check(f"{name!r} not in {gv}")
                continue
            self.item(g, name, f"{gv}[{name!r}]", name)
            self._module_chains(g[name], chains, name)
        for k, (name, cell) in enumerate(zip(f.__code__.co_freevars, f.__closure__ or ())):
            try:
                cell.cell_contents
            except ValueError:
                continue
            self.item(_Cell(cell), "cell_contents", f"{var}.__closure__[{k}].cell_contents",
                      name)
        for attr in ("__defaults__", "__kwdefaults__"):
            d = getattr(f, attr)
            if not d:
                w.check(f"not {var}.{attr}")
                continue
            self.item(_Attributes(f), attr, f"{var}.{attr}", f"{where} {attr}")

    def _module_chains(self, m, chains, where):
        """Attributes read from module ``m``: walked for user modules; for libraries only
        checked for hidden state (random numbers, methods of hidden objects)."""
        if not isinstance(m, types.ModuleType):
            return
        for chain in chains:
            if not chain:
                continue
            if not library(m):
                self.item(m.__dict__, chain[0], f"{self.w.const(m.__dict__)}[{chain[0]!r}]",
                          f"{where}.{chain[0]}")
                continue
            v = m
            for k, attr in enumerate(chain):
                if isinstance(v, types.ModuleType) and v.__name__ in _RANDOM:
                    self.refuse(v, None, ".".join((where,) + chain[:k + 1]),
                                "random numbers would be replayed, not drawn anew")
                    break
                v = getattr(v, attr, None)
            bound = getattr(v, "__self__", None)
            if bound is not None and not isinstance(bound, (types.ModuleType, type)):
                self.refuse(v, None, ".".join((where,) + chain), "it is a method of an "
                            "object whose state staging cannot see")

    def cls(self, c):
        """Walk the methods and class attributes of user class ``c`` and its user bases."""
        for k in c.__mro__:
            if k in self.classes or library(k):
                continue
            self.classes.add(k)
            kv = self.w.const(k)
            for name in k.__dict__:
                if name not in _CLASS_METADATA:
                    self.item(_Attributes(k), name, f"{kv}.__dict__[{name!r}]",
                              f"{k.__qualname__}.{name}")


class _Attributes:
    """Attributes of ``obj`` as items (for ``Reads.item``); read through ``__dict__`` for
    classes (no descriptors), else with ``getattr``."""

    def __init__(self, obj):
        self.obj = obj

    def __getitem__(self, name):
        return self.obj.__dict__[name] if isinstance(self.obj, type) else \
            getattr(self.obj, name)

    def __setitem__(self, name, value):
        setattr(self.obj, name, value)


class _Cell(_Attributes):
    """A closure cell as an item holder: ``holder["cell_contents"]``."""

    def __getitem__(self, name):
        return self.obj.cell_contents

    def __setitem__(self, name, value):
        self.obj.cell_contents = value
