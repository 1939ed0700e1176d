"""``train`` with a ``Duplicated`` model as one native loop.

When every data item has the same shapes, the inputs are stacked along a new first
axis and a generated ``@njit`` loop runs, per item: zero the shadows (as
``program.ZEROING`` says), call adcore's gradient (the compiled program's stub), stop
on a non-finite loss, and apply the optimiser's kernels (``rule.steps``, optim's public
API) to each parameter, stopping with a step's ``check`` message when the value it
checks is not finite.  Python runs once per call; every array but the stacked inputs
reaches the loop as one array of addresses (``program._Caller``).
``compiled_train`` returns ``None`` when the data or the optimiser do not fit this
shape (then ``train`` steps through the items in Python).
"""
import copy
import math

import numpy as np

import optim
from adcore.disk_cache import CachedFunction
from adcore.tree import child
from optim.addresses import view

from .lower import Kind
from .program import Zeroing, _Caller, _zero, lookup


def _items(data):
    return data if isinstance(data, (list, tuple)) else list(data)


def _column(col, sample):
    """The values of one item position stacked: ``(n,)`` for scalars, ``(n, size)`` for
    arrays; ``None`` when they differ in type, shape or dtype."""
    n = len(col)
    if isinstance(sample, np.ndarray):
        if sample.ndim == 1 and set(map(len, col)) == {len(sample)}:
            arr = np.concatenate(col)
        else:
            try:
                arr = np.array(col)
            except ValueError:
                return None
        if arr.size != n * sample.size or arr.dtype != sample.dtype:
            return None
        return arr.reshape(n, -1)
    if set(map(type, col)) != {type(sample)}:
        return None
    return np.array(col, dtype=np.result_type(sample))


def _stack(staged, items, n_args):
    """Per driver argument that varies with the item, the items' values stacked (see
    ``_column``); ``None`` when the items differ in structure, or in an argument that
    is not an array or a float."""
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
        if i not in varying.values():
            first = col[0]
            if not all(v is first for v in col):
                return None
    stacked = {}
    for k, i in varying.items():
        arr = _column(cols[i], cols[i][0])
        if arr is None:
            return None
        stacked[k] = arr
    return stacked


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
    state arrays and hyperparameters, the messages of the steps' checks (``Step.check``)
    and the gradient workspaces."""

    def __init__(self, staged, state, stacked, dargs):
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
        values = list(dargs) + list(self.tail)
        fixed = [k for k, v in enumerate(values) if isinstance(v, np.ndarray) and k not in stacked]
        source = _loop_source(staged, stacked, plan, {k: values[k] for k in fixed})
        kernels = tuple(st.kernel for _, steps in plan for st in steps)
        loop = staged.loops.get((source, kernels))
        if loop is None:
            loop = staged.loops[source, kernels] = _compile_loop(staged, source, plan)
        self.call = _Caller(loop, fixed, len(values), lead=("n", "losses"))

    def current(self, state):
        return state is self.state and all(
            leaf.rule is rule and rule.__dict__ == was and leaf.state is st and
            leaf.frozen == frozen for leaf, rule, was, st, frozen in self.marks)


def _loop_source(staged, stacked, plan, fixed):
    """Source of ``loop(n, losses, addresses, *others)`` over the arguments
    ``(*args, *shadows, *grads, *states, hyper)``: those at the positions of ``fixed``
    (``{position: sample array}``) come as ``addresses`` (``optim.addresses``), the others
    in order.  Returns ``(items done, code)``: 0 done, 1 a non-finite loss, ``2 + k`` the
    ``k``-th checked step's value not finite.  Per-item inputs (positions in ``stacked``)
    arrive as ``(n, size)`` or ``(n,)``."""
    na, nd = len(staged.flat), len(staged.dflat)
    ns = sum(len(st.state) for _, steps in plan for st in steps)
    names = ([f"a{k}" for k in range(na)] + [f"d{k}" for k in range(nd)] +
             [f"g{k}" for k in range(len(plan))] + [f"s{k}" for k in range(ns)] + ["hyper"])
    flat = list(staged.flat) + list(staged.dflat)
    lines = [f"def loop(n, losses, addresses"
             f"{''.join(', ' + x for k, x in enumerate(names) if k not in fixed)}):"]
    for q, (k, sample) in enumerate(sorted(fixed.items())):
        shape = (sample.size,) if k >= len(flat) or flat[k] else sample.shape
        lines.append(f"    {names[k]} = view(addresses[{q}], {shape!r}, np.{sample.dtype.name})")
    a, d = names[:na], names[na:na + nd]
    g, s = names[na + nd:na + nd + len(plan)], names[-1 - ns:-1]
    call = []
    for k in range(na):
        if k in stacked:
            scalar = not isinstance(staged.slots[k][3], np.ndarray)
            call.append(f"{a[k]}[it]" if scalar else f"{a[k]}[it, :]")
        else:
            call.append(a[k])
    call += d
    lines.append("    for it in range(n):")
    lines += [f"        _zero({x}.reshape(-1))"
              for x, z in zip(d, staged.zeroing) if z != Zeroing.NEVER]
    lines += [f"        l = stub({', '.join(call)})[0]",
              "        losses[it] = l",
              "        if not math.isfinite(l):",
              "            return it, 1"]
    si, hi, checks = 0, 0, 0
    for q, (positions, steps) in enumerate(plan):
        ds = [d[staged.shadow_of.index(pos)] for pos in positions]
        p = a[positions[0]]
        lines += [f"        for i in range({g[q]}.size):",
                  f"            {g[q]}[i] = {' + '.join(x + '[i]' for x in ds)}"]
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
        lines += [f"        for i in range({g[q]}.size):",
                  f"            {p}[i] -= {g[q]}[i]"]
    lines.append("    return n, 0")
    return "\n".join(lines) + "\n"


def _compile_loop(staged, source, plan):
    """The loop as an njit function, kept in adcore's disk cache (``stub`` stands for the
    gradient's njit stub)."""
    scope = {"stub": staged.grad, "_zero": _zero, "math": math, "np": np, "view": view}
    for q, (_, steps) in enumerate(plan):
        for k, st in enumerate(steps):
            scope[f"K{q}_{k}"] = st.kernel
    return CachedFunction(source, "loop", scope)


def compiled_train(loss, dup, data, state, error):
    """Run ``train`` natively; returns the losses, or ``None`` when it does not apply.
    ``error(loss, index, item)`` builds the exception for a non-finite loss."""
    items = _items(data)
    if not items:
        return []
    first = items[0] if type(items[0]) is tuple else (items[0],)
    staged, (dargs, _) = lookup(loss, (dup,) + tuple(first))
    stacked = _stack(staged, items, len(first) + 1)
    if stacked is None:
        return None
    plan = staged.plan
    if plan is None or not plan.current(state):
        try:
            plan = staged.plan = _Plan(staged, state, stacked, dargs)
        except NotImplementedError:
            return None
    values = (*[stacked.get(k, v) for k, v in enumerate(dargs)], *plan.tail)
    losses = np.empty(len(items))
    with staged.lock:
        stop, code = plan.call.run(len(items), losses, values)
    if code == 1:
        raise error(float(losses[stop]), stop, items[stop])
    if code >= 2:
        raise FloatingPointError(f"{plan.checks[code - 2]} is not finite (data item {stop})")
    return losses.tolist()
