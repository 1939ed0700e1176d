"""``train`` with a ``Duplicated`` model as one native loop.

When every data item has the same shapes, the inputs are stacked along a new first
axis and a generated ``@njit`` loop runs, per item: zero the shadows (as
``program.ZEROING`` says), call adcore's gradient (the compiled program's stub), stop
on a non-finite loss, and apply the optimiser's kernels (``rule.steps``, optim's public
API) to each parameter, stopping with a step's ``check`` message when the value it
checks is not finite.  Python runs once per call, stacking the items into buffers kept
from call to call (for the very item objects of the last call, only their arrays are
copied again); every array reaches the loop as one array of addresses
(``program._Caller``).
``compiled_train`` returns ``None`` when the data or the optimiser do not fit this
shape (then ``train`` steps through the items in Python).
"""
import copy
import math
import operator

import numba
import numpy as np

import optim
from adcore.custom_rules import carray
from adcore.disk_cache import CachedFunction
from adcore.tree import child

from .lower import Kind
from .program import Zeroing, _Caller, lookup


_MAX_PLANS = 8      # per compiled program: the optimiser states trained with it


def _items(data):
    return data if isinstance(data, (list, tuple)) else list(data)


def _columns(staged, items, n_args):
    """``{driver position: the items' values of that argument}`` for the arguments that
    vary with the item (``staged.varying``); ``None`` when the items differ in structure,
    or an argument that does not vary is not the same object in every item."""
    if type(items[0]) is tuple:
        if set(map(type, items)) != {tuple}:
            return None
        try:
            cols = list(zip(*items, strict=True))    # ValueError: tuples of several lengths
        except ValueError:
            return None
        if len(cols) != n_args - 1:
            return None
    elif n_args == 2:
        cols = [items]
    else:
        return None
    varying = staged.varying
    if varying is None:
        return None
    for i, col in enumerate(cols):
        if i not in varying.values() and len(set(map(id, col))) != 1:
            return None
    return {k: cols[i] for k, i in varying.items()}


_IMMUTABLE = (float, int, np.number, np.bool_)


class _Stack:
    """Buffers holding the varying arguments of ``n`` items stacked along a new first
    axis (``(n, size)`` for arrays, ``(n,)`` for scalars), kept from call to call so that
    the loop takes them as addresses.  ``fill`` copies the items' values in (``False``
    when one differs in type, shape or dtype from the first) and keeps the items;
    ``refresh`` copies again the arrays of those very items (a tuple cannot change, nor
    can a scalar; an array can, in place, and is checked again)."""

    def __init__(self, n, samples):
        self.n, self.items, self.refill = n, None, {}
        self.buffers = {k: np.empty((n, s.size), s.dtype) if isinstance(s, np.ndarray)
                        else np.empty(n, np.result_type(s)) for k, s in samples.items()}

    def holds(self, items):
        """Whether ``items`` are the very objects of the last ``fill``."""
        return self.items is not None and len(items) == len(self.items) and \
            all(map(operator.is_, items, self.items))

    def fill(self, items, columns):
        self.items = None
        if not all(_fill(self.buffers[k], col) for k, col in columns.items()):
            return False
        self.items = list(items)
        self.refill = {k: col for k, col in columns.items() if not isinstance(col[0], _IMMUTABLE)}
        return True

    def refresh(self):
        if all(_fill(self.buffers[k], col, typed=True) for k, col in self.refill.items()):
            return True
        self.items = None
        return False


def _fill(buf, col, typed=False):
    """Copy ``col`` (one argument of every item) into ``buf``; ``False`` when the values
    differ from the first in type (unless ``typed``: known to be of one type), shape or
    dtype."""
    first = col[0]
    if not typed and set(map(type, col)) != {type(first)}:
        return False
    if not isinstance(first, np.ndarray):
        buf[:] = col
        return True
    if first.ndim == 0:
        if {a.dtype for a in col} != {first.dtype} or {a.ndim for a in col} != {0}:
            return False
        buf.reshape(-1)[:] = col
        return True
    if set(map(len, col)) != {len(first)}:   # with the same len and concatenate's
        return False                         # checks, the shapes are the first's
    try:
        np.concatenate(col, out=buf.reshape((-1,) + first.shape[1:]), casting="no")
    except (TypeError, ValueError):      # another dtype or shape
        return False
    return True


def _groups(staged, state):
    """``[(leaf, [driver positions of its parameters])]`` for every leaf of ``state``
    (frozen ones too) holding parameters of the model."""
    groups = {}
    for k, (kind, j, path, sample) in enumerate(staged.slots):
        if kind != Kind.PARAM or j != 0:
            continue
        leaf = state
        for key in path:
            leaf = child(leaf, key)
        if not isinstance(leaf, optim.Leaf):
            raise TypeError(f"optimiser state at {'.'.join(map(str, path))} is {leaf!r}, "
                            "not a Leaf; was the state made by setup for this model?")
        groups.setdefault(id(leaf), (leaf, []))[1].append(k)
    return list(groups.values())


class _Plan:
    """What ``train`` calls the loop with for one optimiser state, kept between calls while
    the state's leaves keep their rules (and the rules their hyperparameters), state
    arrays and frozen flags: the loop (through a ``program._Caller``), the optimiser's
    state arrays and hyperparameters, the messages of the steps' checks (``Step.check``),
    the gradient workspaces and the stacked items (a ``_Stack``)."""

    def __init__(self, staged, state, samples, dargs):
        self.state = state
        self.groups = _groups(staged, state)
        self.marks = [(leaf, leaf.rule, copy.deepcopy(leaf.rule.__dict__), leaf.state,
                       leaf.frozen) for leaf, _ in self.groups]
        plan, states, hyper = [], [], []
        for leaf, positions in self.groups:
            if leaf.frozen:
                continue
            steps = leaf.rule.steps(leaf.state)     # NotImplementedError: no native steps
            plan.append((positions, steps))
            for st in steps:
                states.extend(st.state)
                hyper.extend(st.hyper)
        self.checks = [st.check for _, steps in plan for st in steps if st.check]
        grads = [np.empty(dargs[pos[0]].size, dargs[pos[0]].dtype) for pos, _ in plan]
        self.tail = (*grads, *states, np.array(hyper, dtype=np.float64))
        self.samples, self.stack, self.loss_buffer = samples, None, np.empty(0)
        values = [samples.get(k, v) for k, v in enumerate(dargs)] + list(self.tail)
        values.append(np.empty(0))   # the losses
        fixed = [k for k, v in enumerate(values) if isinstance(v, np.ndarray) or k in samples]
        source = _loop_source(staged, samples, plan, {k: values[k] for k in fixed})
        kernels = tuple(st.kernel for _, steps in plan for st in steps)
        loop = staged.loops.get((source, kernels))
        if loop is None:
            loop = staged.loops[source, kernels] = _compile_loop(staged, source, plan)
        self.call = _Caller(loop, fixed, len(values), lead=("total", "n"))

    def current(self, state):
        return state is self.state and all(
            leaf.rule is rule and rule.__dict__ == was and leaf.state is st and
            leaf.frozen == frozen for leaf, rule, was, st, frozen in self.marks)

    def stacked(self, staged, items, n_args):
        """The ``_Stack`` holding the current values of ``items`` (of ``n_args`` arguments
        with the model), or ``None`` when they cannot be stacked (``_columns``, ``_fill``)."""
        stack = self.stack
        if stack is not None and stack.holds(items) and stack.refresh():
            return stack
        columns = _columns(staged, items, n_args)
        if columns is None:
            return None
        if stack is None or stack.n != len(items):
            stack = self.stack = _Stack(len(items), self.samples)
        return stack if stack.fill(items, columns) else None

    def losses(self, total):
        """The buffer for the losses of ``total`` steps."""
        if self.loss_buffer.size != total:
            self.loss_buffer = np.empty(total)
        return self.loss_buffer


def _loop_source(staged, samples, plan, fixed):
    """Source of ``loop(total, n, table, *others)`` over the arguments
    ``(*args, *shadows, *grads, *states, hyper, losses)``: those at the positions of
    ``fixed`` (``{position: sample}``) come as the address ``table`` of an int64 array of
    their addresses (``program._Caller``), the others in order.  It runs ``total``
    training steps over the ``n`` items in turn (the per-item inputs, at the positions in
    ``samples``, are the rows of a ``_Stack``, as are the losses) and returns ``(steps
    done, code)``: 0 done, 1 a non-finite loss, ``2 + k`` the ``k``-th checked step's value
    not finite."""
    na, nd = len(staged.flat), len(staged.dflat)
    ns = sum(len(st.state) for _, steps in plan for st in steps)
    names = ([f"a{k}" for k in range(na)] + [f"d{k}" for k in range(nd)] +
             [f"g{k}" for k in range(len(plan))] + [f"s{k}" for k in range(ns)] +
             ["hyper", "losses"])
    flat = list(staged.flat) + list(staged.dflat)
    lines = [f"def loop(total, n, table"
             f"{''.join(', ' + x for k, x in enumerate(names) if k not in fixed)}):",
             f"    addresses = carray(table, ({len(fixed)},), np.int64)"]
    flat_of = {}          # a shadow's name -> the name of a 1-D view of it
    for q, (k, sample) in enumerate(sorted(fixed.items())):
        if k in samples:
            shape = f"(n, {sample.size})" if isinstance(sample, np.ndarray) else "(n,)"
            dtype = np.result_type(sample)
        elif k == len(names) - 1:     # the losses
            shape, dtype = "(total,)", np.dtype(np.float64)
        else:
            dims = (sample.size,) if k >= len(flat) or flat[k] else sample.shape
            shape, dtype = repr(dims), sample.dtype
            if na <= k < na + nd:        # a shadow, zeroed through a 1-D view of it
                flat_of[names[k]] = names[k] if len(dims) == 1 else f"{names[k]}f"
                if len(dims) != 1:
                    lines.append(f"    {names[k]}f = carray(addresses[{q}], ({sample.size},), np.{dtype.name})")
        lines.append(f"    {names[k]} = carray(addresses[{q}], {shape}, np.{dtype.name})")
    a, d = names[:na], names[na:na + nd]
    g, s = names[na + nd:na + nd + len(plan)], names[-2 - ns:-2]
    call = []
    for k in range(na):
        if k in samples:
            call.append(f"{a[k]}[row, :]" if isinstance(samples[k], np.ndarray) else f"{a[k]}[row]")
        else:
            call.append(a[k])
    call += d
    # With no checked step, the parameters' shadows are zeroed as they are read (but for
    # the last step's, which the shadow keeps as after a gradient call), else before each step.
    read = set() if any(st.check for _, steps in plan for st in steps) else \
        {staged.shadow_of.index(pos) for positions, _ in plan for pos in positions}
    lines += [f"    _zeroed({flat_of[d[q]]})" for q in sorted(read)]
    lines += ["    for it in range(total):", "        row = it % n", "        last = it + 1 == total"]
    lines += [f"        _zeroed({flat_of[x]})"
              for q, (x, z) in enumerate(zip(d, staged.zeroing)) if z != Zeroing.NEVER and q not in read]
    lines += [f"        l = stub({', '.join(call)})[0]",
              "        losses[it] = l",
              "        if not math.isfinite(l):",
              "            return it, 1"]
    si, hi, checks = 0, 0, 0
    for q, (positions, steps) in enumerate(plan):
        ds = [d[staged.shadow_of.index(pos)] for pos in positions]
        p = a[positions[0]]
        zero = "not last" if read else "False"
        lines += [f"        _gathered({g[q]}, {ds[0]}, {zero})"]
        lines += [f"        _added({g[q]}, {x}, {zero})" for x in ds[1:]]
        for k, st in enumerate(steps):
            args = [s[si + m] for m in range(len(st.state))]
            args += [f"hyper[{hi + m}]" for m in range(len(st.hyper))]
            si, hi = si + len(st.state), hi + len(st.hyper)
            call = f"K{q}_{k}({p}, {g[q]}{''.join(', ' + x for x in args)})"
            if st.check:   # code 2 + k: the k-th check failed
                lines += [f"        if not math.isfinite({call}):",
                          f"            return it, {2 + checks}"]
                checks += 1
            else:
                lines.append(f"        {call}")
        lines.append(f"        _descended({p}, {g[q]})")
    lines.append("    return total, 0")
    return "\n".join(lines) + "\n"


# The loop's array updates, each an njit function of its own kept in Numba's cache: a loop
# written out in the generated source costs Numba a typing and lowering at every use.
_HELPER = dict(cache=True, no_cpython_wrapper=True, no_cfunc_wrapper=True, error_model="numpy")


@numba.njit(**_HELPER)
def _zeroed(x):
    for i in range(x.size):
        x[i] = 0


@numba.njit(**_HELPER)
def _gathered(g, d, zero):
    """``g = d``, zeroing ``d`` when ``zero``."""
    for i in range(g.size):
        g[i] = d[i]
        if zero:
            d[i] = 0


@numba.njit(**_HELPER)
def _added(g, d, zero):
    """``g += d``, zeroing ``d`` when ``zero``."""
    for i in range(g.size):
        g[i] += d[i]
        if zero:
            d[i] = 0


@numba.njit(**_HELPER)
def _descended(x, g):
    """``x -= g``."""
    for i in range(x.size):
        x[i] -= g[i]


def _compile_loop(staged, source, plan):
    """The loop as an njit function, kept in adcore's disk cache (``stub`` stands for the
    gradient's njit stub).  Numba's numpy error model: its one division is by the item
    count, never 0, and the checks of the Python model cost a tenth of its compile."""
    scope = {"stub": staged.grad, "math": math, "np": np, "carray": carray, "_zeroed": _zeroed,
             "_gathered": _gathered, "_added": _added, "_descended": _descended}
    for q, (_, steps) in enumerate(plan):
        for k, st in enumerate(steps):
            scope[f"K{q}_{k}"] = _without_wrappers(st.kernel)
    return CachedFunction(source, "loop", scope, error_model="numpy")


_COPIES = {}


def _without_wrappers(kernel):
    """A copy of njit ``kernel`` compiled without the Python and C wrappers (the loop
    calls it natively; the wrappers cost a good part of a small function's compile)."""
    if kernel not in _COPIES:
        options = {k: v for k, v in kernel.targetoptions.items() if k != "nopython"}
        _COPIES[kernel] = numba.njit(**options, no_cpython_wrapper=True, no_cfunc_wrapper=True)(kernel.py_func)
    return _COPIES[kernel]


def compiled_train(loss, dup, data, state, error, epochs=1):
    """Run ``train`` natively (``epochs`` passes over ``data``); returns the losses, or
    ``None`` when it does not apply.  ``error(loss, index, item, epoch)`` builds the
    exception for a non-finite loss."""
    items = _items(data)
    if not items:
        return []
    first = items[0] if type(items[0]) is tuple else (items[0],)
    staged, (dargs, _) = lookup(loss, (dup,) + tuple(first))
    plan = staged.plans.get(id(state))      # its state keeps the id while the plan lives
    if plan is None or not plan.current(state):
        columns = _columns(staged, items, len(first) + 1)
        if columns is None:
            return None
        try:
            samples = {k: col[0] for k, col in columns.items()}
            plan = _Plan(staged, state, samples, dargs)
        except NotImplementedError:
            return None
        if len(staged.plans) >= _MAX_PLANS:
            staged.plans.clear()
        staged.plans[id(state)] = plan
    n = len(items)
    with staged.lock:
        stack = plan.stacked(staged, items, len(first) + 1)
        if stack is None:
            return None
        values = (*[stack.buffers.get(k, v) for k, v in enumerate(dargs)], *plan.tail,
                  plan.losses(n * epochs))
        stop, code = plan.call.run(n * epochs, n, values)
        losses = values[-1].tolist()
    if code == 1:
        raise error(losses[stop], stop % n, items[stop % n], stop // n)
    if code >= 2:
        raise FloatingPointError(f"{plan.checks[code - 2]} is not finite (data item "
                                 f"{stop % n}{f', epoch {stop // n}' if epochs > 1 else ''})")
    return losses
