"""Which rows a parallel loop's iterations write and read: the proofs that let a loop
writing a 2-D array in the loop index's row (``v[i, j] = ...``), or reading one at
neighbouring rows (``u[i - 1, j] + u[i + 1, j]``), run its reverse on threads.

An access through array ``a``'s data pointer whose byte offset is linear in the loop
index ``i``,

    offset = i * B + c,     c = k + sum of t * x  over the other values x it depends on,

with ``B`` (the bytes of a row, ``a.shape[1] * 8``), ``k`` and each ``t`` fixed for the
call, and each ``x`` the counter of an inner loop (running between a start and an end
fixed for the call, :mod:`adcore.analysis.exit_values`) or Numba's wrap-around of a
negative index (``x < 0 ? n : 0``, zero over the loop's range), touches bytes
``[i * B + min(c), i * B + max(c) + size)``.  A wrap-around of the loop index plus a value
fixed for the call (``u[k - p]`` on a flat grid, read under a test that keeps ``k - p``
nonnegative, which the analysis does not follow) may be taken by the loop's first
iterations: the access is then a :class:`Wrap` as well.  Then

* stores (:func:`row_checks`) stay in row ``i`` when ``0 <= min(c)`` and
  ``max(c) + size <= B``: distinct iterations write disjoint bytes, and so do their
  reverses in the shadow; loads that stay in the row (``x[i, j]``) likewise add into
  disjoint bytes of their shadow;
* loads (:func:`band_checks`) reach at most ``max(c) + size - min(c)`` bytes from their
  row's start: two pieces of the loop at least ``w`` iterations apart touch disjoint bytes
  when that band is at most ``(w + 1) * B``, so the reverses of every other piece (pieces
  of ``n // chunks`` iterations or more) can add into one shared shadow at once; where an
  access may wrap around, when every iteration that wraps is in the first piece and what it
  wraps to lies past the bands of the other pieces that run with it (those of even rank).

The bounds are only known at the call: both return Python expressions over the chunk
function's arguments (``a2.shape[1]``, ``a3``) and the launcher's ``lo`` (the loop's
first index), ``n`` (its length) and ``chunks`` (its number of pieces), which the loop's
launchers test at each call; where a test fails the pieces run one after another in the
serial order (exactly the serial loop).
"""
from typing import NamedTuple

from numba.core import types as nbtypes

from .. import numba_abi
from ..analysis.cfg import ControlFlow
from ..analysis.exit_values import ENDS, exit_test, step_constant
from ..ir.model import Arg
from .value_stack import SIZES

_TRANSPARENT = ("sext", "zext")
# icmp predicates as Python comparisons of int64 values ("ugt x, c" with 0 <= c < 2**63:
# x as unsigned above c, that is x negative or above c)
_PYTHON_COMPARE = {"slt": "({x}) < ({y})", "sle": "({x}) <= ({y})", "sgt": "({x}) > ({y})",
                   "sge": "({x}) >= ({y})", "eq": "({x}) == ({y})", "ne": "({x}) != ({y})",
                   "ugt": "(({x}) < 0 or ({x}) > ({y}))"}

# For ``select (x P C), a, b``: the condition under which ``x P C`` holds for every ``x`` in
# ``[low, high]`` (True) and under which it fails for every one (False).
_ALWAYS = {
    ("slt", True): "{high} < {c}", ("sle", True): "{high} <= {c}",
    ("sgt", True): "{low} > {c}", ("sge", True): "{low} >= {c}",
    ("slt", False): "{low} >= {c}", ("sle", False): "{low} > {c}",
    ("sgt", False): "{high} <= {c}", ("sge", False): "{high} < {c}",
}


# For a wrap-around ``select (x P C), a, b`` of the loop index plus a value fixed for the call
# (keyed by P and whether the zero is ``a``): the other side is taken for ``x < C + below``.
_WRAPS_BELOW = {("slt", False): 0, ("sle", False): 1, ("sgt", True): 1, ("sge", True): 0}


def row_checks(func, groups, data, index, opcode="store"):
    """``[Python expression]`` that, true at a call, prove every store through array data
    pointer ``data`` of ``func`` (a chunk function, its arguments in ``groups`` as
    ``[(Numba type, LLVM arguments)]``) touches only the row of loop index ``index``; None
    when some store is not of that form.  For ``opcode`` ``"load"``, the same for the loads,
    when none is at a fixed offset from the row's start (``x[i, j]``; ``x[i - 1, j]`` is
    a band, :func:`band_checks`)."""
    spans = _spans(func, groups, data, index, opcode)
    if spans is None or opcode == "load" and any(s.offset != "0" for s in spans):
        return None
    checks = []
    for s in spans:
        checks += s.checks + [w.never for w in s.wraps] + [f"{s.low} >= 0", f"{s.end} <= {s.row}"]
    return list(dict.fromkeys(checks))


def band_checks(func, groups, data, index):
    """``[Python expression]`` that, true at a call, prove the loads through ``data`` of
    pieces of the loop two or more pieces apart touch disjoint bytes (see the module's
    docstring); None when some load is not of the linear form."""
    spans = _spans(func, groups, data, index, "load")
    if not spans:
        return None
    checks = [c for s in spans for c in s.checks]
    row = spans[0].row
    lows, ends = ", ".join(s.low for s in spans), ", ".join(s.end for s in spans)
    band = f"({spans[0].end}) - ({spans[0].low})" if len(spans) == 1 else f"max({ends}) - min({lows})"
    top = f"(lo + (n * ((chunks - 1) // 2 * 2 + 1)) // chunks - 1) * ({row}) + max({ends}, 0)"
    for s in spans:       # the first piece's wrapped accesses, past the other even pieces' bands
        checks += [f"({w.never}) or (lo + n // chunks >= {w.first_kept} and {w.shift} >= 0 and "
                   f"lo * ({row}) + {s.low} + {w.shift} >= {top})" for w in s.wraps]
    return list(dict.fromkeys(checks + [f"{band} <= (n // chunks + 1) * ({row})"]))


def _spans(func, groups, data, index, opcode):
    """The :class:`Span` of every ``opcode`` access through ``data``, all in rows of one
    size; None when some access is not linear."""
    terms = _Terms(ControlFlow(func), groups, index)
    spans = []
    for pointer, size in _accesses(func, data, opcode):
        span = terms.span(pointer, data, size)
        if span is None:
            return None
        spans.append(span)
    return spans if len({s.row for s in spans}) <= 1 else None


def _accesses(func, data, opcode):
    """``[(pointer, bytes)]`` of the loads or stores whose address derives from ``data``."""
    derived, found = {id(data)}, []
    for instr in func.instructions():
        if instr.opcode == "getelementptr" and id(instr.operands[0].defn) in derived:
            derived.add(id(instr))
        elif instr.opcode == opcode == "store" and id(instr.operands[1].defn) in derived:
            found.append((instr.operands[1].defn, SIZES.get(instr.operands[0].type)))
        elif instr.opcode == opcode == "load" and id(instr.operands[0].defn) in derived:
            found.append((instr.operands[0].defn, SIZES.get(instr.type)))
    return found


class Wrap(NamedTuple):
    """Numba's wrap-around of ``i + c`` (``i`` the loop index, ``c`` fixed for the call) in
    an access: ``never`` holds when no iteration of the loop wraps; else the iterations
    before ``first_kept`` add ``shift`` bytes to the offset (Python expressions)."""
    never: str
    first_kept: str
    shift: str


class Span(NamedTuple):
    """What an access touches, relative to the start of the loop index's row: ``row`` (the
    bytes of a row), ``low`` and ``end`` (its lowest offset and the end of its highest
    access) under ``checks``, where the access is not wrapped around (``wraps``: the
    :class:`Wrap` of the loop index it may take), and ``offset``, the part of the offset
    fixed for the call ("0" when it has none): Python expressions over the launcher's
    values."""
    row: str
    low: str
    end: str
    checks: list
    offset: str
    wraps: tuple = ()


def _plus(a, b):
    return b if a is None else f"{a} + {b}"


class _Terms:
    """Linear forms of a chunk function's integer values, and the launcher's expressions
    of the values fixed for a call."""

    def __init__(self, cfg, groups, index):
        self.cfg, self.index = cfg, index
        self.fields = {id(arg): (k, t, f) for k, (t, args) in enumerate(groups) for f, arg in enumerate(args)}
        self.schedule = groups[0][1][numba_abi.DATA]
        self.fixed_checks = []          # what the schedule items' expressions hold under

    def span(self, pointer, data, size):
        """The :class:`Span` of an access of ``size`` bytes through ``pointer``, or None."""
        form = {}
        while pointer is not data:
            if getattr(pointer, "opcode", None) != "getelementptr" or len(pointer.operands) != 2 \
                    or pointer.element_type not in SIZES:
                return None
            if not self.add(form, pointer.operands[1], str(SIZES[pointer.element_type])):
                return None
            pointer = pointer.operands[0].defn
        row = form.pop(self.index, None)
        if size is None or row is None:
            return None
        checks, wraps = [f"{row} > 0"], []
        low = high = offset = form.pop(1, "0")
        for leaf, scale in form.items():
            values = self.counter_span(leaf, checks) or self.select_span(leaf, checks, scale, wraps)
            if values is None:
                return None
            first, last = (f"{scale} * ({v})" for v in values)
            low, high = f"{low} + min({first}, {last})", f"{high} + max({first}, {last})"
        return Span(row, low, f"{high} + {size}", self.fixed_checks + checks, offset, tuple(wraps))

    def add(self, form, op, scale):
        """Add ``scale`` (an expression) times the linear form of operand ``op`` into
        ``form`` (``{leaf instruction or 1: coefficient expression}``); False where a
        constant is not an integer."""
        d = op.defn
        fixed = self.expression(op)
        if fixed is not None:
            form[1] = _plus(form.get(1), f"{scale} * ({fixed})")
        elif op.is_const or d is None:
            return False
        elif d.opcode in _TRANSPARENT:
            return self.add(form, d.operands[0], scale)
        elif d.opcode in ("add", "sub"):
            other = f"-({scale})" if d.opcode == "sub" else scale
            return self.add(form, d.operands[0], scale) and self.add(form, d.operands[1], other)
        elif d.opcode == "shl" and d.operands[1].is_const:
            return self.add(form, d.operands[0], f"{scale} * {1 << int(d.operands[1].ref)}")
        elif d.opcode == "mul" and any(self.expression(o) is not None for o in d.operands):
            factor, varying = sorted(d.operands, key=lambda o: self.expression(o) is None)
            return self.add(form, varying, f"{scale} * ({self.expression(factor)})")
        else:
            form[d] = _plus(form.get(d), scale)
        return True

    def counter_span(self, phi, checks):
        """``(first, last)`` expressions of the values counter ``phi`` of an inner loop
        takes (its exit test's start and end), adding the check that the loop ends; else None."""
        loop = self.cfg.loop_at.get(getattr(phi, "block", None))
        if loop is None or phi.opcode != "phi":
            return None
        outside = next((p for p in loop.header.preds if p not in loop.blocks), None)
        test = exit_test(loop, outside) if outside is not None else None
        if test is None or test.step not in (1, -1):
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
        if test.counter is not phi:       # Numba's range: the test counts the trips down
            latch = phi.operands[phi.incoming.index(loop.latches[0])] if loop.latches[0] in phi.incoming else None
            step = step_constant(latch.defn, phi) if latch is not None and latch.defn is not None else None
            phi_start = self.expression(phi.operands[phi.incoming.index(outside)]) if outside in phi.incoming else None
            if step is None or step[1] is not None or step[0] not in (1, -1) or phi_start is None:
                return None
            trips = f"(({last}) - ({start})) // {test.step}"
            start, last, test_step = phi_start, f"({phi_start}) + {trips} * {step[0]}", step[0]
        else:
            test_step = test.step
        span = (start, last) if test_step > 0 else (last, start)
        checks.append(f"{span[0]} <= {span[1]}")
        return span

    def select_span(self, leaf, checks, scale, wraps):
        """``(0, 0)`` for ``select (x P C), a, b`` with ``x`` an inner counter, the loop index
        or the loop index plus a value fixed for the call, and the side taken for every
        ``x`` of its range a zero (Numba's wrap-around of a negative index), adding the
        check that it is (``x < C ? a : 0`` or ``x >= C ? 0 : b`` of the loop index: to
        ``wraps``, the :class:`Wrap` of ``scale`` times ``a`` or ``b``); else None."""
        if getattr(leaf, "opcode", None) != "select":
            return None
        test, zero = leaf.operands[0].defn, [o.is_const and o.ref == "0" for o in leaf.operands[1:]]
        if getattr(test, "opcode", None) != "icmp" or not any(zero):
            return None
        x = test.operands[0].defn
        while getattr(x, "opcode", None) in _TRANSPARENT:
            x = x.operands[0].defn
        c, shift = self.expression(test.operands[1]), self.index_shift(test.operands[0])
        span = (f"lo + {shift}", f"(lo + n - 1 + {shift})") if shift is not None else self.counter_span(x, checks)
        rule = _ALWAYS.get((test.predicate, zero[0]))
        if span is None or c is None or rule is None:
            return None
        never = rule.format(low=span[0], high=span[1], c=c)
        below = _WRAPS_BELOW.get((test.predicate, zero[0]))     # x below C + below: wrapped
        wrapped = self.expression(leaf.operands[1 + zero[0]])
        if shift is not None and below is not None and wrapped is not None and zero[0] != zero[1]:
            wraps.append(Wrap(never, f"({c}) - ({shift}) + {below}", f"{scale} * ({wrapped})"))
        else:
            checks.append(never)
        return "0", "0"

    def index_shift(self, op):
        """``c`` (an expression) when operand ``op`` is the loop index plus ``c``, a value
        fixed for the call; else None."""
        form = {}
        if not self.add(form, op, "1") or set(form) - {self.index, 1} or form.get(self.index) != "1":
            return None
        return form.get(1, "0")

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
        if d.opcode == "load":
            return self.scheduled(d)
        if d.opcode == "select":
            return self.selected(d)
        if d.opcode in _TRANSPARENT:
            return self.expression(d.operands[0])
        if d.opcode in ("add", "sub", "mul"):
            a, b = (self.expression(o) for o in d.operands)
            sign = {"add": "+", "sub": "-", "mul": "*"}[d.opcode]
            return None if a is None or b is None else f"({a} {sign} {b})"
        return None

    def scheduled(self, load):
        """``a0[k]`` for a load of item ``k > 0`` of the loop's schedule: an inner
        dimension's first or last index (a parfor over several dimensions splits only the
        outermost), under the check that it is not the outermost's last index
        (``a0.shape[0] // 2``, which differs from piece to piece); else None."""
        pointer, k = load.operands[0].defn, 0
        if getattr(pointer, "opcode", None) == "getelementptr" and len(pointer.operands) == 2 \
                and pointer.element_type in SIZES and pointer.operands[1].is_const:
            k = int(pointer.operands[1].ref) * SIZES[pointer.element_type]
            pointer, k = pointer.operands[0].defn, k // 8 if k % 8 == 0 else -1
        if pointer is not self.schedule or k <= 0 or load.type != "i64":
            return None
        self.fixed_checks.append(f"a0.shape[0] // 2 != {k}")
        return f"a0[{k}]"

    def selected(self, select):
        """``(a if x P y else b)`` for ``select (icmp P x, y), a, b`` of values fixed for the
        call (Numba's ``max(0, n)`` of a range's length); else None."""
        test = select.operands[0].defn
        if getattr(test, "opcode", None) != "icmp" or test.predicate not in _PYTHON_COMPARE or \
                test.predicate == "ugt" and not (test.operands[1].is_const and int(test.operands[1].ref) >= 0):
            return None
        x, y, a, b = (self.expression(o) for o in (*test.operands, *select.operands[1:]))
        if None in (x, y, a, b):
            return None
        return f"(({a}) if {_PYTHON_COMPARE[test.predicate].format(x=x, y=y)} else ({b}))"

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
