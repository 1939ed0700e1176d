"""The tangent function's memory: tangents stored into shadows (and into the result's
tangent fields), memcpy and memset mirrored on the shadows, the zeroed internal shadows
of Const arrays, and the check that arrays compiled to share no memory do not."""
from .. import numba_abi
from ..ir.model import is_float_type
from ..ir.writer import alignment


class ShadowMemory:
    """The memory's part of :class:`adcore.forward.generator.TangentGenerator`."""

    def store(self, instr):
        value, ptr = instr.operands
        if ptr.defn is self.retptr:
            if self.spec.tangent_field is not None:
                for j in range(self.spec.lanes):
                    self.e.line(f"store {value.type} {self.tangent(value, j)}, ptr {self.result_field(j)}")
            return
        if not self.memory.is_shadowed(ptr):
            return
        t = value.type
        if not (is_float_type(t) or value.defn in self.act.pun_type or value.is_const and t.startswith("i")):
            raise self.unsupported(instr, "a non-float value is stored into a differentiable array")
        for lane in self.lanes:
            self.e.line(f"store {t} {self.tangent(value, lane.j)}, ptr {lane.shadow(ptr)}{alignment(instr)}")

    def memory_intrinsic(self, instr):
        """memcpy(d, s, n): shadow(d) = shadow(s) (0 when s has none); memset(d): shadow(d) = 0."""
        dst, size = instr.operands[0], instr.operands[2]
        if not self.memory.is_shadowed(dst):
            return
        src = None if instr.callee.startswith("llvm.memset") else instr.operands[1]
        for lane in self.lanes:
            if src is not None and self.memory.is_shadowed(src):
                self.e.line(f"call void @{instr.callee}(ptr {lane.shadow(dst)}, ptr {lane.shadow(src)}, "
                            f"{size.type} {size.ref}, i1 false)")
            else:
                self.e.declare(f"llvm.memset.p0.{size.type}",
                               f"declare void @llvm.memset.p0.{size.type}(ptr, i8, {size.type}, i1)")
                self.e.line(f"call void @llvm.memset.p0.{size.type}(ptr {lane.shadow(dst)}, i8 0, "
                            f"{size.type} {size.ref}, i1 false)")

    def internal_shadows(self):
        """Lines allocating the zeroed internal shadows (freed on return), each laid out
        as its array: the same offsets from the bytes it spans."""
        lines, emit = self.emitter_into()
        for fields, refs in self.internal:
            lo, hi = _byte_span(fields, emit)
            offset = emit(f"sub i64 {emit(f'ptrtoint ptr {fields[numba_abi.DATA]} to i64')}, {lo}")
            for ref in refs:
                base = emit(f"call ptr @ad.shadow.raw(i64 {emit(f'sub i64 {hi}, {lo}')})")
                lines.append(f"  call void @ad.push.ptr(ptr {self.rawfrees}, ptr {base})")
                lines.append(f"  {ref} = getelementptr i8, ptr {base}, i64 {offset}")
        return lines

    def overlap_check(self, start):
        """The end of the entry block when the arrays were to share no memory: if any two
        of them (arguments and tangents) do, status -1 and return before anything runs;
        else on to ``start``."""
        lines, emit = self.emitter_into()
        spans = [_byte_span(fields, emit) for fields in self.array_fields]
        clash = "false"
        for i, (lo, hi) in enumerate(spans):
            for lo2, hi2 in spans[i + 1:]:
                both = emit(f"and i1 {emit(f'icmp ult i64 {lo}, {hi2}')}, {emit(f'icmp ult i64 {lo2}, {hi}')}")
                clash = emit(f"or i1 {clash}, {both}")
        refuse = self.e.fresh("clash")
        lines.append(f"  br i1 {clash}, label {refuse}, label {start}")
        lines.append(f"{refuse[1:]}:")
        lines.append(f"  store i64 -1, ptr {self.status(lines)}")
        lines.append(f"  ret i32 {numba_abi.STATUS_OK}")
        return lines

    def emitter_into(self):
        """``(lines, emit)``: ``emit(text)`` appends ``%new = text`` to ``lines``, returns ``%new``."""
        lines = []

        def emit(text):
            ref = self.e.fresh("t")
            lines.append(f"  {ref} = {text}")
            return ref
        return lines, emit


def _byte_span(fields, emit):
    """``(lo, hi)``: the addresses of the bytes an array spans, from its flattened fields
    (``0, 0`` when it is empty, so that it meets no other)."""
    nd = (len(fields) - numba_abi.SHAPE) // 2
    lo = hi = emit(f"ptrtoint ptr {fields[numba_abi.DATA]} to i64")
    for n, stride in zip(fields[numba_abi.SHAPE:numba_abi.SHAPE + nd], fields[numba_abi.SHAPE + nd:]):
        reach = emit(f"mul i64 {emit(f'sub i64 {n}, 1')}, {stride}")
        down = emit(f"icmp slt i64 {reach}, 0")
        lo = emit(f"add i64 {lo}, {emit(f'select i1 {down}, i64 {reach}, i64 0')}")
        hi = emit(f"add i64 {hi}, {emit(f'select i1 {down}, i64 0, i64 {reach}')}")
    hi = emit(f"add i64 {hi}, {fields[numba_abi.ITEMSIZE]}")
    empty = emit(f"icmp eq i64 {fields[numba_abi.NITEMS]}, 0")
    return emit(f"select i1 {empty}, i64 0, i64 {lo}"), emit(f"select i1 {empty}, i64 0, i64 {hi}")
