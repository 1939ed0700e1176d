"""The values a counted loop's induction variables end with, from the loop's exit test.

The reverse pass runs a loop's counters backwards from the values they ended with.  Without
more knowledge the forward pass pushes those values before each run of the loop (a loop
nested in another pushes them once per outer iteration).  When the loop leaves only through
its latch, on a compare of a counter ``p`` (or ``p + s``) with a value fixed during the loop,
the value ``p`` ends with follows from the test (the forward pass ran, so the loop ended):

    continue while        p (or p + s) ends at          for step s
    V != C                C                             any
    V < C   (s, u)        max(V0, C)                    +1
    V <= C  (s, u)        max(V0, C + 1)                +1
    V > C   (s, u)        min(V0, C)                    -1
    V >= C  (s, u)        min(V0, C - 1)                -1

with ``V0`` the first value ``V`` takes; every other counter ``q`` of the loop ends at
``q0 + (p_end - p0) / s * t`` (its step ``t``).  Nothing is pushed for such a loop.
"""
from .cfg import step_of
from ..ir.model import gep_element_type

_SWAP = {"eq": "eq", "ne": "ne", "slt": "sgt", "sgt": "slt", "sle": "sge", "sge": "sle",
         "ult": "ugt", "ugt": "ult", "ule": "uge", "uge": "ule"}
_NOT = {"eq": "ne", "ne": "eq", "slt": "sge", "sge": "slt", "sle": "sgt", "sgt": "sle",
        "ult": "uge", "uge": "ult", "ule": "ugt", "ugt": "ule"}
# continue predicate -> (step it needs or None for any, bound offset, min or max of V0 and bound)
ENDS = {"ne": (None, 0, None), "slt": (1, 0, "smax"), "ult": (1, 0, "umax"),
         "sle": (1, 1, "smax"), "ule": (1, 1, "umax"), "sgt": (-1, 0, "smin"),
         "ugt": (-1, 0, "umin"), "sge": (-1, -1, "smin"), "uge": (-1, -1, "umin")}


def step_constant(instr, phi):
    """``(C, element type or None)`` for ``instr = phi + C`` (an add, a sub, or a one-index
    gep over elements of that type), else None."""
    if step_of(instr, phi) is None:
        return None
    a, b = instr.operands
    if instr.opcode == "getelementptr":
        return int(b.ref), gep_element_type(instr)
    if instr.opcode == "sub":
        return -int(b.ref), None
    return int(b.ref if a.defn is phi else a.ref), None


class ExitTest:
    """A loop's exit test: the reverse pass computes the end values of its counters."""

    def __init__(self, loop, outside, counter, step, on_next, predicate, bound):
        self.loop, self.outside, self.counter, self.step = loop, outside, counter, step
        self.on_next, self.predicate, self.bound = on_next, predicate, bound

    @property
    def start(self):
        """The operand the tested counter starts from."""
        return _initial(self.counter, self.outside)

    def end_values(self, emit, value_of, counters):
        """Emit (with the :class:`adcore.ir.writer.Emitter` ``emit``) the value each phi in
        ``counters`` (``{phi: step instr}``) ends with; ``value_of(operand)`` names an
        operand in the reverse pass.  Returns ``{phi: name}``."""
        p, s, t = self.counter, self.step, self.counter.type
        p0 = value_of(_initial(p, self.outside))
        c = value_of(self.bound)
        _, offset, pick = ENDS[self.predicate]
        v0 = emit(f"add {t} {p0}, {s}", "v0") if self.on_next else p0
        if offset:
            c = emit(f"add {t} {c}, {offset}", "bound")
        if pick is None:
            v_end = c
        else:
            emit.declare(f"llvm.{pick}.{t}", f"declare {t} @llvm.{pick}.{t}({t}, {t})")
            v_end = emit(f"call {t} @llvm.{pick}.{t}({t} {v0}, {t} {c})", "vend")
        p_end = emit(f"sub {t} {v_end}, {s}", "pend") if self.on_next else v_end
        out = {p: p_end}
        trips = None
        for q, step_instr in counters.items():
            if q is p:
                continue
            if trips is None:
                trips = emit(f"sdiv {t} {emit(f'sub {t} {p_end}, {p0}', 'span')}, {s}", "trips")
            q0 = value_of(_initial(q, self.outside))
            k, element = step_constant(step_instr, q)
            if element is not None:
                n = emit(f"mul i64 {_resized(emit, trips, t, 'i64')}, {k}", "n")
                out[q] = emit(f"getelementptr {element}, ptr {q0}, i64 {n}", "qend")
            else:
                n = emit(f"mul {q.type} {_resized(emit, trips, t, q.type)}, {k}", "n")
                out[q] = emit(f"add {q.type} {q0}, {n}", "qend")
        return out


def _initial(phi, outside):
    return phi.operands[phi.incoming.index(outside)]


def _resized(emit, value, from_, to):
    if from_ == to:
        return value
    bits = lambda t: int(t[1:])         # noqa: E731
    op = "sext" if bits(to) > bits(from_) else "trunc"
    return emit(f"{op} {from_} {value} to {to}", "w")


def exit_test(loop, outside):
    """The :class:`ExitTest` of ``loop`` (entered from ``outside``), or None when the end
    values of its counters cannot be told from it."""
    if len(loop.latches) != 1:
        return None
    latch = loop.latches[0]
    if any(s not in loop.blocks for b in loop.blocks if b is not latch for s in b.succ):
        return None
    term = latch.term
    if term.opcode != "br" or len(term.succ) != 2 or loop.header not in term.succ:
        return None
    cond = term.operands[0].defn
    pred = cond.predicate if getattr(cond, "opcode", None) == "icmp" else None
    if pred is None:
        return None
    a, b = cond.operands
    if _invariant(b, loop) is None:
        a, b, pred = b, a, _SWAP[pred]
    if _invariant(b, loop) is None:
        return None
    _, true_dest = term.succ                          # (false, true): LLVM's operand order, as cfg reads it
    if true_dest is not loop.header:                  # ``br c, exit, header``: continue while not c
        pred = _NOT[pred]
    for phi in loop.header.phis:
        if phi.type == "ptr" or outside not in phi.incoming:
            continue
        step_instr = phi.operands[1 - phi.incoming.index(outside)].defn if len(phi.operands) == 2 else None
        if a.defn is phi:
            on_next = False
        elif a.defn is step_instr:
            on_next = True
        else:
            continue
        constant = step_constant(step_instr, phi) if step_instr is not None else None
        if constant is None or constant[1] is not None or pred not in ENDS:
            return None
        need = ENDS[pred][0]
        if need is not None and constant[0] != need:
            return None
        return ExitTest(loop, outside, phi, constant[0], on_next, pred, b)
    return None


def _invariant(op, loop):
    """``op`` when its value is fixed during ``loop`` (a constant, an argument or a value
    defined outside it), else None."""
    d = op.defn
    if d is None or not hasattr(d, "block") or d.block not in loop.blocks:
        return op
    return None
