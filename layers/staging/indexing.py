"""Indexing records in the staged program: basic indexing as views, advanced indexing
(``getitem`` with integer arrays, ``take``) as gathers into the workspace, and ``setitem``
on a copy."""
import numpy as np

from adcore.errors import UnsupportedError

from .trace import Derived, ValueDependentError
from .views import View


class Indexing:
    """The indexing of :class:`layers.staging.lower.Lowering`; integer argument arrays are
    looked up in its ``indices``."""

    def getitem(self, rec, value):
        x, index = self.views[rec.inputs[0]], rec.attrs["index"]
        items = list(index) if isinstance(index, tuple) else [index]
        if not any(isinstance(i, (list, np.ndarray)) for i in items):
            if x.base is None:
                return x
            return x.basic_index(index)
        return self._gather(x, items, value)

    def _gather(self, x, items, value):
        """Advanced indexing with numpy's rules: integer arrays (and ints next to them)
        broadcast together; their dimensions go in place when adjacent, else first."""
        if any(i is Ellipsis for i in items):
            k = items.index(Ellipsis)
            used = sum(1 for i in items if i is not None and i is not Ellipsis)
            items[k:k + 1] = [slice(None)] * (len(x.shape) - used)
        items += [slice(None)] * (len(x.shape) - sum(1 for i in items if i is not None))
        arrays, pieces, d = {}, [], 0
        for p, it in enumerate(items):
            if isinstance(it, (list, np.ndarray)):
                arrays[p] = (self._index(it), d)
            elif isinstance(it, (int, np.integer)):
                arrays[p] = (View.scalar(str(int(it)), np.int64), d)
            elif it is None:
                pieces.append(None)
                continue
            else:
                pieces.append((d,) + it.indices(x.shape[d]))
            d += 1
        adv = sorted(arrays)
        bshape = np.broadcast_shapes(*(arrays[p][0].shape for p in adv))
        first = adv[0] if adv == list(range(adv[0], adv[-1] + 1)) else 0
        pieces.insert(sum(1 for p, it in enumerate(items[:first]) if p not in arrays), "adv")
        out = self.buffer(value.shape, value.dtype)
        idx = self.open_loops(out.shape)
        pos, terms, bidx = 0, [str(x.off)], None
        for pc in pieces:
            if pc == "adv":
                bidx = idx[pos:pos + len(bshape)]
                pos += len(bshape)
                continue
            if pc is not None:
                dim, start, _, step = pc
                terms.append(f"({start} + {idx[pos]} * {step}) * {x.strides[dim]}")
            pos += 1
        for p in adv:
            view, dim = arrays[p]
            iv = view.broadcast(bshape).at(bidx)
            terms.append(f"(({iv}) % {x.shape[dim]}) * {x.strides[dim]}")
        self.emit(f"{out.at(idx)} = {x.base}[{' + '.join(terms)}]")
        self.close_loops(idx)
        return out

    def _index(self, it):
        """An integer index array as a view of a program argument."""
        a = np.asarray(it) if isinstance(it, list) else it
        if a.dtype == bool:
            if id(a) in self.indices or isinstance(a, Derived):
                raise ValueDependentError("indexes with a boolean mask taken from the data "
                                          "(the result's shape depends on values)")
            a = np.nonzero(a)[0]
        return self.const(a)

    def take(self, rec, value):
        x = self.views[rec.inputs[0]]
        axis = rec.attrs.get("axis")
        if axis is None:
            flat = (int(np.prod(x.shape)),)
            x = x.reshape(flat) or self.copy(x).reshape(flat)
            return self._gather(x, [rec.args[1]], value)
        axis %= len(x.shape)
        return self._gather(x, [slice(None)] * axis + [rec.args[1]], value)

    def setitem(self, rec, value):
        index = rec.attrs["index"]
        items = index if isinstance(index, tuple) else (index,)
        if any(isinstance(i, (list, np.ndarray)) for i in items):
            raise UnsupportedError("assignment with an integer-array index",
                                   detail="the compiled path assigns to basic slices only")
        out = self.copy(self.views[rec.inputs[0]], value.dtype)
        target = out.basic_index(index)
        self.store(target, "{0}", [self.operand(rec, 1)])
        return out
