"""The values a staged program reads and writes, as views: leaves, slices of the flat
workspace, constants of the recording, and elementwise values recomputed from traced ones."""
import math

import numpy as np

from adcore.errors import UnsupportedError
from adcore.tape import RULES
from adcore.tape.numpy_api import PLAIN_UFUNCS

from .. import vector_kernels
from .arguments import Arg, Kind
from .trace import Derived, TapeRef, ValueDependentError
from .views import ExprView, View, c_strides

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


def literal(v):
    """The Python literal of a scalar."""
    if isinstance(v, (bool, np.bool_)):
        return "True" if v else "False"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    f = float(v)
    return repr(f) if math.isfinite(f) else f"float('{f}')"


def work_name(dtype):
    return f"W_{np.dtype(dtype).name}"


class Operands:
    """The operand bookkeeping of :class:`layers.staging.lower.Lowering`: its ``args``,
    ``views`` of records, ``work`` (the size of each dtype's workspace) and
    ``whole_vectors``."""

    def leaf(self, kind, name, value):
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
            self.state_arg(ident)
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

    def state_arg(self, name):
        """List a layer's state array ``name`` as a ``Kind.STATE`` argument, once."""
        if all(a.name != name for a in self.args):
            self.args.append(Arg(name, Kind.STATE, name))

    def operand(self, rec, k):
        """The view of the ``k``-th operand of ``rec``, ``None`` for an absent one."""
        i, v = rec.inputs[k], rec.args[k]
        if i is not None:
            return self.views[i]
        if v is None:
            return None
        if isinstance(v, Derived):
            return self.derived(v)
        if isinstance(v, np.ndarray) and v.ndim > 0:
            return self.const(v)
        return View.scalar(literal(v), np.result_type(v))

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
                views.append(View.scalar(literal(o), np.result_type(o)))
        return ExprView(template, [x.broadcast(v.shape) for x in views], v.shape, v.dtype)
