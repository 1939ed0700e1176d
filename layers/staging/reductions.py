"""Records reducing along axes in the staged program: ``sum``, ``mean``, ``max`` and ``min``
in loops, ``softmax``, ``logsoftmax`` and ``logsumexp`` by the line kernels of
:mod:`layers.kernels`."""
import numpy as np

from adcore.errors import UnsupportedError

from .. import kernels


class Reductions:
    """The reductions of :class:`layers.staging.lower.Lowering`."""

    def reduce(self, rec, value):
        x = self.views[rec.inputs[0]]
        axes = rec.attrs.get("axis")
        axes = tuple(range(len(x.shape))) if axes is None else tuple(axes)
        out = self.buffer(value.shape, value.dtype)
        kept = [d for d in range(len(x.shape)) if d not in axes]
        outer = self.open_loops([x.shape[d] for d in kept])
        n = int(np.prod([x.shape[d] for d in axes], dtype=np.int64))
        full = dict(zip(kept, outer))
        first = x.at([full.get(d, "0") for d in range(len(x.shape))])
        op, acc = rec.op, self.fresh("acc")
        self.emit(f"{acc} = {'0.0' if op in ('sum', 'mean') else first}")
        inner = self.open_loops([x.shape[d] for d in axes])
        full.update(zip(axes, inner))
        v = x.at([full[d] for d in range(len(x.shape))])
        if op in ("sum", "mean"):
            self.emit(f"{acc} += {v}")
        else:
            self.emit(f"if {v} {'>' if op == 'max' else '<'} {acc}:")
            self.emit(f"    {acc} = {v}")
        self.close_loops(inner)
        out_idx = outer if not rec.attrs.get("keepdims") else \
            [full.get(d, "0") if d in kept else "0" for d in range(len(x.shape))]
        if len(out_idx) != len(out.shape):   # a 0-d reduction kept as shape ()
            out_idx = []
        self.emit(f"{out.at(out_idx)} = {acc}" + (f" / {n}" if op == "mean" else ""))
        self.close_loops(outer)
        return out

    def _loops_but(self, x, axis):
        """Loops over every axis but ``axis``; returns the index list with a hole at ``axis``."""
        other = [d for d in range(len(x.shape)) if d != axis]
        idx = self.open_loops([x.shape[d] for d in other])
        full = dict(zip(other, idx))
        return idx, [full.get(d, "0") for d in range(len(x.shape))]

    def softmax(self, rec, value):
        x = self.views[rec.inputs[0]]
        if x.base is None:
            x = self.copy(x.broadcast((1,))).reshape(())
        axis = rec.attrs.get("axis", -1) % max(len(x.shape), 1)
        out = self.buffer(value.shape, value.dtype)
        idx, at = self._loops_but(x, axis)
        self.emit_kernel(getattr(kernels, f"{rec.op}_line"), out.base, out.offset(at), out.strides[axis],
                         x.base, x.offset(at), x.strides[axis], x.shape[axis])
        self.close_loops(idx)
        return out

    def logsumexp(self, rec, value):
        x = self.views[rec.inputs[0]]
        axes = rec.attrs.get("axis")
        axes = tuple(range(len(x.shape))) if axes is None else tuple(axes)
        if len(axes) > 1 and axes == tuple(range(len(x.shape))):
            flat = (int(np.prod(x.shape)),)
            x, axes = x.reshape(flat) or self.copy(x).reshape(flat), (0,)
        if len(axes) != 1:
            raise UnsupportedError("logsumexp over several axes",
                                   detail="the compiled path reduces along one axis")
        axis = axes[0]
        out = self.buffer(value.shape, value.dtype)
        idx, at = self._loops_but(x, axis)
        o = [v for d, v in enumerate(at) if d != axis]
        if rec.attrs.get("keepdims"):
            o = at
        self.emit_kernel(kernels.logsumexp_line, out.at(o), x.base, x.offset(at), x.strides[axis],
                         x.shape[axis])
        self.close_loops(idx)
        return out
