"""The loops whose iteration a value depends on (its *variance*).

A value kept per iteration of a loop nest is pushed once per iteration of every loop around
it; when it does not change with one of them (``exp(q[k])`` inside a loop over points) the
pushes repeat one value.  ``varies_with_every_loop(value)`` tells when that cannot happen.
The variance of a value is found from its operands: a loop's header phi varies with that
loop (and with what it starts from), a load with its address and, when memory it reads may
be written in the loop nest, with every loop around it, a pure instruction with its operands;
anything else is taken to vary with every loop around it.  (A heuristic of the
save-or-recompute policy: either answer gives the same derivatives.)
"""
from ..ir.model import Arg


class LoopVariance:
    """Variances of the values of one function (``cfg``: its control flow; ``can_reload``:
    whether a load's memory stays as it is for the rest of the function; ``is_pure``:
    whether an instruction's result depends on its operands only)."""

    def __init__(self, cfg, can_reload, is_pure):
        self.cfg, self.can_reload, self.is_pure = cfg, can_reload, is_pure
        self._around = {}
        self._memo = {}

    def loops_around(self, block):
        """The headers of the loops that contain ``block``."""
        if block not in self._around:
            self._around[block] = frozenset(h for h, loop in self.cfg.loop_at.items() if block in loop.blocks)
        return self._around[block]

    def varies_with_every_loop(self, value):
        return self.loops_around(value.block) <= self.of(value)

    def of(self, value):
        """The headers of the loops whose iteration ``value`` may change with."""
        if value is None or isinstance(value, Arg):
            return frozenset()
        if value in self._memo:
            return self._memo[value]
        header_phi = value.opcode == "phi" and value.block in self.cfg.loop_at
        # met again through its own step: a counter varies with its loop (and its start)
        self._memo[value] = frozenset([value.block]) if header_phi else self.loops_around(value.block)
        self._memo[value] = out = self._of(value)
        return out

    def _of(self, value):
        operands = lambda ops: frozenset().union(*(self.of(o.defn) for o in ops))   # noqa: E731
        op = value.opcode
        if op == "phi":
            own = frozenset([value.block]) if value.block in self.cfg.loop_at else frozenset()
            return own | operands(value.operands) if own else self.loops_around(value.block)
        if op == "load":
            return operands(value.operands) if self.can_reload(value) else self.loops_around(value.block)
        if self.is_pure(value):
            return operands(value.operands)
        return self.loops_around(value.block)
