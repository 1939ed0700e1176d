"""Activity annotations and modes, with Enzyme.jl's names and semantics."""
from .tree import make_zero


class Mode:
    """A differentiation mode; use the singletons ``Reverse``, ``ReverseWithPrimal``,
    ``Forward`` and ``ForwardWithPrimal``."""

    def __init__(self, name, with_primal, forward=False):
        self.name = name
        self.with_primal = with_primal
        self.forward = forward

    def __repr__(self):
        return self.name


Reverse = Mode("Reverse", False)
ReverseWithPrimal = Mode("ReverseWithPrimal", True)
Forward = Mode("Forward", False, forward=True)
ForwardWithPrimal = Mode("ForwardWithPrimal", True, forward=True)


class Annotation:
    """Base class of activity annotations; ``val`` is the primal value."""

    __slots__ = ("val",)

    def __init__(self, val):
        self.val = val

    def __repr__(self):
        return f"{type(self).__name__}({self.val!r})"


class Const(Annotation):
    """An argument that is not differentiated."""


class Active(Annotation):
    """A float argument whose derivative ``autodiff`` returns."""


class Duplicated(Annotation):
    """A value paired with a shadow of the same structure that accumulates its derivative.

    ``Duplicated(x, dx)`` uses ``dx`` as the shadow; ``Duplicated(x)`` makes one with
    ``adcore.make_zero(x)``.  ``dup.val`` is the primal and ``dup.dval`` the shadow.
    """

    __slots__ = ("dval",)

    def __init__(self, val, dval=None):
        self.val = val                  # (not through Annotation.__init__: a repeat call's cost)
        self.dval = make_zero(val) if dval is None else dval

    def __repr__(self):
        show = getattr(type(self.val), "__adcore_show__", None)  # e.g. layers models
        if show is not None:
            return show(self.val, self.dval)
        return f"Duplicated({self.val!r}, {self.dval!r})"


class BatchDuplicated(Annotation):
    """Forward mode with several directions in one pass: ``BatchDuplicated(x, (v1, v2,
    ...))`` carries one tangent per direction (``dval`` is the tuple)."""

    __slots__ = ("dval",)

    def __init__(self, val, dval):
        super().__init__(val)
        self.dval = tuple(dval) if isinstance(dval, (tuple, list)) else dval
