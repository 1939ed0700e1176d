"""Lowering a recording to the source of one Numba function.

Each record becomes loops (or a kernel call) writing a fresh slice of a flat workspace
buffer, or a ``View`` of an earlier value when it only reinterprets memory (reshape,
transpose, broadcasting, basic indexing, copy).  Shapes are static, so loops have
constant trip counts and views constant strides.  The function returns the loss.

The program's arguments are listed in ``Lowering.args`` as ``Arg(name, kind, payload)``,
``kind`` a ``Kind``.  Params, workspaces and kernel buffers are ``Duplicated``.
"""
import enum
import math
import re
from typing import Any, NamedTuple

import numpy as np

from adcore.backend import vector_math
from adcore.errors import UnsupportedError
from adcore.tape import RULES
from adcore.tape.numpy_api import PLAIN_UFUNCS

from .. import kernels, vector_kernels
from .products import lower_matmul
from .trace import Derived, TapeRef, ValueDependentError
from .views import ExprView, View, c_strides


class Kind(enum.Enum):
    """What a program argument is."""
    PARAM = "a differentiated leaf"
    INPUT = "a constant leaf"
    INDEX = "an integer array argument used for indexing, flat"
    INDEX_ND = "an integer array argument handed to a user kernel in its shape"
    STATE = "a layer's state array of an argument (running statistics), read and written in place, flat"
    CONST = "an array baked from the recording"
    WORK = "a workspace buffer"
    KBUF = "a buffer handed to a user kernel"


LEAVES = (Kind.PARAM, Kind.INPUT, Kind.INDEX, Kind.INDEX_ND, Kind.STATE)   # taken from the call's arguments
SHADOWED = (Kind.PARAM, Kind.WORK, Kind.KBUF)                 # ``Duplicated`` in the program


class Arg(NamedTuple):
    name: str
    kind: Kind
    payload: Any


# The scalar templates of elementwise ops (``adcore.tape.rules``): of differentiable ops by
# rule, of plain ufuncs recomputed from traced values by name, and of operations on the
# masks those give (never met on traced values).
PLAIN = {u.__name__: t for u, t in PLAIN_UFUNCS.items() if t}
MASK_OPS = {"bitwise_and": "({0} & {1})", "bitwise_or": "({0} | {1})",
            "bitwise_xor": "({0} ^ {1})"}
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))

# Workspace buffers of a vector or more start on a cache line (the workspace itself is
# line-aligned, ``program.line_aligned_zeros``) and reserve whole vectors: every buffer's
# loops vectorise in the same chunks, so no load straddles two stores (a stall of store
# forwarding), and a vector map over a buffer runs whole vectors into the reserved tail.
LINE_BYTES = 64


def _literal(v):
    if isinstance(v, (bool, np.bool_)):
        return "True" if v else "False"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    f = float(v)
    return repr(f) if math.isfinite(f) else f"float('{f}')"


class Lowering:
    """Generate the program for ``records``; ``leaves`` maps input ids to program args:
    ``{id: (Kind.PARAM | Kind.INPUT, name, value)}``; ``indices`` maps ``id(array)`` of
    integer argument arrays to their program names (``Kind.INDEX`` args; the
    ``Kind.INDEX_ND`` arg of one is named with a suffix ``nd``); ``states`` maps
    ``id(array)`` of layers' state arrays to their names (``Kind.STATE`` args); the
    records in ``outputs`` (the loss, traced aux outputs) are kept in memory, others may be
    computed inline where they are used (``inlined``)."""

    def __init__(self, records, leaves, indices, states, outputs=()):
        self.lines, self.depth, self.counter = [], 1, 0
        self.inline = inlined(records, outputs)
        self.views, self.args, self.work = {}, [], {d: 0 for d in FLOATS}
        self.whole_vectors = set()        # (dtype, offset) of buffers reserving whole vectors
        self.indices, self.states, self.kernel_names = indices, states, {}
        self.globals = {"K": kernels, "S": kernels.S, "math": math, "np": np}
        for rec_id, (kind, name, value) in leaves.items():
            self.views[rec_id] = self._leaf(kind, name, value)
        for rec in records:
            if rec.op != "input":
                self._lower(rec)

    # -- program arguments and buffers -----------------------------------------------
    def _leaf(self, kind, name, value):
        arr = np.asarray(value)
        if arr.dtype not in FLOATS:
            raise UnsupportedError(f"a {arr.dtype} leaf", detail="the compiled path handles "
                                   "float32 and float64 arrays")
        self.args.append(Arg(name, kind, value))
        if arr.ndim == 0 and not isinstance(value, np.ndarray):
            return View.scalar(name, arr.dtype)
        return View(name, 0, arr.shape, c_strides(arr.shape), arr.dtype)

    def fresh(self, prefix):
        self.counter += 1
        return f"{prefix}{self.counter}"

    def buffer(self, shape, dtype):
        """A fresh contiguous slice of the workspace of ``dtype``."""
        dtype = np.dtype(dtype)
        if dtype not in FLOATS:
            raise UnsupportedError(f"a {dtype} intermediate value",
                                   detail="the compiled path handles float32 and float64 arrays")
        off, size = self.work[dtype], max(int(np.prod(shape, dtype=np.int64)), 1)
        width = vector_kernels.lanes(dtype)
        if size >= width:
            line = LINE_BYTES // dtype.itemsize
            off, size = -(-off // line) * line, -(-size // width) * width
            self.whole_vectors.add((dtype, off))
        self.work[dtype] = off + size
        return View(work_name(dtype), off, shape, c_strides(shape), dtype)

    def const(self, value):
        """A constant array of the recording, passed as a program argument."""
        if isinstance(value, Derived):
            raise ValueDependentError("uses an array computed from traced values outside "
                                      "recorded operations (a comparison, argmax, round, ...)")
        arr = np.ascontiguousarray(value)
        ident = self.states.get(id(value))
        if ident is not None:
            self._state_arg(ident)
            return View(ident, 0, arr.shape, c_strides(arr.shape), arr.dtype)
        ident = self.indices.get(id(value))
        if ident is not None:
            if all(a.name != ident for a in self.args):
                self.args.append(Arg(ident, Kind.INDEX, ident))
        else:
            ident = self.fresh("C")
            if arr.dtype.kind in "iu":
                arr = arr.astype(np.int64)
            self.args.append(Arg(ident, Kind.CONST, arr.reshape(-1)))
        return View(ident, 0, arr.shape, c_strides(arr.shape), arr.dtype)

    def operand(self, rec, k):
        i, v = rec.inputs[k], rec.args[k]
        if i is not None:
            return self.views[i]
        if v is None:
            return None
        if isinstance(v, Derived):
            return self.derived(v)
        if isinstance(v, np.ndarray) and v.ndim > 0:
            return self.const(v)
        return View.scalar(_literal(v), np.result_type(v))

    def derived(self, v):
        """An elementwise value computed from traced arrays (a comparison, ...), recomputed
        inside the loops that use it."""
        if v.expr is None:
            self.const(v)
        name, operands = v.expr
        template = PLAIN.get(name) or MASK_OPS.get(name)
        if template is None and name in RULES and isinstance(RULES[name].scalar, str):
            template = RULES[name].scalar
        if template is None:
            raise UnsupportedError(f"numpy.{name} of values computed from traced arrays",
                                   detail="the compiled path recomputes comparisons, logical "
                                          "operators and arithmetic on them")
        views = []
        for o in operands:
            if isinstance(o, TapeRef):
                views.append(self.views[o.id])
            elif isinstance(o, Derived):
                views.append(self.derived(o))
            elif isinstance(o, np.ndarray) and o.ndim > 0:
                views.append(self.const(o))
            else:
                views.append(View.scalar(_literal(o), np.result_type(o)))
        return ExprView(template, [x.broadcast(v.shape) for x in views], v.shape, v.dtype)

    # -- emission ----------------------------------------------------------------------
    def emit(self, line):
        self.lines.append("    " * self.depth + line)

    def emit_kernel(self, kernel, *args):
        """The lines of a loop kernel (:mod:`layers.kernels`, :mod:`layers.vector_kernels`)
        for ``args`` (expressions), written into the program."""
        for line in kernel(self.fresh, *args):
            self.emit(line)

    def open_loops(self, shape):
        idx = []
        for n in shape:
            v = self.fresh("i")
            self.emit(f"for {v} in range({n}):")
            self.depth += 1
            idx.append(v)
        return idx

    def close_loops(self, idx):
        self.depth -= len(idx)

    def store(self, out, template, operands):
        """``out[...] = template(operands[...])`` elementwise, operands broadcast to ``out``;
        a tuple ``template`` holds the lines of a statement assigning ``{out}``."""
        ops = [o.broadcast(out.shape) for o in operands]
        idx = self.open_loops(out.shape)
        values = [o.at(idx) for o in ops]
        if isinstance(template, tuple):
            for line in template:
                self.emit(line.format(*values, out=out.at(idx)))
        else:
            self.emit(f"{out.at(idx)} = {template.format(*values)}")
        self.close_loops(idx)

    def source(self, loss_id, loss_value):
        """The program's source, returning the loss (the record ``loss_id``, or a constant)."""
        for dtype, size in self.work.items():
            if size:
                self.args.append(Arg(work_name(dtype), Kind.WORK, (size, dtype)))
        if loss_id is None:
            ret = _literal(np.asarray(loss_value).reshape(-1)[0])
        else:
            v = self.views[loss_id]
            ret = v.at(["0"] * len(v.shape))
        head = "def program(" + ", ".join(a.name for a in self.args) + "):"
        return "\n".join([head] + self.lines + [f"    return {ret}"]) + "\n"

    # -- records -------------------------------------------------------------------------
    def _lower(self, rec):
        value = np.asarray(rec.value)
        scalar = scalar_template(rec.op)
        if scalar is not None:
            template = scalar(rec) if callable(scalar) else scalar
            operands = [self.operand(rec, k) for k in range(len(rec.args))
                        if rec.args[k] is not None]
            if rec.out in self.inline:
                cast = "np.float32" if value.dtype == np.float32 else ""   # as a store would
                out = ExprView(f"{cast}({template})", [o.broadcast(value.shape) for o in operands],
                               value.shape, value.dtype)
            elif self._in_vectors(rec, value, operands):
                out = self.buffer(value.shape, value.dtype)
                x, name = operands[0], vector_kernels.vector_name(rec.op, value.dtype)
                width, n = vector_kernels.lanes(value.dtype), value.size
                if (value.dtype, x.off) in self.whole_vectors and x.base == out.base:
                    n = -(-n // width) * width     # into both buffers' reserved tails
                for count in {None, n % width or None}:
                    self.globals[vector_kernels.vector_name(rec.op, value.dtype, count)] = \
                        vector_kernels.vector_op(rec.op, value.dtype, count)
                self.emit_kernel(vector_kernels.map_lines, name, value.dtype, out.base, out.off,
                                 x.base, x.off, n)
            else:
                out = self.buffer(value.shape, value.dtype)
                self.store(out, template, operands)
        elif rec.op in self.STRUCTURAL:
            out = self.STRUCTURAL[rec.op](self, rec, value)
        else:
            raise UnsupportedError(f"the recorded operation {rec.op!r}",
                                   detail="the compiled path (Duplicated) has no lowering for it")
        self.views[rec.out] = out

    @staticmethod
    def _in_vectors(rec, value, operands):
        """Whether ``rec`` (a ``tanh``, ``exp``, ... of one contiguous operand of its dtype
        and shape) is computed by :mod:`layers.vector_kernels`: only when adcore maps
        vector math to libmvec, and for at least one vector of elements."""
        if not (vector_math.ENABLED and vector_kernels.vector_op(rec.op, value.dtype) and
                len(operands) == 1 and value.size >= vector_kernels.lanes(value.dtype)):
            return False
        x = operands[0]
        return (type(x) is View and x.base is not None and x.dtype == value.dtype and
                x.shape == value.shape and x.strides == c_strides(value.shape))

    def _reshape(self, rec, value):
        x = self.views[rec.inputs[0]]
        return x.reshape(value.shape) or self.copy(x).reshape(value.shape)

    def _transpose(self, rec, value):
        return self.views[rec.inputs[0]].transpose(rec.attrs["axes"])

    def _broadcast_to(self, rec, value):
        return self.views[rec.inputs[0]].broadcast(value.shape)

    def _same(self, rec, value):
        return self.views[rec.inputs[0]]

    def copy(self, x, dtype=None):
        out = self.buffer(x.shape, dtype or x.dtype)
        self.store(out, "{0}", [x])
        return out

    def _reduce(self, rec, value):
        x = self.views[rec.inputs[0]]
        axes = rec.attrs.get("axis")
        axes = tuple(range(len(x.shape))) if axes is None else tuple(axes)
        out = self.buffer(value.shape, value.dtype)
        kept = [d for d in range(len(x.shape)) if d not in axes]
        outer = self.open_loops([x.shape[d] for d in kept])
        n = int(np.prod([x.shape[d] for d in axes], dtype=np.int64))
        full = dict(zip(kept, outer))
        first = x.at([full.get(d, "0") for d in range(len(x.shape))])
        op, acc = rec.op, self.fresh("acc")
        self.emit(f"{acc} = {'0.0' if op in ('sum', 'mean') else first}")
        inner = self.open_loops([x.shape[d] for d in axes])
        full.update(zip(axes, inner))
        v = x.at([full[d] for d in range(len(x.shape))])
        if op in ("sum", "mean"):
            self.emit(f"{acc} += {v}")
        else:
            self.emit(f"if {v} {'>' if op == 'max' else '<'} {acc}:")
            self.emit(f"    {acc} = {v}")
        self.close_loops(inner)
        out_idx = outer if not rec.attrs.get("keepdims") else \
            [full.get(d, "0") if d in kept else "0" for d in range(len(x.shape))]
        if len(out_idx) != len(out.shape):   # a 0-d reduction kept as shape ()
            out_idx = []
        self.emit(f"{out.at(out_idx)} = {acc}" + (f" / {n}" if op == "mean" else ""))
        self.close_loops(outer)
        return out

    def _matmul(self, rec, value):
        a, b = self.operand(rec, 0), self.operand(rec, 1)
        if a.base is None or b.base is None:
            raise UnsupportedError("matmul with a 0-d operand")
        return lower_matmul(self, a, b, value)

    def _lines(self, x, axis):
        """Loops over every axis but ``axis``; returns the index list with a hole at ``axis``."""
        other = [d for d in range(len(x.shape)) if d != axis]
        idx = self.open_loops([x.shape[d] for d in other])
        full = dict(zip(other, idx))
        return idx, [full.get(d, "0") for d in range(len(x.shape))]

    def _softmax(self, rec, value):
        x = self.views[rec.inputs[0]]
        if x.base is None:
            x = self.copy(x.broadcast((1,))).reshape(())
        axis = rec.attrs.get("axis", -1) % max(len(x.shape), 1)
        out = self.buffer(value.shape, value.dtype)
        idx, at = self._lines(x, axis)
        self.emit_kernel(getattr(kernels, f"{rec.op}_line"), out.base, out.offset(at), out.strides[axis],
                         x.base, x.offset(at), x.strides[axis], x.shape[axis])
        self.close_loops(idx)
        return out

    def _logsumexp(self, rec, value):
        x = self.views[rec.inputs[0]]
        axes = rec.attrs.get("axis")
        axes = tuple(range(len(x.shape))) if axes is None else tuple(axes)
        if len(axes) > 1 and axes == tuple(range(len(x.shape))):
            flat = (int(np.prod(x.shape)),)
            x, axes = x.reshape(flat) or self.copy(x).reshape(flat), (0,)
        if len(axes) != 1:
            raise UnsupportedError("logsumexp over several axes",
                                   detail="the compiled path reduces along one axis")
        axis = axes[0]
        out = self.buffer(value.shape, value.dtype)
        idx, at = self._lines(x, axis)
        o = [v for d, v in enumerate(at) if d != axis]
        if rec.attrs.get("keepdims"):
            o = at
        self.emit_kernel(kernels.logsumexp_line, out.at(o), x.base, x.offset(at), x.strides[axis],
                         x.shape[axis])
        self.close_loops(idx)
        return out

    def _getitem(self, rec, value):
        x, index = self.views[rec.inputs[0]], rec.attrs["index"]
        items = list(index) if isinstance(index, tuple) else [index]
        if not any(isinstance(i, (list, np.ndarray)) for i in items):
            if x.base is None:
                return x
            return x.basic_index(index)
        return self._gather(x, items, value)

    def _gather(self, x, items, value):
        """Advanced indexing with numpy's rules: integer arrays (and ints next to them)
        broadcast together; their dimensions go in place when adjacent, else first."""
        if any(i is Ellipsis for i in items):
            k = items.index(Ellipsis)
            used = sum(1 for i in items if i is not None and i is not Ellipsis)
            items[k:k + 1] = [slice(None)] * (len(x.shape) - used)
        items += [slice(None)] * (len(x.shape) - sum(1 for i in items if i is not None))
        arrays, pieces, d = {}, [], 0
        for p, it in enumerate(items):
            if isinstance(it, (list, np.ndarray)):
                arrays[p] = (self._index(it), d)
            elif isinstance(it, (int, np.integer)):
                arrays[p] = (View.scalar(str(int(it)), np.int64), d)
            elif it is None:
                pieces.append(None)
                continue
            else:
                pieces.append((d,) + it.indices(x.shape[d]))
            d += 1
        adv = sorted(arrays)
        bshape = np.broadcast_shapes(*(arrays[p][0].shape for p in adv))
        first = adv[0] if adv == list(range(adv[0], adv[-1] + 1)) else 0
        pieces.insert(sum(1 for p, it in enumerate(items[:first]) if p not in arrays), "adv")
        out = self.buffer(value.shape, value.dtype)
        idx = self.open_loops(out.shape)
        pos, terms, bidx = 0, [str(x.off)], None
        for pc in pieces:
            if pc == "adv":
                bidx = idx[pos:pos + len(bshape)]
                pos += len(bshape)
                continue
            if pc is not None:
                dim, start, _, step = pc
                terms.append(f"({start} + {idx[pos]} * {step}) * {x.strides[dim]}")
            pos += 1
        for p in adv:
            view, dim = arrays[p]
            iv = view.broadcast(bshape).at(bidx)
            terms.append(f"(({iv}) % {x.shape[dim]}) * {x.strides[dim]}")
        self.emit(f"{out.at(idx)} = {x.base}[{' + '.join(terms)}]")
        self.close_loops(idx)
        return out

    def _index(self, it):
        """An integer index array as a view of a program argument."""
        a = np.asarray(it) if isinstance(it, list) else it
        if a.dtype == bool:
            if id(a) in self.indices or isinstance(a, Derived):
                raise ValueDependentError("indexes with a boolean mask taken from the data "
                                          "(the result's shape depends on values)")
            a = np.nonzero(a)[0]
        return self.const(a)

    def _take(self, rec, value):
        x = self.views[rec.inputs[0]]
        axis = rec.attrs.get("axis")
        if axis is None:
            flat = (int(np.prod(x.shape)),)
            x = x.reshape(flat) or self.copy(x).reshape(flat)
            return self._gather(x, [rec.args[1]], value)
        axis %= len(x.shape)
        return self._gather(x, [slice(None)] * axis + [rec.args[1]], value)

    def _setitem(self, rec, value):
        index = rec.attrs["index"]
        items = index if isinstance(index, tuple) else (index,)
        if any(isinstance(i, (list, np.ndarray)) for i in items):
            raise UnsupportedError("assignment with an integer-array index",
                                   detail="the compiled path assigns to basic slices only")
        out = self.copy(self.views[rec.inputs[0]], value.dtype)
        target = out.basic_index(index)
        self.store(target, "{0}", [self.operand(rec, 1)])
        return out

    def _join(self, rec, value):
        out = self.buffer(value.shape, value.dtype)
        axis = rec.attrs.get("axis", 0)
        if rec.op == "concatenate" and axis is None:
            parts = [self.operand(rec, k) for k in range(len(rec.args))]
            parts = [p.reshape((int(np.prod(p.shape)),)) or
                     self.copy(p).reshape((int(np.prod(p.shape)),)) for p in parts]
            axis = 0
        else:
            parts = [self.operand(rec, k) for k in range(len(rec.args))]
        start = 0
        for p in parts:
            if rec.op == "stack":
                where = (slice(None),) * axis + (start,)
                start += 1
            else:
                n = p.shape[axis]
                where = (slice(None),) * axis + (slice(start, start + n),)
                start += n
            self.store(out.basic_index(where), "{0}", [p])
        return out

    def _kernel(self, rec, value):
        """A user ``@njit`` kernel ``kernel(out, *operands)``: operands and output get
        buffers of their own (with real shapes; the output's zeroed first); the output is
        then copied to the workspace."""
        kernel = rec.attrs["kernel"]
        name = self.kernel_names.setdefault(kernel, f"KF{len(self.kernel_names)}")
        self.globals[name] = kernel
        bufs = []
        out_buf = self._kbuf(value.shape, value.dtype)
        for k, v in enumerate(rec.args):
            if isinstance(v, np.ndarray) and v.ndim > 0 and rec.inputs[k] is None:
                bufs.append(self._kernel_const(v))
            elif isinstance(v, np.ndarray) and v.ndim > 0:
                src = self.operand(rec, k)
                b = self._kbuf(v.shape, v.dtype)
                idx = self.open_loops(v.shape)
                self.emit(f"{b}[{', '.join(idx)}] = {src.at(idx)}")
                self.close_loops(idx)
                bufs.append(b)
            else:
                src = self.operand(rec, k)
                bufs.append(src.at([]) if src is not None else "None")
        idx = self.open_loops(value.shape)   # zeroed at every call: the kernel gets a new
        self.emit(f"{out_buf}[{', '.join(idx)}] = 0")   # zero array, and may skip entries
        self.close_loops(idx)
        self.emit(f"{name}({', '.join([out_buf] + bufs)})")
        out = self.buffer(value.shape, value.dtype)
        idx = self.open_loops(value.shape)
        self.emit(f"{out.at(idx)} = {out_buf}[{', '.join(idx)}]")
        self.close_loops(idx)
        return out

    def _kernel_const(self, v):
        """A constant operand of a user kernel, in its own shape: a layer's state array
        (``states``, which the kernel may update) and an integer argument array
        (``indices``) are passed through, anything else is baked."""
        if isinstance(v, Derived):
            self.const(v)
        name = self.states.get(id(v))
        if name is not None:
            self._state_arg(name)
            return name if v.ndim == 1 else f"{name}.reshape({v.shape})"
        key = self.indices.get(id(v))
        if key is not None:
            name = f"{key}nd"
            if all(a.name != name for a in self.args):
                self.args.append(Arg(name, Kind.INDEX_ND, key))
            return name
        name = self.fresh("C")
        self.args.append(Arg(name, Kind.CONST, np.ascontiguousarray(v)))
        return name

    def _state_arg(self, name):
        if all(a.name != name for a in self.args):
            self.args.append(Arg(name, Kind.STATE, name))

    def _kbuf(self, shape, dtype):
        if not shape:
            raise UnsupportedError("a 0-d array handed to an njit layer kernel",
                                   detail="give kernel outputs and operands at least one dimension")
        name = self.fresh("B")
        self.args.append(Arg(name, Kind.KBUF, (tuple(shape), np.dtype(dtype))))
        return name

    # How each op without a ``scalar`` template (see ``adcore.tape.rules``) is lowered.
    STRUCTURAL = {
        "sum": _reduce, "mean": _reduce, "max": _reduce, "min": _reduce, "matmul": _matmul,
        "softmax": _softmax, "logsoftmax": _softmax, "logsumexp": _logsumexp,
        "reshape": _reshape, "transpose": _transpose, "broadcast_to": _broadcast_to,
        "copy": _same, "getitem": _getitem, "take": _take, "setitem": _setitem,
        "concatenate": _join, "stack": _join, "njit_kernel": _kernel,
    }


# Ops whose staged scalar replaces the tape rule's: in the value's precision and
# branch-free, so the reverse pass has no control flow per element (the docs MLP's
# sigmoid: gradient 0.79 -> 0.77 ms).
STAGED_SCALARS = {"sigmoid": lambda rec: f"K.sigmoid_{np.asarray(rec.value).dtype.name}({{0}})"}


def scalar_template(op):
    """The scalar template of an elementwise op (a string, or a function of the record),
    ``None`` for other ops."""
    return STAGED_SCALARS.get(op, RULES[op].scalar)


def _template(rec):
    scalar = scalar_template(rec.op)
    return scalar(rec) if callable(scalar) else scalar


# A function call in a scalar template (``math.tanh(...)``, ``S.sigmoid(...)``): LLVM keeps
# such loops scalar, so arithmetic moved into one would lose its SIMD loop (measured: the
# seed model's bias add fused into its tanh loop made training 15% slower).
_CALL = re.compile(r"\w\(")


def inlined(records, outputs):
    """The ids of elementwise records computed inline in their one consumer instead of
    stored: the consumer is a sum/mean, or elementwise of the same shape, reads the value
    once (``{k}`` once in its template) and calls no function unless the record does
    (``_CALL``); no kernel call runs in between (it could change a state array the
    expression reads), and the record is not in ``outputs``.  Fusing ``relu(x @ W.T + b)``
    or ``sum(exp(-(y - t) ** 2))`` saves passes over memory and stored intermediates."""
    uses, consumer = {}, {}
    for rec in records:
        for k, i in enumerate(rec.inputs):
            if i is not None:
                uses[i] = uses.get(i, 0) + 1
                consumer[i] = (rec, k)
        for a in rec.args:
            if isinstance(a, Derived):   # recomputed from traced values: keep those stored
                for i in _derived_refs(a):
                    uses[i] = uses.get(i, 0) + 2
    out = set()
    for i, n in uses.items():
        rec = records[i]
        if n != 1 or i in outputs or rec.op not in RULES or scalar_template(rec.op) is None or \
                not isinstance(_template(rec), str):
            continue
        user, k = consumer[i]
        if any(r.op == "njit_kernel" for r in records[i + 1:user.out]):
            continue
        if user.op in ("sum", "mean"):
            out.add(i)
        elif scalar_template(user.op) is not None and np.shape(user.value) == np.shape(rec.value):
            position = sum(1 for a in user.args[:k] if a is not None)
            t = _template(user)
            text = "".join(t) if isinstance(t, tuple) else t
            if text.count(f"{{{position}}}") == 1 and (_CALL.search(_template(rec)) or
                                                      not _CALL.search(text)):
                out.add(i)
    return out


def _derived_refs(v):
    if v.expr is None:
        return
    for o in v.expr[1]:
        if isinstance(o, TapeRef):
            yield o.id
        elif isinstance(o, Derived):
            yield from _derived_refs(o)


def work_name(dtype):
    return f"W_{np.dtype(dtype).name}"

