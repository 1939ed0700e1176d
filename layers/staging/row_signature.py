"""What a recording computes, up to the number of the batch's rows: the same for the
recording of a part of a batch as for the whole batch's exactly when the loss's Python
code did the same thing for both (no constant, slice or shape that depends on the batch
size).  ``row_split`` stages one part of a batch and runs it only if the two agree."""
import numpy as np

from .trace import Derived, TapeRef

ROWS = "rows"           # a row value's first dimension, whatever the batch


def signature(records, rowed):
    """Per record up to the last one: its operation, operands, attributes and shape, with
    the first dimension of the values in ``rowed`` (record ids) left out."""
    return [(rec.op, rec.inputs, _shape(rec.value, rec.out in rowed),
             tuple(None if i is not None else _constant(a) for a, i in zip(rec.args, rec.inputs))
             if rec.op != "input" else (),
             tuple((k, _attribute(k, v, rec.out in rowed)) for k, v in sorted(rec.attrs.items())))
            for rec in records]


def _shape(value, row):
    shape = tuple(np.shape(value))
    return (ROWS,) + shape[1:] if row and shape else shape


def _constant(a):
    if isinstance(a, Derived):      # recomputed in the program from its expression
        if a.expr is None:
            return ("derived", None)
        return ("derived", a.expr[0], tuple(("ref", v.id) if isinstance(v, TapeRef) else
                                            _constant(v) for v in a.expr[1]))
    return ("value", type(a).__name__, _plain(a))


def _attribute(name, value, row):
    if row and name == "shape" and isinstance(value, tuple) and value:
        return (ROWS,) + tuple(value[1:])
    return _plain(value)


def _plain(value):
    """``value`` compared in full (``repr`` elides long arrays)."""
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (tuple, list)):
        return (type(value).__name__,) + tuple(_plain(v) for v in value)
    return repr(value)
