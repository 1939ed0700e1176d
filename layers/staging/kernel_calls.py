"""Calls of users' ``@njit`` layer kernels (``njit_kernel`` records) in the staged program:
each operand and the output in a buffer of its own shape (``Kind.KBUF``), constant operands
passed through or baked."""
import numpy as np

from adcore.errors import UnsupportedError

from .arguments import Arg, Kind
from .trace import Derived


class KernelCalls:
    """The kernel calls of :class:`layers.staging.lower.Lowering`: kernels go into its
    ``globals`` under the names of its ``kernel_names``."""

    def kernel_call(self, rec, value):
        """A user ``@njit`` kernel ``kernel(out, *operands)``: operands and output get
        buffers of their own (with real shapes; the output's zeroed first); the output is
        then copied to the workspace."""
        kernel = rec.attrs["kernel"]
        name = self.kernel_names.setdefault(kernel, f"KF{len(self.kernel_names)}")
        self.globals[name] = kernel
        bufs = []
        out_buf = self._kbuf(value.shape, value.dtype)
        for k, v in enumerate(rec.args):
            if isinstance(v, np.ndarray) and v.ndim > 0 and rec.inputs[k] is None:
                bufs.append(self._kernel_const(v))
            elif isinstance(v, np.ndarray) and v.ndim > 0:
                src = self.operand(rec, k)
                b = self._kbuf(v.shape, v.dtype)
                idx = self.open_loops(v.shape)
                self.emit(f"{b}[{', '.join(idx)}] = {src.at(idx)}")
                self.close_loops(idx)
                bufs.append(b)
            else:
                src = self.operand(rec, k)
                bufs.append(src.at([]) if src is not None else "None")
        idx = self.open_loops(value.shape)   # zeroed at every call: the kernel gets a new
        self.emit(f"{out_buf}[{', '.join(idx)}] = 0")   # zero array, and may skip entries
        self.close_loops(idx)
        self.emit(f"{name}({', '.join([out_buf] + bufs)})")
        out = self.buffer(value.shape, value.dtype)
        idx = self.open_loops(value.shape)
        self.emit(f"{out.at(idx)} = {out_buf}[{', '.join(idx)}]")
        self.close_loops(idx)
        return out

    def _kernel_const(self, v):
        """A constant operand of a user kernel, in its own shape: a layer's state array
        (``states``, which the kernel may update) and an integer argument array
        (``indices``) are passed through, anything else is baked."""
        if isinstance(v, Derived):
            self.const(v)
        name = self.states.get(id(v))
        if name is not None:
            self.state_arg(name)
            return name if v.ndim == 1 else f"{name}.reshape({v.shape})"
        key = self.indices.get(id(v))
        if key is not None:
            name = f"{key}nd"
            if all(a.name != name for a in self.args):
                self.args.append(Arg(name, Kind.INDEX_ND, key))
            return name
        name = self.fresh("C")
        self.args.append(Arg(name, Kind.CONST, np.ascontiguousarray(v)))
        return name

    def _kbuf(self, shape, dtype):
        if not shape:
            raise UnsupportedError("a 0-d array handed to an njit layer kernel",
                                   detail="give kernel outputs and operands at least one dimension")
        name = self.fresh("B")
        self.args.append(Arg(name, Kind.KBUF, (tuple(shape), np.dtype(dtype))))
        return name
