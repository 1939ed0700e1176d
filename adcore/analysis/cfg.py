"""Control-flow analyses: reverse post-order, dominators, cycles, natural loops and
the induction variables that let the reverse pass run a loop's counter backwards."""
from ..ir.model import gep_element_type


def reverse_post_order(func):
    seen, order = set(), []

    def visit(b):
        stack = [(b, iter(b.succ))]
        seen.add(b)
        while stack:
            node, it = stack[-1]
            nxt = next((s for s in it if s not in seen), None)
            if nxt is None:
                order.append(node)
                stack.pop()
            else:
                seen.add(nxt)
                stack.append((nxt, iter(nxt.succ)))

    visit(func.entry)
    return order[::-1]


def dominators(func, rpo):
    """Immediate dominators (Cooper, Harvey and Kennedy's iterative algorithm)."""
    index = {b: i for i, b in enumerate(rpo)}
    idom = {func.entry: func.entry}

    def intersect(a, b):
        while a is not b:
            while index[a] > index[b]:
                a = idom[a]
            while index[b] > index[a]:
                b = idom[b]
        return a

    changed = True
    while changed:
        changed = False
        for b in rpo[1:]:
            preds = [p for p in b.preds if p in idom]
            new = preds[0]
            for p in preds[1:]:
                new = intersect(p, new)
            if idom.get(b) is not new:
                idom[b] = new
                changed = True
    return idom


def dominates(idom, a, b):
    while True:
        if b is a:
            return True
        if idom[b] is b:
            return False
        b = idom[b]


class Loop:
    def __init__(self, header):
        self.header = header
        self.blocks = {header}
        self.latches = []

    def __repr__(self):
        return f"Loop({self.header.name}, {len(self.blocks)} blocks)"


class InductionVariable:
    """A header phi ``p = phi [init, outside], [p + step, latch]`` with a constant step."""

    def __init__(self, phi, init, outside, latch, step_instr):
        self.phi, self.init, self.outside, self.latch = phi, init, outside, latch
        self.step_instr = step_instr


class ControlFlow:
    """CFG facts of one function: reachable blocks in RPO, dominators, loops, cycles."""

    def __init__(self, func):
        self.rpo = reverse_post_order(func)
        reachable = set(self.rpo)
        for b in func.blocks:
            b.preds = [p for p in b.preds if p in reachable]
        self.idom = dominators(func, self.rpo)
        self.loops = self._natural_loops()
        self.loop_at = {loop.header: loop for loop in self.loops}
        self.cyclic = on_cycles(self.rpo, lambda b: b.succ)
        self.ivs = {}
        for loop in self.loops:
            iv = self._induction_variable(loop)
            if iv is not None:
                self.ivs[loop.header] = iv
        self.branch_merges = {b: m for b in self.rpo if b not in self.ivs
                              for m in [self._branch_merge(b)] if m is not None}

    def _branch_merge(self, block):
        """For a block joining the two sides of its immediate dominator's conditional
        branch, ``(condition, pred on the true side, pred on the false side)``: the reverse
        pass can tell where it came from by the condition instead of a record."""
        if len(block.preds) != 2:
            return None
        d = self.idom.get(block)
        term = d.term if d is not None else None
        if term is None or term.opcode != "br" or len(term.succ) != 2 or term.succ[0] is term.succ[1]:
            return None
        false_dest, true_dest = term.succ

        def side(pred, dest):
            if dest is block:
                return pred is d
            return len(dest.preds) == 1 and dominates(self.idom, dest, pred)

        t = [p for p in block.preds if side(p, true_dest)]
        f = [p for p in block.preds if side(p, false_dest)]
        if len(t) != 1 or len(f) != 1 or t[0] is f[0]:
            return None
        return term.operands[0], t[0], f[0]

    def _natural_loops(self):
        loops = {}
        for b in self.rpo:
            for s in b.succ:
                if dominates(self.idom, s, b):
                    loop = loops.setdefault(s, Loop(s))
                    loop.latches.append(b)
                    stack = [b]
                    while stack:
                        n = stack.pop()
                        if n not in loop.blocks:
                            loop.blocks.add(n)
                            stack.extend(n.preds)
        return list(loops.values())

    def _induction_variable(self, loop):
        h = loop.header
        if len(h.preds) != 2 or len(loop.latches) != 1:
            return None
        latch = loop.latches[0]
        outside = next((p for p in h.preds if p not in loop.blocks), None)
        if outside is None:
            return None
        for phi in h.phis:
            if phi.type.startswith("i") or phi.type == "ptr":
                k = phi.incoming.index(latch)
                step = phi.operands[k].defn
                if step is not None and step_of(step, phi) is not None:
                    init = phi.operands[phi.incoming.index(outside)]
                    return InductionVariable(phi, init, outside, latch, step)
        return None


def step_of(instr, phi):
    """For ``instr = phi + C`` (add, sub or a one-index gep with constant C) return the
    text of the instruction that undoes it on a value named ``{x}``; else None."""
    ops = getattr(instr, "operands", None)
    if not ops or getattr(instr, "opcode", None) not in ("add", "sub", "getelementptr"):
        return None
    if instr.opcode == "getelementptr":
        if len(ops) != 2 or ops[0].defn is not phi or not ops[1].is_const:
            return None
        return f"getelementptr {gep_element_type(instr)}, ptr {{x}}, {ops[1].type} {_negate(ops[1].ref)}"
    a, b = ops
    if instr.opcode == "add" and a.defn is phi and b.is_const and _is_int(b.ref):
        return f"sub {phi.type} {{x}}, {b.ref}"
    if instr.opcode == "add" and b.defn is phi and a.is_const and _is_int(a.ref):
        return f"sub {phi.type} {{x}}, {a.ref}"
    if instr.opcode == "sub" and a.defn is phi and b.is_const and _is_int(b.ref):
        return f"add {phi.type} {{x}}, {b.ref}"
    return None


def _is_int(text):
    try:
        return int(text) != 0
    except ValueError:
        return False


def _negate(text):
    return str(-int(text))


def on_cycles(nodes, successors):
    """The nodes that lie on a cycle of the graph ``successors(node)`` spans from ``nodes``
    (the strongly connected components with a cycle: Tarjan's algorithm, iteratively)."""
    index, low, stack, on, out = {}, {}, [], set(), set()
    for root in nodes:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        work = [(root, iter(successors(root)))]
        while work:
            node, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        x = stack.pop()
                        on.discard(x)
                        component.append(x)
                        if x == node:
                            break
                    if len(component) > 1 or node in successors(node):
                        out.update(component)
            elif w not in index:
                index[w] = low[w] = len(index)
                stack.append(w)
                on.add(w)
                work.append((w, iter(successors(w))))
            elif w in on:
                low[node] = min(low[node], index[w])
    return out
