"""Writing the staged program's lines: statements, loop nests, kernels' lines, and
elementwise stores."""


class Emission:
    """The line writer of :class:`layers.staging.lower.Lowering`: its ``lines``, at the
    indentation ``depth``."""

    def emit(self, line):
        self.lines.append("    " * self.depth + line)

    def emit_kernel(self, kernel, *args):
        """The lines of a loop kernel (:mod:`layers.kernels`, :mod:`layers.vector_kernels`)
        for ``args`` (expressions), written into the program."""
        for line in kernel(self.fresh, *args):
            self.emit(line)

    def open_loops(self, shape):
        idx = []
        for n in shape:
            v = self.fresh("i")
            self.emit(f"for {v} in range({n}):")
            self.depth += 1
            idx.append(v)
        return idx

    def close_loops(self, idx):
        self.depth -= len(idx)

    def store(self, out, template, operands):
        """``out[...] = template(operands[...])`` elementwise, operands broadcast to ``out``;
        a tuple ``template`` holds the lines of a statement assigning ``{out}``."""
        ops = [o.broadcast(out.shape) for o in operands]
        idx = self.open_loops(out.shape)
        values = [o.at(idx) for o in ops]
        if isinstance(template, tuple):
            for line in template:
                self.emit(line.format(*values, out=out.at(idx)))
        else:
            self.emit(f"{out.at(idx)} = {template.format(*values)}")
        self.close_loops(idx)

    def copy(self, x, dtype=None):
        """``x`` copied into a fresh workspace slice (of ``dtype``, by default its own)."""
        out = self.buffer(x.shape, dtype or x.dtype)
        self.store(out, "{0}", [x])
        return out
