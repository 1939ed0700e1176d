"""Strided views of flat buffers, resolved while generating code.

Every array of the generated program is a flat 1-D buffer; a value of the recording
is a ``View`` of one: an offset, a shape and strides in elements, all static.  Views
of views (reshape, transpose, broadcasting, basic indexing) cost nothing at run time:
they only change the index expressions the generated loops use.
"""
import numpy as np


def c_strides(shape):
    out, s = [], 1
    for n in reversed(shape):
        out.append(s)
        s *= n
    return tuple(reversed(out))


class View:
    """``base[off + sum(i_d * strides[d])]`` for a multi-index ``i`` of ``shape``.

    ``base`` names a flat array of the program, or is ``None`` for a scalar whose
    expression is ``expr`` (a program argument or a literal)."""

    __slots__ = ("base", "off", "shape", "strides", "dtype", "expr")

    def __init__(self, base, off, shape, strides, dtype, expr=None):
        self.base, self.off, self.shape, self.strides = base, off, tuple(shape), tuple(strides)
        self.dtype, self.expr = np.dtype(dtype), expr

    @classmethod
    def scalar(cls, expr, dtype):
        return cls(None, 0, (), (), dtype, expr)

    def offset(self, idx):
        """The flat offset expression for index expressions ``idx`` (one per dimension)."""
        terms = [str(self.off)] if self.off else []
        for v, s in zip(idx, self.strides):
            if s and v != "0":
                terms.append(v if s == 1 else f"{v} * {s}")
        return " + ".join(terms) or "0"

    def at(self, idx):
        """The element expression for index expressions ``idx``."""
        if self.base is None:
            return self.expr
        return f"{self.base}[{self.offset(idx)}]"

    def contiguous(self):
        return all(st == c for st, c, n in zip(self.strides, c_strides(self.shape), self.shape)
                   if n != 1)

    def reshape(self, shape):
        """A reshaped view, or ``None`` when the layout needs a copy."""
        if self.base is None or not self.contiguous():
            return None
        return View(self.base, self.off, shape, c_strides(shape), self.dtype)

    def transpose(self, axes):
        return View(self.base, self.off, [self.shape[a] for a in axes],
                    [self.strides[a] for a in axes], self.dtype, self.expr)

    def broadcast(self, shape):
        """This view broadcast to ``shape`` (numpy's rules; stride 0 on repeated axes)."""
        shape = tuple(shape)
        if self.base is None:
            return View(None, 0, shape, (0,) * len(shape), self.dtype, self.expr)
        pad = len(shape) - len(self.shape)
        strides = [0] * pad + [0 if n == 1 and m != 1 else s
                               for n, m, s in zip(self.shape, shape[pad:], self.strides)]
        return View(self.base, self.off, shape, strides, self.dtype)

    def basic_index(self, index):
        """The view ``self[index]`` for ints, slices, ``None`` and ``...``."""
        items = list(index) if isinstance(index, tuple) else [index]
        if any(i is Ellipsis for i in items):
            k = items.index(Ellipsis)
            fill = len(self.shape) - sum(1 for i in items if i is not None and i is not Ellipsis)
            items[k:k + 1] = [slice(None)] * fill
        items += [slice(None)] * (len(self.shape) - sum(1 for i in items if i is not None))
        off, shape, strides, d = self.off, [], [], 0
        for i in items:
            if i is None:
                shape.append(1)
                strides.append(0)
                continue
            n, s = self.shape[d], self.strides[d]
            if isinstance(i, slice):
                start, stop, step = i.indices(n)
                shape.append(len(range(start, stop, step)))
                strides.append(s * step)
                off += start * s
            else:
                off += (int(i) % n) * s
            d += 1
        return View(self.base, off, shape, strides, self.dtype)


class ExprView:
    """An elementwise expression over views (a comparison of traced values, ...): it has
    no memory; ``at`` inlines the expression with its operands' element expressions."""

    __slots__ = ("template", "operands", "shape", "dtype")

    def __init__(self, template, operands, shape, dtype):
        self.template, self.operands = template, operands
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)

    def broadcast(self, shape):
        return ExprView(self.template, [o.broadcast(shape) for o in self.operands], shape,
                        self.dtype)

    def at(self, idx):
        return self.template.format(*(o.at(idx) for o in self.operands))
