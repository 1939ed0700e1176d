"""``update(state, dup)`` as one native call.

For a ``Duplicated`` model ``update`` keeps a ``Plan`` on the state tree: a generated
Python guard that walks the model, its shadow and the state as ``optim.state._collect``
does and checks each piece is the object the plan was built for (the same arrays,
``Leaf``, rule, rule attributes and rule state, not frozen), and one njit function that
runs every leaf's ``rule.steps`` kernels on a scratch copy of the gradient (the shadow
keeps the gradient) and subtracts the step. Arrays reach it as one array of addresses (the
call layer's ``adcore.calling.addresses``), hyperparameters as one float64 array, so after
``adjust`` only a new plan's guard and arrays are built; the njit function is compiled
once per structure (kernels, sizes, dtypes). Anything else (tied weights, frozen leaves, a
gradient of another dtype or layout, a rule without ``steps``) keeps the Python path.
"""
import copy
import weakref

import numba
import numpy as np

from adcore.calling.fastcall import FixedArray, numba_caller
from adcore.calling.guard_builder import GuardBuilder
from adcore.numba_abi import native_function
from adcore.tree import child, children, is_float_array, is_node

from adcore.calling.addresses import address, view
from .leaf import Leaf

_natives = {}   # (source, kernels) -> the compiled njit update
_plans = {}     # id(state) -> (weak reference to the state, its plan or None)


class NoPlan(Exception):
    """The state or model has something the plan does not cover."""


def _plain(a):
    return type(a) is np.ndarray and a.flags.c_contiguous and a.flags.writeable


class Plan:
    """The guard ``ok(state, model, grad)`` and ``run()`` for one state; see the module doc."""

    def __init__(self, state, model, grad):
        self.guard = GuardBuilder({"ndarray": np.ndarray}, fail="return False")
        self.body, self.arrays, self.hyper, self.checks = [], [], [], []
        self.kernels, self.rules, self.leaves = {}, {}, set()
        self._walk("s", "x", "g", state, model, grad)
        self.ok = self.guard.compile("ok", ("s", "x", "g"), ["return True"],
                                     (AttributeError, KeyError, IndexError, TypeError))
        self.native = self._native()
        self.addresses = np.array([address(a) for a in self.arrays], np.int64)
        self.hyperparameters = np.array(self.hyper + [0.0], np.float64)   # last: a failed check's value
        self._call = self._builtin()

    def run(self):
        """Update in place and return True; False (having touched nothing) when an array
        of the plan was changed in place (its dtype, shape, flags or memory); raises
        ``FloatingPointError`` as ``Rule.apply`` does."""
        k = self._call()                                     # an int: no tuple to box
        if k is None:
            return False
        if k >= 0:
            raise FloatingPointError(f"{self.checks[k]} is {self.hyperparameters[-1]}")
        return True

    def _builtin(self):
        """``native(addresses, hyperparameters)`` as a builtin of no arguments (both arrays
        compiled in, each array the addresses point at checked; :mod:`adcore.calling.fastcall`)
        returning None for a changed array, or the njit call when it cannot be made."""
        argtypes = (numba.typeof(self.addresses), numba.typeof(self.hyperparameters))
        address, restype = native_function(self.native, argtypes)
        fast = numba_caller(address, argtypes, restype,
                            [FixedArray(self.addresses), FixedArray(self.hyperparameters)],
                            watched=self.arrays)
        if fast is None:
            now = [(a, a.dtype, a.shape) for a in self.arrays]
            return lambda: self.native(self.addresses, self.hyperparameters) if all(
                a.dtype is t and a.shape == n and _plain(a) for a, t, n in now) else None

        def call():
            k = fast.call()
            return k if k is not None else fast.miss()
        return call

    # -- the guard (:mod:`adcore.calling.guard_builder`) ----------------------------
    def _container(self, var, value):
        """Check ``var`` is a container like ``value``; the accessor of its children."""
        t = self.guard.const(type(value), 'T')
        if is_node(value):
            self.guard.check(f"type({var}) is {t}")
            return lambda k: f"{var}.{k}"
        # a dict's keys: each one the plan reads is looked up (a KeyError fails the guard);
        # one it never reads may differ, as it may for the Python path
        self.guard.check(f"type({var}) is {t} and len({var}) == {len(value)}")
        return lambda k: f"{var}[{k!r}]"

    def _walk(self, s, x, g, sv, xv, gv):
        if is_float_array(xv):
            if gv is None:
                self.guard.check(f"{g} is None")
            else:
                self._leaf(s, x, g, sv, xv, gv)
            return
        if not (is_node(xv) or isinstance(xv, (dict, tuple, list))):
            self.guard.check(f"{x} is None" if xv is None else
                             f"type({x}) is {self.guard.const(type(xv), 'T')} and not "
                             f"(isinstance({x}, ndarray) and {x}.dtype.kind == 'f')")
            return
        getx = self._container(x, xv)
        gets = self._container(s, sv) if sv is not None else None
        getg = self._container(g, gv) if gv is not None else None
        if sv is None:
            self.guard.check(f"{s} is None")
        if gv is None:
            self.guard.check(f"{g} is None")
        for k, c in children(xv):
            self._walk(self.guard.let(gets(k)) if gets else "None", self.guard.let(getx(k)),
                       self.guard.let(getg(k)) if getg else "None", child(sv, k), c, child(gv, k))

    # -- one array --------------------------------------------------------------------
    def _leaf(self, s, x, g, leaf, xv, gv):
        if not (type(leaf) is Leaf and not leaf.frozen and id(leaf) not in self.leaves
                and _plain(xv) and _plain(gv) and gv.dtype == xv.dtype
                and gv.shape == xv.shape):
            raise NoPlan
        self.leaves.add(id(leaf))
        try:
            steps = leaf.rule.steps(leaf.state)
        except NotImplementedError:
            raise NoPlan from None
        if id(leaf.rule) not in self.rules:   # a deep copy: rules inside a chain are compared
            self.rules[id(leaf.rule)] = rule = self.guard.const(leaf.rule, 'R')
            self.guard.check(f"{rule}.__dict__ == {self.guard.const(copy.deepcopy(leaf.rule.__dict__), 'D')}")
        rule = self.rules[id(leaf.rule)]
        self.guard.check(f"{s} is {self.guard.const(leaf, 'L')} and {s}.frozen is False and "
                         f"{s}.rule is {rule} and {s}.state is {self.guard.const(leaf.state, 'S')} and "
                         f"{x} is {self.guard.const(xv, 'X')} and {g} is {self.guard.const(gv, 'G')}")
        # (a dtype or shape set in place: the call checks each array, see ``_builtin``)
        xa, ga = self._array(xv), self._array(gv)
        d = f"d{len(self.arrays)}"
        self.body.append(f"    {d} = {ga}.copy()")
        for st in steps:
            if not all(_plain(a) for a in st.state):
                raise NoPlan
            args = [xa, d] + [self._array(a) for a in st.state]
            args += [f"h[{len(self.hyper) + k}]" for k in range(len(st.hyper))]
            self.hyper += [float(v) for v in st.hyper]
            kernel = self.kernels.setdefault(st.kernel, f"K{len(self.kernels)}")
            call = f"{kernel}({', '.join(args)})"
            if st.check:
                self.checks.append(st.check)
                self.body.append(f"    c = {call}\n    if not np.isfinite(c):\n"
                                 f"        h[h.size - 1] = c\n        return {len(self.checks) - 1}")
            else:
                self.body.append(f"    {call}")
        self.body.append(f"    for i in range({xv.size}):\n        {xa}[i] -= {d}[i]")

    def _array(self, a):
        """The njit expression of array ``a`` (flat), read from the addresses."""
        self.arrays.append(a)
        return f"view(p[{len(self.arrays) - 1}], {a.size}, np.{a.dtype.name})"

    def _native(self):
        source = "def update(p, h):\n" + "\n".join(self.body) + "\n    return -1\n"
        kernels = tuple(self.kernels)
        key = (source, kernels)
        if key not in _natives:
            scope = {"np": np, "view": view}
            scope.update((name, k) for k, name in self.kernels.items())
            exec(source, scope)
            _natives[key] = numba.njit(cache=False)(scope["update"])
        return _natives[key]


def forget(state):
    """Drop the plan of ``state`` (its arrays changed in place)."""
    _plans.pop(id(state), None)


def plan_for(state, model, grad):
    """The state's plan when its guard accepts the call, else a new one; ``None`` when
    the call is not covered."""
    key = id(state)
    ref, plan = _plans.get(key, (None, None))
    if ref is not None and ref() is state and plan is not None and plan.ok(state, model, grad):
        return plan
    try:
        plan = Plan(state, model, grad)
    except NoPlan:
        plan = None
    _plans[key] = (weakref.ref(state, lambda _: _plans.pop(key, None)), plan)
    return plan
