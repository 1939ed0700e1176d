"""``concatenate`` and ``stack`` records in the staged program: each part stored into its
slice of a fresh workspace buffer."""
import numpy as np


class Joins:
    """The joins of :class:`layers.staging.lower.Lowering`."""

    def join(self, rec, value):
        out = self.buffer(value.shape, value.dtype)
        axis = rec.attrs.get("axis", 0)
        if rec.op == "concatenate" and axis is None:
            parts = [self.operand(rec, k) for k in range(len(rec.args))]
            parts = [p.reshape((int(np.prod(p.shape)),)) or
                     self.copy(p).reshape((int(np.prod(p.shape)),)) for p in parts]
            axis = 0
        else:
            parts = [self.operand(rec, k) for k in range(len(rec.args))]
        start = 0
        for p in parts:
            if rec.op == "stack":
                where = (slice(None),) * axis + (start,)
                start += 1
            else:
                n = p.shape[axis]
                where = (slice(None),) * axis + (slice(start, start + n),)
                start += n
            self.store(out.basic_index(where), "{0}", [p])
        return out
