"""Which values inside loops the reverse pass keeps: a minimum cut (Enzyme's ``minCut``).

The reverse rules need some primal values per loop iteration (``fmul`` its other operand,
``sin`` its argument, ``exp`` its result).  Each such value can be kept (pushed by the
forward pass, popped by the reverse) or recomputed from its operands when it is pure
(:meth:`adcore.plan.values.Values.recomputable`), which needs those operands in turn, down to
values that cost nothing per iteration (arguments, constants, values outside loops, loop
counters run backwards, values kept anyway) or that must be kept (loads of memory written
later, phis, calls).  Choosing what to keep is a minimum vertex cut in the graph of these
dependencies: the source feeds every value that must be kept, every needed value feeds the
sink, and cutting a value (keeping it) costs its bytes per iteration, weighted by
``DEPTH_WEIGHT`` per level of loop nesting (an inner loop's iteration runs more often).
Three values made from the same two loads are then kept as the two loads (16 bytes per
iteration), where deciding one value at a time keeps all three (24 bytes).

Which values a rule needs is found by running it (its thunks for the active operands) on a
scratch emitter and noting which operands and result it reads.  Values the reverse pass
asks for that are not in the graph (addresses, branch conditions, the operands of custom
rules and calls differentiated as calls) are decided as before, one at a time.
"""
from collections import deque

from ..analysis.memory import is_memory_intrinsic
from ..ir.model import Arg
from ..ir.writer import Emitter, Expr
from ..reverse import value_stack as runtime
from ..rules.scalar import contributions

DEPTH_WEIGHT = 1024          # a byte kept per iteration of a loop nested one level deeper
INF = 1 << 62


def needed_values(func, act, rule_of, is_callee, derivatives):
    """The values the rule table's reverse rules of ``func``'s active instructions read
    (their operands' and results' definitions; for the calls in ``derivatives``, the
    derivative the forward pass keeps)."""
    needed = set()
    for instr in func.instructions():
        if instr not in act.active or instr.opcode in ("phi", "load", "store", "ret") \
                or is_memory_intrinsic(instr) or rule_of(instr) is not None or is_callee(instr):
            continue
        needed |= read_by_rule(instr, act, derivatives.get(instr))
    return needed


class _Read:
    """An operand (or result) handed to a rule in a dry run; notes when the rule reads it."""

    def __init__(self, op, reads):
        self.op, self.type, self.reads = op, op.type, reads

    def __str__(self):
        self.reads.add(self.op.defn)
        return self.op.ref


def read_by_rule(instr, act, derivative=None):
    """The values ``instr``'s rule reads in the reverse pass (a dry run; all of its operands
    and its result where the dry run cannot drive the rule)."""
    reads = set()
    try:
        for _ in contributions(instr, Expr(Emitter(()), instr.type), lambda o: _Read(o, reads),
                               "%ad.dry.dy", act.active, derivative):
            pass
    except Exception:        # no rule, or one the dry run cannot drive: all may be read
        reads |= {o.defn for o in instr.operands} | {instr}
    return {d for d in reads if d is not None and not isinstance(d, Arg)}


class CutPlan:
    """The decision for the values of the graph: ``nodes`` (decided here) and ``kept``
    (those the forward pass keeps; the others are recomputed)."""

    def __init__(self, nodes, kept):
        self.nodes, self.kept = nodes, kept


def plan_cut(values, needed):
    """The :class:`CutPlan` for the ``needed`` values, with ``values`` the reverse pass's
    :class:`adcore.plan.values.Values` (what is recomputable, free, kept anyway)."""
    cfg = values.cfg
    depth = {b: sum(b in loop.blocks for loop in cfg.loops) for b in cfg.rpo}
    graph = _Graph()
    nodes, todo = set(), deque(v for v in needed if not values.free(v))
    sinks = set(todo)
    while todo:
        v = todo.popleft()
        if v in nodes:
            continue
        nodes.add(v)
        weight = DEPTH_WEIGHT ** max(depth.get(v.block, 1) - 1, 0)
        if values.recomputable(v) and not (values.self_derived(v) and values.cheaper_to_keep(v)):
            keepable = v.type in runtime.SIZES and not values.self_derived(v)
            graph.add(("in", v), ("out", v), runtime.size_of(v.type) * weight if keepable else INF)
            for o in v.operands:
                u = o.defn
                if u is None or isinstance(u, Arg) or values.free(u):
                    continue
                graph.add(("out", u), ("in", v), INF)
                todo.append(u)
        else:                                     # must be kept
            graph.add("source", ("in", v), INF)
            graph.add(("in", v), ("out", v), runtime.kept_bytes(v.type) * weight)
    for v in sinks:
        graph.add(("out", v), "sink", INF)
    reached = graph.max_flow_residual_reach("source", "sink")
    kept = {v for v in nodes if ("in", v) in reached and ("out", v) not in reached}
    return CutPlan(nodes, kept)


class _Graph:
    """A flow network with integer capacities (Edmonds-Karp)."""

    def __init__(self):
        self.cap, self.adj = {}, {}

    def add(self, a, b, c):
        self.cap[a, b] = self.cap.get((a, b), 0) + c
        self.cap.setdefault((b, a), 0)
        self.adj.setdefault(a, set()).add(b)
        self.adj.setdefault(b, set()).add(a)

    def _reach(self, s, t):
        """The nodes reachable from ``s`` through edges with capacity left, each with its
        parent on a shortest path (the search stops at ``t``)."""
        parent, queue = {s: None}, deque([s])
        while queue:
            a = queue.popleft()
            if a == t:
                break
            for b in self.adj.get(a, ()):
                if b not in parent and self.cap[a, b] > 0:
                    parent[b] = a
                    queue.append(b)
        return parent

    def max_flow_residual_reach(self, s, t):
        """Push a maximum flow from ``s`` to ``t``; return the nodes still reachable from
        ``s`` (the source side of a minimum cut)."""
        while True:
            parent = self._reach(s, t)
            if t not in parent:
                return set(parent)
            path, b = [], t
            while parent[b] is not None:
                path.append((parent[b], b))
                b = parent[b]
            flow = min(self.cap[e] for e in path)
            for a, b in path:
                self.cap[a, b] -= flow
                self.cap[b, a] += flow
