"""``train``'s loop written as LLVM IR: no Numba compile of a loop of its own.

``loop(total, n, table) -> (steps done, code)`` follows Numba's calling convention (so
adcore's entry from Python calls it, :mod:`adcore.calling.ctypes_entry`).  ``table`` is the
address of an int64 array of the addresses of every array the loop reaches.  Parameters
and states of groups whose steps run once over them all (``LoopSpec.copy_in``) are copied
into buffers of the loop's own at the start and back at every exit.  Per step, over the
``n`` items in turn, it zeroes the shadows the step writes, calls the gradient (its IR
linked in and inlined), stores the loss and stops on a non-finite one (code 1), gathers
each parameter's gradient from its shadows, calls the optimiser's kernels
(``rule.steps``, translated or lowered by Numba and linked in: LLVM inlines them with
every size known)
and subtracts the step; the ``k``-th checked step's non-finite value stops it with code
``2 + k``.
A failed call (an exception in the gradient or a kernel) returns its status and
exception, which the entry raises.  :class:`LoopSpec` is everything the code depends on
(the disk cache's key); :func:`loop_ir` writes it.
"""
import re
from typing import NamedTuple

import numba
import numpy as np
from numba.core import types

from adcore import numba_abi
from adcore.ir.writer import Emitter, float_const
from adcore.calling.fastcall import array_fields
from adcore.numba_abi import flat_types, target_context

LLVM_FLOATS = {"float32": "float", "float64": "double"}


class Arg(NamedTuple):
    """How the loop passes one gradient argument: ``how`` is ``"array"`` (the array at
    table entry ``q``, ``offset`` bytes in, of ``shape``), ``"row"`` (row ``it % n`` of the
    stacked array at ``q``; ``shape`` is the row's) or ``"scalar"`` (item ``it % n`` of the
    array at ``q``)."""
    how: str
    q: int
    shape: tuple = ()
    offset: int = 0


class StepSpec(NamedTuple):
    """One kernel call ``kernel(x, g, *states, *hyper)``: ``kernel`` its index among the
    loop's kernels, ``states`` ``(table entry, size, dtype name)`` each, ``hyper`` indices
    into the hyperparameter array; ``check``: its float result must be finite."""
    kernel: int
    states: tuple
    hyper: tuple
    check: bool


class Group(NamedTuple):
    """Parameters (table entry ``x``, ``size`` items of ``dtype``) whose steps run at once:
    their gradient buffer ``g`` gathers, per part ``(offset, items, shadows)``, the sum of
    the part's shadows at ``offset`` (zeroing them, but at the last step, when
    ``zero_as_read``), then ``steps`` run and ``x -= g``.  ``in_place``: the gradient
    accumulates into ``g`` itself (``LoopSpec.gradient_out`` copies it to the shadows)."""
    x: int
    g: int
    parts: tuple
    size: int
    dtype: str
    zero_as_read: bool
    steps: tuple
    in_place: bool = False


class LoopSpec(NamedTuple):
    """``loop(total, n, table)``: the gradient's Numba argument types and result type, how
    each argument is passed, the shadows zeroed before the loop and at every step
    (``(table entry, bytes)``), the parameter groups, the table entries of the
    hyperparameters (float64) and of the losses (float64, one per step), the table's
    length, the copies made at the start and at every exit (``(to entry, byte offset,
    from entry, byte offset, bytes)``), the pairs ``(entry, entry, bytes)`` that must
    hold equal bytes at the start, else the loop returns code -1 having done nothing, and
    the copies of an ``in_place`` group's gradient to its shadows, made at the last step
    and at a stop on a non-finite loss (where the shadows hold that step's gradient).
    Its ``repr`` is part of the disk cache's key."""
    grad_types: tuple
    grad_result: object
    args: tuple
    zero_before: tuple
    zero_each: tuple
    groups: tuple
    hyper: int
    losses: int
    entries: int
    copy_in: tuple = ()
    copy_out: tuple = ()
    same: tuple = ()
    gradient_out: tuple = ()


FLAT = [["i64"]] * 3       # the LLVM types of the loop's parameters, one list per parameter


def kernel_types(dtype, state_dtypes, n_hyper):
    """The Numba argument types of a kernel ``kernel(x, g, *states, *hyper)`` for
    parameters of ``dtype``, states of ``state_dtypes`` and ``n_hyper`` hyperparameters."""
    def vector(d):
        return types.Array(numba.from_dtype(np.dtype(d)), 1, "C")
    return ((vector(dtype), vector(dtype)) + tuple(vector(d) for d in state_dtypes) +
            (types.float64,) * n_hyper)


def with_distinct_arrays(text, name, argtypes):
    """``text`` (a module) with the data pointers of function ``name``'s array arguments
    (Numba's calling convention, argument types ``argtypes``) marked ``noalias``: the loop
    calls its kernels with arrays that share no memory (``train`` checks), so that LLVM
    inlines them without tests of overlap."""
    context = target_context()
    start = re.search(rf"^define [^@\n]*@{re.escape(name)}\(", text, re.M).end()
    params, depth, end = [""], 0, start      # split at the commas outside parentheses
    while depth or text[end] != ")":
        c = text[end]
        depth += {"(": 1, ")": -1}.get(c, 0)
        if c == "," and not depth:
            params.append("")
        else:
            params[-1] += c
        end += 1
    params = [p.strip() for p in params]
    k = 2                                    # after the result's and the exception's pointers
    for t in argtypes:
        if isinstance(t, types.Array):
            ty, _, rest = params[k + numba_abi.DATA].partition(" ")
            params[k + numba_abi.DATA] = f"{ty} noalias {rest}"
        k += len(flat_types(context, t))
    assert k == len(params), "Numba's calling convention changed"
    return text[:start] + ", ".join(params) + text[end:]


class _LoopWriter(Emitter):
    """The loop function's writer: :class:`adcore.ir.writer.Emitter` with the accesses,
    copies and calls of the loop, the alias scopes of its element-wise loops and the
    failed calls' ``(status, block)``."""

    def __init__(self):
        super().__init__(prefix="")
        self.failures = []
        self.metadata = ['!0 = distinct !{!0, !"loop_ir"}']     # the alias domain
        for declaration in _DECLARATIONS:
            self.declare(declaration, declaration)

    def gep(self, ty, base, index):
        return self(f"getelementptr inbounds {ty}, ptr {base}, i64 {index}", "p")

    def load(self, ty, ptr):
        return self(f"load {ty}, ptr {ptr}")

    def memcpy(self, dst, src, nbytes):
        if nbytes:
            self.line(f"call void @llvm.memcpy.p0.p0.i64(ptr {dst}, ptr {src}, i64 {nbytes}, i1 false)")

    def memset(self, ptr, nbytes):
        if nbytes:
            self.line(f"call void @llvm.memset.p0.i64(ptr {ptr}, i8 0, i64 {nbytes}, i1 false)")

    def scopes(self):
        """Two new alias scopes: ``(dst's, src's)`` metadata suffixes, each access in its
        own scope and not aliasing the other's."""
        d, s = len(self.metadata), len(self.metadata) + 1
        self.metadata += [f"!{d} = distinct !{{!{d}, !0}}", f"!{s} = distinct !{{!{s}, !0}}",
                          f"!{d + 2} = !{{!{d}}}", f"!{s + 2} = !{{!{s}}}"]
        return (f", !alias.scope !{d + 2}, !noalias !{s + 2}",
                f", !alias.scope !{s + 2}, !noalias !{d + 2}")

    def elementwise(self, op, ty, dst, src, size):
        """``dst[i] = dst[i] op src[i]`` for ``i < size`` (a constant); ``dst`` and ``src``
        do not overlap (one is a gradient buffer of the loop's own)."""
        if not size:
            return
        in_dst, in_src = self.scopes()
        head, end, before = self.fresh("loop"), self.fresh("loop.end"), self.block
        i, nxt = self.fresh("i"), self.fresh("next")
        self.jump(head)
        self.label(head)
        self.line(f"{i} = phi i64 [ 0, %{before} ], [ {nxt}, {head} ]")
        pd, ps = self.gep(ty, dst, i), self.gep(ty, src, i)
        a = self(f"load {ty}, ptr {pd}{in_dst}")
        b = self(f"load {ty}, ptr {ps}{in_src}")
        self.line(f"store {ty} {self(f'{op} {ty} {a}, {b}')}, ptr {pd}{in_dst}")
        self.line(f"{nxt} = add nuw nsw i64 {i}, 1")
        self.branch(self(f"icmp eq i64 {nxt}, {size}", "done"), end, head)
        self.label(end)

    def finite(self, ty, value):
        """An i1: ``value`` is neither infinite nor NaN."""
        a = self(f"call {ty} @llvm.fabs.{'f32' if ty == 'float' else 'f64'}({ty} {value})")
        return self(f"fcmp olt {ty} {a}, {float_const(ty, float('inf'))}", "c")

    def call(self, target, ret_type, params):
        """Call ``target`` (Numba's calling convention); on failure return its status
        (its exception is in the caller's ``excinfo``).  The result's pointer."""
        if target.startswith("@"):
            types_ = ", ".join(["ptr", "ptr"] + [p.split(" ", 1)[0] for p in params])
            self.declare(target, f"declare i32 {target}({types_})")
        ret = self.fresh("ret")
        self.entry.append(f"  {ret} = alloca {ret_type}, align 16")
        status = self(f"call i32 {target}(ptr {ret}, ptr %excp, {', '.join(params)})", "status")
        fine = self.any_of([self(f"icmp eq i32 {status}, {numba_abi.STATUS_OK}", "c"),
                            self(f"icmp eq i32 {status}, {numba_abi.STATUS_NONE}", "c")])
        called = self.fresh("called")
        self.branch(fine, called, "%failed")
        self.failures.append((status, self.block))
        self.label(called)
        return ret


_DECLARATIONS = ("declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)",
                 "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)",
                 "declare float @llvm.fabs.f32(float)", "declare double @llvm.fabs.f64(double)",
                 "declare i32 @memcmp(ptr, ptr, i64)")


def loop_ir(symbol, spec, kernels, gradient):
    """The IR of function ``symbol`` running ``spec``; ``kernels[k]`` is ``(name, result
    type, float type of the result or None)`` of kernel ``k``, and ``gradient`` names the
    gradient, functions of modules linked in; NotImplementedError when a checked step's
    kernel returns no float."""
    context = target_context()
    w = _LoopWriter()
    table = w("inttoptr i64 %arg.table to ptr", "table")
    addr = [w.load("ptr", w.gep("i64", table, q)) for q in range(spec.entries)]
    _check_same(w, spec.same, addr)
    _copies(w, spec.copy_in, addr)
    for q, nbytes in spec.zero_before:
        w.memset(addr[q], nbytes)
    w.line("%any = icmp sgt i64 %arg.total, 0")
    w.branch("%any", "%step", "%done")
    start = w.block
    w.label("step")
    w.line(f"%it = phi i64 [ 0, %{start} ], [ %it.next, %step.end ]")
    w.line(f"%row = phi i64 [ 0, %{start} ], [ %row.next, %step.end ]")   # it % n
    w.line("%it.next = add nuw nsw i64 %it, 1")
    w.line("%last = icmp eq i64 %it.next, %arg.total")
    stops = _step(w, spec, addr, kernels, gradient, context)
    w.jump("%step.end")
    w.label("step.end")
    w.line("%row.up = add nuw nsw i64 %row, 1")
    w.line("%wrapped = icmp eq i64 %row.up, %arg.n")
    w.line("%row.next = select i1 %wrapped, i64 0, i64 %row.up")
    w.branch("%last", "%done", "%step")
    _exits(w, spec, addr, stops)
    return w.module("i32 @{}(ptr noalias %retp, ptr noalias %excp, i64 %arg.total, i64 %arg.n, "
                    "i64 %arg.table)".format(symbol)) + "\n".join(w.metadata + [""])


def _step(w, spec, addr, kernels, gradient, context):
    """One step: zero the shadows, call the gradient, store and check the loss, update
    each group; the stop codes of the step's checks."""
    for q, nbytes in spec.zero_each:
        w.memset(addr[q], nbytes)
    ret = w.call(f"@{gradient}", str(context.get_value_type(spec.grad_result)),
                 _gradient_params(w, spec, addr, context))
    loss_type = LLVM_FLOATS[str(spec.grad_result.types[0])]
    loss = w.load(loss_type, ret)
    if loss_type == "float":
        loss = w(f"fpext float {loss} to double")
    w.line(f"store double {loss}, ptr {w.gep('double', addr[spec.losses], '%it')}")
    w.branch(w.finite("double", loss), "%loss.ok", "%stop.1")
    w.label("loss.ok")
    stops = ["1"]
    for group in spec.groups:
        stops += _update(w, spec, group, addr, kernels, context, 1 + len(stops))
    return stops


def _exits(w, spec, addr, stops):
    """The loop's exits: done, each stop, the arrays that differ, a failed call."""
    w.label("done")
    _copies(w, spec.copy_out, addr)
    _returned(w, "%arg.total", "0", "done")
    for code in stops:
        w.label(f"stop.{code}")
        if code == "1":
            _copies(w, spec.gradient_out, addr)
        _copies(w, spec.copy_out, addr)
        _returned(w, "%it", code, code)
    if spec.same:
        w.label("differ")
        _returned(w, "0", "-1", "differ")
    w.label("failed")
    incoming = ", ".join(f"[ {s}, %{b} ]" for s, b in w.failures)
    w.line(f"%failure = phi i32 {incoming}")
    _copies(w, spec.copy_out, addr)
    w.line("ret i32 %failure")


def _gradient_params(w, spec, addr, context):
    params = []
    for arg, t in zip(spec.args, spec.grad_types):
        ptypes = flat_types(context, t)
        if arg.how == "scalar":
            params.append(f"{ptypes[0]} {w.load(ptypes[0], w.gep(ptypes[0], addr[arg.q], '%row'))}")
        else:
            itemsize, data = t.dtype.bitwidth // 8, addr[arg.q]
            if arg.offset:
                data = w.gep("i8", data, arg.offset)
            if arg.how == "row":
                data = w.gep(f"[{_count(arg.shape) * itemsize} x i8]", data, "%row")
            fields = array_fields(arg.shape, itemsize, data)
            assert len(fields) == len(ptypes), "Numba's array layout changed"
            params += fields
    return params


def _update(w, spec, group, addr, kernels, context, code):
    """Gather ``group``'s gradient, run its steps, subtract; the stop codes it adds
    (from ``code`` on)."""
    ty, itemsize = LLVM_FLOATS[group.dtype], np.dtype(group.dtype).itemsize
    g = addr[group.g]
    if group.in_place:
        _at_last_step(w, lambda: _copies(w, spec.gradient_out, addr), only=True)
    for offset, items, shadows in () if group.in_place else group.parts:
        at = w.gep(ty, g, offset) if offset else g
        w.memcpy(at, addr[shadows[0]], items * itemsize)
        for q in shadows[1:]:
            w.elementwise("fadd", ty, at, addr[q], items)
    if group.zero_as_read:
        _at_last_step(w, lambda: [w.memset(addr[q], items * itemsize)
                                  for _, items, shadows in group.parts for q in shadows], only=False)
    stops = []
    for step in group.steps:
        params = array_fields((group.size,), itemsize, addr[group.x]) + \
            array_fields((group.size,), itemsize, g)
        for q, size, dtype in step.states:
            params += array_fields((size,), np.dtype(dtype).itemsize, addr[q])
        params += [f"double {w.load('double', w.gep('double', addr[spec.hyper], h))}"
                   for h in step.hyper]
        argtypes = kernel_types(group.dtype, [d for _, _, d in step.states], len(step.hyper))
        assert len(params) == sum(len(flat_types(context, t)) for t in argtypes)
        name, ret_type, value_type = kernels[step.kernel]
        ret = w.call(f"@{name}", ret_type, params)
        if step.check:
            if value_type is None:
                raise NotImplementedError("a checked step's kernel returns no float")
            checked = w.fresh("checked")
            stops.append(str(code + len(stops)))
            w.branch(w.finite(value_type, w.load(value_type, ret)), checked, f"%stop.{stops[-1]}")
            w.label(checked)
    w.elementwise("fsub", ty, addr[group.x], g, group.size)
    return stops


def _at_last_step(w, write, only):
    """``write()`` the code run only at the last step (``only``), or at every step but the
    last."""
    run, after = w.fresh("last" if only else "not.last"), w.fresh("kept")
    w.branch("%last", *((run, after) if only else (after, run)))
    w.label(run)
    write()
    w.jump(after)
    w.label(after)


def _check_same(w, same, addr):
    """Branch to ``differ`` unless each pair of ``same`` holds equal bytes."""
    for a, b, nbytes in same:
        c = w(f"call i32 @memcmp(ptr {addr[a]}, ptr {addr[b]}, i64 {nbytes})")
        following = w.fresh("same")
        w.branch(w(f"icmp eq i32 {c}, 0", "c"), following, "%differ")
        w.label(following)


def _copies(w, copies, addr):
    for to, at, src, src_at, nbytes in copies:
        w.memcpy(w.gep("i8", addr[to], at) if at else addr[to],
                 w.gep("i8", addr[src], src_at) if src_at else addr[src], nbytes)


def _returned(w, steps, code, tag):
    w.line(f"store i64 {steps}, ptr %retp")
    w.line(f"%code.{tag} = getelementptr i64, ptr %retp, i64 1")
    w.line(f"store i64 {code}, ptr %code.{tag}")
    w.line(f"ret i32 {numba_abi.STATUS_OK}")


def _count(shape):
    n = 1
    for d in shape:
        n *= d
    return n
