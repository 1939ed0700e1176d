"""The state of one array in an optimiser state tree."""
import numpy as np


class Leaf:
    """The state of one array: its ``rule``, the rule's ``state`` and a ``frozen`` flag."""

    __slots__ = ("rule", "state", "frozen")

    def __init__(self, rule, state, frozen=False):
        self.rule, self.state, self.frozen = rule, state, frozen

    def __eq__(self, other):
        return (isinstance(other, Leaf) and self.rule == other.rule
                and self.frozen == other.frozen and _same_state(self.state, other.state))

    __hash__ = object.__hash__

    def __repr__(self):
        frozen = ", frozen=True" if self.frozen else ""
        return f"Leaf({self.rule!r}, {_state_repr(self.state)}{frozen})"


def _same_state(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
                and a.shape == b.shape and np.array_equal(a, b))
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(map(_same_state, a, b))
    return a == b


def _state_repr(s):
    if isinstance(s, np.ndarray):
        if s.size <= 3:
            return repr([round(float(v), 6) for v in s])
        return f"<{s.dtype} array of {s.size}>"
    if isinstance(s, tuple):
        return "(" + ", ".join(map(_state_repr, s)) + ("," if len(s) == 1 else "") + ")"
    return repr(s)
