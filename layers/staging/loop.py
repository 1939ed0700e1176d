"""``train`` with a ``Duplicated`` model as one native loop.

When every data item has the same shapes, the inputs are stacked along a new first
axis and a generated ``@njit`` loop runs, per item: zero the shadows, call adcore's
gradient (the compiled program's stub), stop on a non-finite loss, and apply the
optimiser's kernels (``rule.steps``) to each parameter.  Python runs once per call.
``compiled_train`` returns ``None`` when the data or the optimiser do not fit this
shape (then ``train`` steps through the items in Python).
"""
import math

import numba
import numpy as np

import optim
from adcore.tree import child

from .program import _zero, lookup


def _items(data):
    return data if isinstance(data, (list, tuple)) else list(data)


def _stack(staged, items, n_args):
    """Per driver argument, the stacked per-item values (``None`` where the argument is
    the same for every item), or ``None`` when the items differ in shape or kind."""
    first = items[0] if type(items[0]) is tuple else (items[0],)
    varying = {}
    for k, (kind, j, path, sample) in enumerate(staged.slots):
        if j is None or j == 0 or kind not in ("input", "index", "index_nd"):
            continue
        if path != ():
            return None
        varying[k] = j - 1
    fixed = [i for i in range(len(first)) if i not in varying.values()]
    cols = {i: [] for i in varying.values()}
    for item in items:
        args = item if type(item) is tuple else (item,)
        if len(args) != n_args - 1:
            return None
        for i in fixed:
            if args[i] is not first[i]:
                return None
        for i, col in cols.items():
            col.append(args[i])
    stacked = {}
    for k, i in varying.items():
        sample = first[i]
        col = cols[i]
        if isinstance(sample, np.ndarray):
            shape, dtype = sample.shape, sample.dtype
            if not all(type(v) is np.ndarray and v.shape == shape and v.dtype is dtype
                       for v in col):
                return None
            stacked[k] = np.stack(col)
        else:
            t = type(sample)
            if not all(type(v) is t for v in col):
                return None
            stacked[k] = np.array(col, dtype=np.float64 if t is float else sample.dtype)
    return stacked


def _groups(staged, state):
    """``[(leaf, [driver positions of its parameters])]`` for the unfrozen leaves."""
    groups = {}
    for k, (kind, j, path, sample) in enumerate(staged.slots):
        if kind != "param" or j != 0:
            continue
        leaf = state
        for key in path:
            leaf = child(leaf, key)
        if not isinstance(leaf, optim.Leaf):
            raise TypeError(f"optimiser state at {'.'.join(map(str, path))} is {leaf!r}, "
                            "not a Leaf; was the state made by setup for this model?")
        if not leaf.frozen:
            groups.setdefault(id(leaf), (leaf, []))[1].append(k)
    return list(groups.values())


def _loop_source(staged, stacked, plan):
    """Source of ``loop(n, *args, *shadows, *grads, *states, hyper, losses)``."""
    na, nd = len(staged.flat), len(staged.dflat)
    a = [f"a{k}" for k in range(na)]
    d = [f"d{k}" for k in range(nd)]
    g = [f"g{k}" for k in range(len(plan))]
    s = [f"s{k}" for k in range(sum(len(st.state) for _, steps in plan for st in steps))]
    lines = [f"def loop(n, {', '.join(a + d + g + s)}, hyper, losses):",
             "    for it in range(n):"]
    for k in range(nd):
        lines.append(f"        _zero({d[k]}.reshape(-1))")
    call = []
    for k in range(na):
        if k in stacked:
            sample = staged.slots[k][3]
            if isinstance(sample, np.ndarray) and sample.ndim == 0:
                call.append(f"{a[k]}[it:it + 1]")
            elif isinstance(sample, np.ndarray):
                call.append(f"{a[k]}[it].reshape(-1)" if staged.flat[k] else f"{a[k]}[it]")
            else:
                call.append(f"{a[k]}[it]")
        else:
            call.append(f"{a[k]}.reshape(-1)" if staged.flat[k] else a[k])
    call += [f"{x}.reshape(-1)" if fl else x for x, fl in zip(d, staged.dflat)]
    lines += [f"        l = stub({', '.join(call)})[0]",
              "        losses[it] = l",
              "        if not math.isfinite(l):",
              "            return it, 1"]
    si, hi = 0, 0
    for q, (positions, steps) in enumerate(plan):
        p = f"{a[positions[0]]}.reshape(-1)"
        ds = [f"{d[staged.shadow_of.index(pos)]}.reshape(-1)" for pos in positions]
        lines += [f"        p = {p}",
                  f"        for i in range({g[q]}.size):",
                  f"            {g[q]}[i] = {' + '.join(x + '[i]' for x in ds)}"]
        for k, st in enumerate(steps):
            args = [s[si + m] for m in range(len(st.state))]
            args += [f"hyper[{hi + m}]" for m in range(len(st.hyper))]
            si, hi = si + len(st.state), hi + len(st.hyper)
            call = f"K{q}_{k}(p, {g[q]}{''.join(', ' + x for x in args)})"
            if st.check:
                lines += [f"        if not math.isfinite({call}):",
                          "            return it, 2"]
            else:
                lines.append(f"        {call}")
        lines += [f"        for i in range({g[q]}.size):",
                  f"            p[i] -= {g[q]}[i]"]
    lines.append("    return n, 0")
    return "\n".join(lines) + "\n"


def _compile_loop(staged, stacked, plan):
    scope = {"stub": staged.grad.stub, "_zero": _zero, "math": math}
    for q, (_, steps) in enumerate(plan):
        for k, st in enumerate(steps):
            scope[f"K{q}_{k}"] = st.kernel
    exec(_loop_source(staged, stacked, plan), scope)
    return numba.njit(cache=False)(scope["loop"])


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
    plan, states, hyper = [], [], []
    for leaf, positions in _groups(staged, state):
        try:
            steps = leaf.rule.steps(leaf.state)
        except NotImplementedError:
            return None
        plan.append((positions, steps))
        for st in steps:
            states.extend(st.state)
            hyper.extend(st.hyper)
    key = (tuple(sorted(stacked)), tuple(
        (tuple(pos), tuple((st.kernel, len(st.state), len(st.hyper), st.check) for st in steps))
        for pos, steps in plan))
    loop = staged.loops.get(key)
    if loop is None:
        loop = staged.loops[key] = _compile_loop(staged, stacked, plan)
    nd = len(staged.dflat)
    args = [stacked.get(k, v) for k, v in enumerate(dargs[:len(dargs) - nd])]
    grads = [np.empty(dargs[pos[0]].size, dargs[pos[0]].dtype) for pos, _ in plan]
    losses = np.empty(len(items))
    with staged.lock:
        stop, code = loop(len(items), *args, *dargs[len(dargs) - nd:], *grads, *states,
                          np.array(hyper, dtype=np.float64), losses)
    if code == 1:
        raise error(float(losses[stop]), stop, items[stop])
    if code == 2:
        raise FloatingPointError(f"ClipNorm: the gradient norm is not finite (data item {stop})")
    return losses.tolist()
