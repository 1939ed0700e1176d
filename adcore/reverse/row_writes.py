"""Which rows a parallel loop's iterations write: the proof that lets a loop writing a 2-D
array elsewhere than at the loop index (``v[i, j] = ...``) run its reverse on threads.

A store through array ``a``'s data pointer whose byte offset is linear,

    offset = (i * R) * s + c,        c = k + sum of t * j  over counters j of inner loops,

with ``i`` the parallel loop's index, ``R`` a row length fixed for the call (``a.shape[1]``),
``s`` the element size, and each inner counter ``j`` running from a start to an end fixed
for the call (:mod:`adcore.analysis.exit_values`), writes inside row ``i`` whenever

    0 <= min(c)   and   max(c) + (bytes stored) <= R * s.

Distinct iterations then write disjoint bytes, so do the pieces of the loop run on
different threads, and so do their reverses in the shadow.  The bounds are only known at
the call: :func:`row_checks` returns them as Python expressions over the chunk function's
arguments (``a2.shape[1]``, ``a3``), which the loop's launchers test at each call; where a
test fails the pieces run one after another in the serial order (exactly the serial loop).
"""
from numba.core import types as nbtypes

from .. import numba_abi
from ..analysis.cfg import ControlFlow
from ..analysis.exit_values import ENDS, exit_test
from ..ir.model import Arg
from .value_stack import SIZES

_TRANSPARENT = ("sext", "zext")


def row_checks(func, groups, data, index, wraps):
    """``[Python expression]`` that, true at a call, prove every store through array data
    pointer ``data`` of ``func`` (a chunk function, its arguments in ``groups`` as
    ``[(Numba type, LLVM arguments)]``) writes inside the row of loop index ``index``; None
    when some store is not of that form.  ``wraps(defn, x)``: whether ``defn`` is Numba's
    wrap-around of a negative index ``x``."""
    terms = _Terms(ControlFlow(func), groups, index, wraps)
    checks, rows = [], set()
    for pointer, stored in _stores(func, data):
        found = terms.row_store(pointer, data, SIZES.get(stored))
        if found is None:
            return None
        row, store_checks = found
        rows.add(row)
        checks += store_checks
    return list(dict.fromkeys(checks)) if len(rows) == 1 else None


def _stores(func, data):
    """``[(pointer, stored type)]`` of the stores whose address derives from ``data``."""
    derived, found = {id(data)}, []
    for instr in func.instructions():
        if instr.opcode == "getelementptr" and id(instr.operands[0].defn) in derived:
            derived.add(id(instr))
        elif instr.opcode == "store" and id(instr.operands[1].defn) in derived:
            found.append((instr.operands[1].defn, instr.operands[0].type))
    return found


class _Terms:
    """Linear forms of a chunk function's integer values, and the launcher's expressions
    of the values fixed for a call."""

    def __init__(self, cfg, groups, index, wraps):
        self.cfg, self.index, self.wraps = cfg, index, wraps
        self.fields = {id(arg): (k, t, f) for k, (t, args) in enumerate(groups) for f, arg in enumerate(args)}

    def row_store(self, pointer, data, size):
        """``(bytes of a row, checks)``: the expression of the row's size in bytes and the
        checks that the store through ``pointer`` (``size`` bytes) stays in its row; or None."""
        form = {}
        while pointer is not data:
            if getattr(pointer, "opcode", None) != "getelementptr" or len(pointer.operands) != 2 \
                    or pointer.element_type not in SIZES:
                return None
            self.add(form, pointer.operands[1], SIZES[pointer.element_type])
            pointer = pointer.operands[0].defn
        rows = [(leaf, scale) for leaf, scale in form.items() if leaf != 1 and self.is_row(leaf)]
        if size is None or len(rows) != 1:
            return None
        (row, scale), = rows
        del form[row]
        length = self.expression(self.other_factor(row))
        column = self.column(form)
        if length is None or column is None or scale <= 0:
            return None
        low, high, checks = column
        row_bytes = f"({length}) * {scale}"
        return row_bytes, checks + [f"{low} >= 0", f"{high} + {size} <= {row_bytes}"]

    def add(self, form, op, scale):
        """Add ``scale`` times the linear form of operand ``op`` into ``form``
        (``{leaf instruction or 1: coefficient}``)."""
        d = op.defn
        if op.is_const:
            form[1] = form.get(1, 0) + int(op.ref) * scale
        elif getattr(d, "opcode", None) in _TRANSPARENT:
            self.add(form, d.operands[0], scale)
        elif getattr(d, "opcode", None) in ("add", "sub"):
            self.add(form, d.operands[0], scale)
            self.add(form, d.operands[1], -scale if d.opcode == "sub" else scale)
        elif getattr(d, "opcode", None) in ("mul", "shl") and d.operands[1].is_const:
            factor = int(d.operands[1].ref)
            self.add(form, d.operands[0], scale * (factor if d.opcode == "mul" else 1 << factor))
        else:
            form[d] = form.get(d, 0) + scale

    def is_row(self, leaf):
        """Whether ``leaf`` is ``i * R`` with ``i`` the loop index (or its wrap-around)."""
        return getattr(leaf, "opcode", None) == "mul" and any(self.is_index(o.defn) for o in leaf.operands)

    def is_index(self, d):
        while getattr(d, "opcode", None) in _TRANSPARENT:
            d = d.operands[0].defn
        if d is self.index:
            return True
        if getattr(d, "opcode", None) != "add":
            return False
        a, b = (o.defn for o in d.operands)
        return (self.is_index(a) and self.wraps(b, self.index)) or (self.is_index(b) and self.wraps(a, self.index))

    def other_factor(self, row):
        a, b = row.operands
        return b if self.is_index(a.defn) else a

    def column(self, form):
        """``(lowest, highest, checks)``: expressions of the least and greatest byte offset
        within the row that ``form`` takes, and the conditions they hold under; or None."""
        low = high = str(form.pop(1, 0))
        checks = []
        for leaf, scale in form.items():
            span = self.counter_span(leaf, checks) or self.wrap_span(leaf, checks)
            if span is None:
                fixed = self.defined(leaf)
                if fixed is None:
                    return None
                span = (fixed, fixed)
            first, last = span if scale > 0 else span[::-1]
            low, high = f"{low} + {scale} * ({first})", f"{high} + {scale} * ({last})"
        return low, high, checks

    def counter_span(self, phi, checks):
        """``(first, last)`` expressions of the values counter ``phi`` of an inner loop
        takes (its exit test's start and end), adding the check that the loop ends; else None."""
        loop = self.cfg.loop_at.get(getattr(phi, "block", None))
        if loop is None or phi.opcode != "phi":
            return None
        outside = next((p for p in loop.header.preds if p not in loop.blocks), None)
        test = exit_test(loop, outside) if outside is not None else None
        if test is None or test.counter is not phi or test.step not in (1, -1):
            return None
        start, bound = self.expression(test.start), self.expression(test.bound)
        if start is None or bound is None:
            return None
        _, offset, pick = ENDS[test.predicate]
        first = f"({start}) + {test.step}" if test.on_next else start
        end = f"({bound}) + {offset}"
        if pick is not None:
            end = f"{'max' if pick.endswith('max') else 'min'}({first}, {end})"
        last = f"({end}) - {test.step}" if test.on_next else end
        span = (start, last) if test.step > 0 else (last, start)
        checks.append(f"{span[0]} <= {span[1]}")
        return span

    def wrap_span(self, leaf, checks):
        """For Numba's wrap-around of a negative inner counter, ``(0, 0)`` with the check
        that the counter starts at 0 or above; else None."""
        counter = leaf.operands[0].defn.operands[0].defn if getattr(leaf, "opcode", None) == "select" \
            and getattr(leaf.operands[0].defn, "opcode", None) == "icmp" else None
        if counter is None or not self.wraps(leaf, counter):
            return None
        while getattr(counter, "opcode", None) in _TRANSPARENT:
            counter = counter.operands[0].defn
        inner = []
        span = self.counter_span(counter, inner)
        if span is None:
            return None
        checks += inner + [f"{span[0]} >= 0"]
        return "0", "0"

    def expression(self, op):
        """A Python expression of operand ``op``'s value over the launcher's arguments
        (``a<k>``), when it is fixed for a call; else None."""
        if op.is_const:
            return op.ref if op.ref.lstrip("-").isdigit() else None
        return self.defined(op.defn)

    def defined(self, d):
        """:meth:`expression` of the value instruction or argument ``d`` defines."""
        if isinstance(d, Arg):
            return self.argument(d)
        if d.opcode in _TRANSPARENT:
            return self.expression(d.operands[0])
        if d.opcode in ("add", "sub", "mul"):
            a, b = (self.expression(o) for o in d.operands)
            sign = {"add": "+", "sub": "-", "mul": "*"}[d.opcode]
            return None if a is None or b is None else f"({a} {sign} {b})"
        return None

    def argument(self, arg):
        """``a<k>`` for an integer argument, ``a<k>.shape[d]`` / ``.strides[d]`` / ``.size``
        / ``.itemsize`` for an array's field; else None."""
        k, t, f = self.fields.get(id(arg), (None, None, None))
        if k is None:
            return None
        if not isinstance(t, nbtypes.Array):
            return f"a{k}" if isinstance(t, nbtypes.Integer) else None
        shape, strides = numba_abi.SHAPE, numba_abi.SHAPE + t.ndim
        if shape <= f < strides:
            return f"a{k}.shape[{f - shape}]"
        if strides <= f < strides + t.ndim:
            return f"a{k}.strides[{f - strides}]"
        return {numba_abi.NITEMS: f"a{k}.size", numba_abi.ITEMSIZE: f"a{k}.itemsize"}.get(f)
