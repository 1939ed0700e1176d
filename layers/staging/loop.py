"""``train`` with a ``Duplicated`` model as one native loop.

When every data item has the same shapes, the inputs are stacked along a new first
axis and one native loop (LLVM IR written by :mod:`loop_ir`) runs, per item: zero the
shadows (as ``drivers.ZEROING`` says), run adcore's gradient (its IR inlined), stop on a
non-finite loss, and apply the optimiser's kernels (``rule.steps``, optim's public API,
written to LLVM IR by :mod:`direct_ir` or lowered by Numba, and inlined) to each parameter, stopping with a step's ``check``
message when the value it checks is not finite.  Parameters whose steps are the same and
per element (``optim.Step.per_element``: Adam, not ClipNorm) take them at once, laid end
to end (each from a cache line) in buffers of the loop's own (PyTorch's fused Adam, Optimisers.jl's
``destructure``): one kernel run per step over all of them instead of one per array.
Python runs once per call, stacking the items into buffers kept from call to call (for
the very item objects of the last call, only their arrays are copied again) and checking
that no two arrays share memory; every array reaches the loop as one array of addresses
(an ``AddressTable`` of adcore's call layer).
``compiled_train`` returns ``None`` when the data or the optimiser do not fit this
shape (then ``train`` steps through the items in Python).
"""
import copy
import hashlib
import operator

import llvmlite.binding as llvm
import numpy as np
from numba.core import types

import optim
from adcore import numba_abi
from adcore.backend import disk_cache, native
from adcore.errors import LinkError
from adcore.calling.fastcall import row_copier
from adcore.timings import stage
from adcore.tree import child
from adcore.calling.addresses import AddressTable, address

from . import direct_ir, loop_ir
from .arguments import Kind
from .drivers import Zeroing, refused
from .operands import LINE_BYTES
from .program import lookup
from .split_policy import thread_count


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
    can a scalar; an array can, in place, and is checked again), through a builtin that
    checks and copies them all (``adcore.calling.fastcall.row_copier``, one per layout of the
    refilled arrays) when they are plain arrays."""

    def __init__(self, n, samples):
        self.n, self.items, self.refill, self.copiers, self.copy = n, None, {}, {}, None
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
        self.refill = {k: tuple(col) for k, col in columns.items() if not isinstance(col[0], _IMMUTABLE)}
        self.copy = None        # chosen at the first refresh (the builtin checks every item)
        return True

    def refresh(self):
        if self.copy is None:
            self.copy = self._copier() or (None,)
        copy = self.copy[0]
        if copy is not None and copy(*self.refill.values()) is not None:
            return True
        if all(_fill(self.buffers[k], col, typed=True) for k, col in self.refill.items()):
            return True
        self.items = None
        return False

    def _copier(self):
        """The builtin copying the refilled columns (and what keeps it alive), or None
        when one of them is not of plain arrays."""
        samples = [col[0] for col in self.refill.values()]
        if not all(type(a) is np.ndarray for a in samples):
            return None
        key = tuple((k, a.shape, a.dtype) for k, a in zip(self.refill, samples))
        if key not in self.copiers:
            self.copiers[key] = row_copier([(a, self.buffers[k]) for k, a in zip(self.refill, samples)])
        return self.copiers[key]


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
    arrays and frozen flags: the loop (through an ``AddressTable``), the optimiser's
    state arrays and hyperparameters, the messages of the steps' checks (``Step.check``),
    the gradient workspaces and the stacked items (a ``_Stack``).  ``packed``: its groups
    take their steps at once (unless not ``pack``: :func:`_packable`, and
    :func:`_packing_pays` for ``steps_a_call`` steps a call)."""

    def __init__(self, staged, state, samples, dargs, steps_a_call, pack=True):
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
        self.packed = pack and _packable(plan, dargs) and _packing_pays(plan, dargs, steps_a_call)
        if self.packed:   # the loop's own: the gradient, the parameters and states end to end
            x = dargs[plan[0][0][0]]
            total = _packed_offsets([dargs[pos[0]].size for pos, _ in plan], x.itemsize)[-1]
            own = [np.zeros(total, x.dtype), np.zeros(total, x.dtype)]
            own += [np.zeros(total, s.dtype) for st in plan[0][1]
                    for s, each in zip(st.state, st.per_element) if each]
        else:             # a gradient buffer per group
            own = [np.empty(dargs[pos[0]].size, dargs[pos[0]].dtype) for pos, _ in plan]
        self.tail = (*own, *states, np.array(hyper, dtype=np.float64))
        self.samples, self.stack, self.loss_buffer = samples, None, np.empty(0)
        values = [samples.get(k, v) for k, v in enumerate(dargs)] + list(self.tail)
        values.append(np.empty(0))   # the losses
        fixed = [k for k, v in enumerate(values) if isinstance(v, np.ndarray) or k in samples]
        self.fixed, self.checked, self.last = fixed, None, None
        spec, kernels = _loop_spec(staged, samples, plan, values, fixed, self.packed)
        key = (spec, tuple(kernels))
        if key not in staged.loops:      # None: it cannot be compiled (not tried again)
            try:
                staged.loops[key] = _compile_loop(spec, kernels, staged.grad)
            except NotImplementedError:
                staged.loops[key] = None
                raise
        loop = staged.loops[key]
        if loop is None:
            raise NotImplementedError("the loop cannot be compiled")
        self.call = AddressTable(loop, fixed, len(values), refused, lead=("total", "n"))

    def arguments(self, stack, dargs, losses):
        """The loop's arguments: the program's (the stacked inputs from ``stack``), the
        plan's own buffers and ``losses``; the very tuple of the last call when it would
        hold the same arrays (the ``AddressTable`` then checks nothing again); ``None``
        when two of them share memory."""
        last = self.last
        if last is not None and last[0] is stack and last[1] is losses and \
                all(map(operator.is_, dargs, last[2])):
            return last[3]
        values = (*[stack.buffers.get(k, v) for k, v in enumerate(dargs)], *self.tail, losses)
        if not self.disjoint(values):
            return None
        self.last = (stack, losses, list(dargs), values)
        return values

    def disjoint(self, values):
        """Whether no two of the arrays the loop reaches among ``values`` share memory
        (the kernels are compiled for arrays that do not); checked again only when one
        of them is another object than at the last check."""
        arrays = [values[k] for k in self.fixed]
        if self.checked is None or not all(map(operator.is_, arrays, self.checked)):
            spans = sorted((address(a), address(a) + a.nbytes) for a in arrays if a.nbytes)
            if any(end > start for (_, end), (start, _) in zip(spans, spans[1:])):
                return False
            self.checked = arrays
        return True

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


def _packable(plan, dargs):
    """Whether the parameter groups of ``plan`` can take their steps at once, laid end to
    end: several groups of parameters of one dtype, with the same kernels and
    hyperparameters, each step per element (``Step.per_element``), their states alike."""
    def signature(positions, steps):
        x = dargs[positions[0]]
        return x.dtype, [(st.kernel, st.hyper, st.check, st.per_element,
                          [(s.dtype, s.size if not each else None)
                           for s, each in zip(st.state, st.per_element)])
                         for st in steps]
    if len(plan) < 2 or any(st.per_element is None or st.check or
                            len(st.per_element) != len(st.state) for _, steps in plan for st in steps):
        return False
    if any(s.size != dargs[pos[0]].size for pos, steps in plan for st in steps
           for s, each in zip(st.state, st.per_element) if each):
        return False
    first = signature(*plan[0])
    return all(signature(*group) == first for group in plan[1:])


def _packing_pays(plan, dargs, steps_a_call):
    """Whether laying the groups end to end for ``steps_a_call`` steps a call pays for copying
    their parameters and states in and out at each call: a step saves about 15 ns a
    group (the loop over its elements, the tail the vectors leave), copies take about
    0.2 ns a byte (the seed: from 4 steps a call; an MLP of 270,000 parameters trained
    one batch a call: never)."""
    nbytes = sum(dargs[positions[0]].nbytes + sum(s.nbytes for st in steps for s, each in
                                                  zip(st.state, st.per_element) if each)
                 for positions, steps in plan)
    return steps_a_call * len(plan) * 15 > 2 * 0.2 * nbytes


def _loop_spec(staged, samples, plan, values, fixed, packed):
    """The :class:`loop_ir.LoopSpec` of the loop over ``values`` (``(*args, *shadows,
    *grads, *states, hyper, losses)``; those at the positions ``fixed`` come through the
    table), with the kernels it calls (``[(kernel, argument types)]``).  The per-item
    inputs, at the positions of ``samples``, are the rows of a ``_Stack``.  When ``packed`` (:func:`_packable`), ``grads`` is one gradient buffer, one
    for the parameters and one per per-element state, each of them all laid end to end,
    and the groups become one.  NotImplementedError for what the loop does not pass."""
    na, nd = len(staged.flat), len(staged.dflat)
    q_of = {k: q for q, k in enumerate(fixed)}
    packing = _Packing(plan, values, q_of, na + nd, na, staged.shadow_of) if packed else None
    grad_types, grad_result = staged.grad.stub_spec[:2]
    args = _gradient_args(staged, samples, values, q_of, packing)
    checked = any(st.check for _, steps in plan for st in steps)
    # With no checked step, the parameters' shadows are zeroed as they are read (but for
    # the last step's, which the shadow keeps as after a gradient call), else before each step.
    read = set() if checked else {staged.shadow_of.index(pos) for positions, _ in plan for pos in positions}
    shadow = [(q_of[na + j], values[na + j].nbytes) for j in range(nd)]
    zero_each = tuple(shadow[j] for j, z in enumerate(staged.zeroing) if z != Zeroing.NEVER and j not in read)
    if packing and packing.in_place:     # the gradient accumulates into the loop's buffer
        zero_each = tuple(z for z in zero_each if z[0] not in packing.shadows) + \
            ((packing.g, packing.total * packing.itemsize),)
        read = set()
    kernels, groups, hi = {}, [], 0
    si = na + nd + (packing.grads if packing else len(plan))
    hyper = len(values) - 2
    for q, (positions, steps) in enumerate(plan):
        x = values[positions[0]]
        if x.dtype.name not in ("float32", "float64"):
            raise NotImplementedError("a parameter that is not float32 or float64")
        specs = []
        for st in steps:
            states = tuple((q_of[si + m], values[si + m].size, values[si + m].dtype.name)
                           for m in range(len(st.state)))
            si += len(st.state)
            argtypes = loop_ir.kernel_types(x.dtype.name, [d for _, _, d in states], len(st.hyper))
            specs.append(loop_ir.StepSpec(kernels.setdefault((st.kernel, argtypes), len(kernels)),
                                          states, tuple(range(hi, hi + len(st.hyper))), bool(st.check)))
            hi += len(st.hyper)
        shadows = tuple(q_of[na + staged.shadow_of.index(pos)] for pos in positions)
        g = q_of[na + nd + (0 if packing else q)]
        groups.append(loop_ir.Group(q_of[positions[0]], g, ((0, x.size, shadows),), x.size,
                                    x.dtype.name, bool(read), tuple(specs)))
    copies = {}
    if packing:
        groups, copies = packing.group(groups), packing.copies(groups)
    spec = loop_ir.LoopSpec(tuple(grad_types), grad_result, tuple(args),
                            tuple(shadow[j] for j in sorted(read)), zero_each, tuple(groups),
                            q_of[hyper], q_of[hyper + 1], len(fixed), **copies)
    return spec, list(kernels)


def _gradient_args(staged, samples, values, q_of, packing):
    """The :class:`loop_ir.Arg` of each of the gradient's arguments (see
    :func:`_loop_spec`)."""
    na, args = len(staged.flat), []
    for k, t in enumerate(staged.grad.stub_spec[0]):
        flat = staged.flat[k] if k < na else staged.dflat[k - na]
        if k in samples:
            sample = samples[k]
            if isinstance(sample, np.ndarray) and not (isinstance(t, types.Array) and t.ndim == 1):
                raise NotImplementedError("a stacked input the gradient takes with several axes")
            args.append(loop_ir.Arg("row", q_of[k], (sample.size,)) if isinstance(sample, np.ndarray)
                        else loop_ir.Arg("scalar", q_of[k]))
        elif k in q_of:
            shape = (values[k].size,) if flat else values[k].shape
            if not (isinstance(t, types.Array) and t.ndim == len(shape)):
                raise NotImplementedError("an array the gradient takes with other axes")
            q, offset = packing.at.get(k, (q_of[k], 0)) if packing else (q_of[k], 0)
            args.append(loop_ir.Arg("array", q, shape, offset))
        else:
            raise NotImplementedError("an argument that is neither an array nor a stacked input")
    return args


def _packed_offsets(sizes, itemsize):
    """Where parameters of ``sizes`` go in the packed buffers, each from a cache line
    (a step's wide loads of one parameter then never straddle the stores of the last
    step's update), and the buffers' size."""
    line, offsets, at = LINE_BYTES // itemsize, [], 0
    for size in sizes:
        offsets.append(at)
        at = -(-(at + size) // line) * line
    return offsets + [at]


class _Packing:
    """Where packed groups put things (:func:`_loop_spec`): the table entries of the
    gradient buffer (``g``), of the parameters (``x``) and of each per-element state
    (``states[step, state]``) laid end to end, each group's offset in them (items), and
    each parameter's driver position's ``(entry, byte offset)`` in ``x`` (``at``)."""

    def __init__(self, plan, values, q_of, first, na, shadow_of):
        self.itemsize = values[plan[0][0][0]].itemsize
        *self.offsets, self.total = _packed_offsets([values[p[0]].size for p, _ in plan], self.itemsize)
        self.g, self.x = q_of[first], q_of[first + 1]
        self.per_element = [step.per_element for step in plan[0][1]]
        each = [(k, m) for k, per in enumerate(self.per_element) for m, e in enumerate(per) if e]
        self.states = {km: q_of[first + 2 + j] for j, km in enumerate(each)}
        self.grads = 2 + len(each)
        self.at = {pos: (self.x, off * self.itemsize)
                   for (positions, _), off in zip(plan, self.offsets) for pos in positions}
        # with one shadow each, the gradient accumulates into the gradient buffer itself
        self.in_place = all(len(positions) == 1 for positions, _ in plan)
        self.shadows = set()
        if self.in_place:
            for (positions, _), off in zip(plan, self.offsets):
                self.at[na + shadow_of.index(positions[0])] = (self.g, off * self.itemsize)
                self.shadows.add(q_of[na + shadow_of.index(positions[0])])

    def group(self, groups):
        """The one group running ``groups``' steps over everything at once."""
        first = groups[0]
        steps = tuple(loop_ir.StepSpec(step.kernel, tuple(
            (self.states[k, m], self.total, dtype) if (k, m) in self.states else (q, size, dtype)
            for m, (q, size, dtype) in enumerate(step.states)), step.hyper, step.check)
            for k, step in enumerate(first.steps))
        parts = tuple((off, g.size, g.parts[0][2]) for off, g in zip(self.offsets, groups))
        return [loop_ir.Group(self.x, self.g, parts, self.total, first.dtype,
                              first.zero_as_read and not self.in_place, steps, self.in_place)]

    def copies(self, groups):
        """``copy_in``, ``copy_out``, ``same`` and ``gradient_out`` of
        :class:`loop_ir.LoopSpec`: the parameters and per-element states copied in and
        out, the other groups' records made the first group's at the exits and checked
        equal to them at the start, the gradient copied to the shadows."""
        copy_in, records, same = [], [], []
        for group, off in zip(groups, self.offsets):
            copy_in.append((self.x, off * self.itemsize, group.x, 0, group.size * self.itemsize))
            for k, step in enumerate(group.steps):
                for m, (q, size, dtype) in enumerate(step.states):
                    itemsize = np.dtype(dtype).itemsize
                    if (k, m) in self.states:
                        copy_in.append((self.states[k, m], off * itemsize, q, 0, size * itemsize))
                    elif group is not groups[0]:
                        kept = groups[0].steps[k].states[m][0]
                        records.append((q, 0, kept, 0, size * itemsize))
                        same.append((kept, q, size * itemsize))
        copy_out = [(src, src_at, to, at, n) for to, at, src, src_at, n in copy_in] + records
        gradient_out = tuple((q, 0, self.g, off * self.itemsize, group.size * self.itemsize)
                             for group, off in zip(groups, self.offsets)
                             for q in group.parts[0][2]) if self.in_place else ()
        return {"copy_in": tuple(copy_in), "copy_out": tuple(copy_out), "same": tuple(same),
                "gradient_out": gradient_out}


def _compile_loop(spec, kernels, grad):
    """The loop's entry call ``call(total, n, table)``, compiled with the kernels' code
    and the gradient's optimised IR linked in (Numba lowers each kernel once per argument
    types), so that LLVM inlines them, and kept in adcore's disk cache (keyed by ``spec``,
    the kernels' code and the gradient's IR)."""
    gradient_ir = grad.optimised_ir
    if gradient_ir is None:
        raise NotImplementedError("the gradient's IR is not at hand")
    try:
        parts = (repr(spec), tuple(disk_cache.key_of(kernel) for kernel, _ in kernels),
                 hashlib.sha256(gradient_ir.encode()).hexdigest())
    except disk_cache.Uncacheable:
        parts = None

    def compile_(symbol):
        results, modules = [], []
        for k, (kernel, argtypes) in enumerate(kernels):
            name = f"{symbol}.kernel{k}"
            text, restype = _kernel_ir(kernel, argtypes, name)
            if not isinstance(restype, (types.Number, types.NoneType)):
                raise NotImplementedError("an optimiser kernel returning an object")
            modules.append(llvm.parse_assembly(loop_ir.with_distinct_arrays(text, name, argtypes)))
            results.append((name, str(numba_abi.target_context().get_value_type(restype)),
                            loop_ir.LLVM_FLOATS.get(str(restype))))
        with stage("generate"):
            gradient = f"{symbol}.gradient"
            module = llvm.parse_assembly(loop_ir.loop_ir(symbol, spec, results, gradient))
            for part in modules + [_inlined(gradient_ir, grad.symbol, gradient)]:
                module.link_in(part)
            text = numba_abi.bind_environments(str(module))
        with stage("compile"):
            compiled = native.compile_ir(text, symbol, python_entry=(loop_ir.FLAT, [None] * 3, ()))
        compiled.holds_process_addresses = text != str(module)
        return compiled
    try:
        return disk_cache.native_function(parts, loop_ir.FLAT, ["i64", "i64"], compile_, "train loop")
    except LinkError as err:
        raise NotImplementedError(str(err)) from None


def _kernel_ir(kernel, argtypes, name):
    """``(IR text, result type)`` of optimiser kernel ``kernel`` for ``argtypes`` as
    function ``name``: written straight to LLVM IR when :func:`direct_ir.kernel_ir` can
    (no Numba compile, nor Numba's start in a process whose gradients were translated
    too), else lowered by Numba."""
    with stage("translate"):
        text = direct_ir.kernel_ir(kernel, argtypes, name)
        if text is not None:
            module = llvm.parse_assembly(text)
            module.triple = numba_abi.target_machine().triple
            numba_abi.run_function_passes(module)     # Numba's, as on a kernel it lowers
            return str(module), types.none
    with stage("Numba compile"):
        cres = numba_abi.lowered(kernel, argtypes)
        module = numba_abi.linkable_module(cres.library)
        module.get_function(cres.fndesc.mangled_name).name = name
        return str(module), cres.signature.return_type


def _inlined(ir, symbol, name):
    """The module of ``ir`` with its function ``symbol`` renamed ``name`` and always
    inlined, everything else it defines private to it."""
    module = llvm.parse_assembly(ir)
    for fn in module.functions:
        if fn.is_declaration:
            continue
        if fn.name == symbol:
            fn.name = name
            fn.add_function_attribute("alwaysinline")
        else:
            fn.linkage = "internal"
    for g in module.global_variables:
        if not g.is_declaration:
            g.linkage = "internal"
    return module


def compiled_train(loss, dup, data, state, error, epochs=1):
    """Run ``train`` natively (``epochs`` passes over ``data``); returns the losses, or
    ``None`` when it does not apply.  ``error(loss, index, item, epoch)`` builds the
    exception for a non-finite loss."""
    items = _items(data)
    if not items:
        return np.empty(0)
    first = items[0] if type(items[0]) is tuple else (items[0],)
    staged, (dargs, _) = lookup(loss, (dup,) + tuple(first))
    if thread_count() > 1 and staged.row_threads.split_for(loss, (dup,) + tuple(first)):
        return None                     # each item's gradient splits its rows on the threads
    plan = staged.plans.get(id(state))      # its state keeps the id while the plan lives
    if plan is None or not plan.current(state):
        columns = _columns(staged, items, len(first) + 1)
        if columns is None:
            return None
        try:
            samples = {k: col[0] for k, col in columns.items()}
            plan = _Plan(staged, state, samples, dargs, len(items) * epochs)
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
        values = plan.arguments(stack, dargs, plan.losses(n * epochs))
        if values is None:
            return None
        losses = values[-1]
        stop, code = plan.call.run(n * epochs, n, values)
        if code == -1:       # the groups' records differ: each group takes its own steps
            packed, plan = plan, _Plan(staged, state, plan.samples, dargs, n * epochs, pack=False)
            plan.stack, staged.plans[id(state)] = packed.stack, plan
            values = (*values[:len(dargs)], *plan.tail, losses)
            stop, code = plan.call.run(n * epochs, n, values)
        losses = losses.copy()           # the buffer is the plan's, reused by the next call
    if code == 1:
        raise error(losses[stop], stop % n, items[stop % n], stop // n)
    if code >= 2:
        raise FloatingPointError(f"{plan.checks[code - 2]} is not finite (data item "
                                 f"{stop % n}{f', epoch {stop // n}' if epochs > 1 else ''})")
    return losses
