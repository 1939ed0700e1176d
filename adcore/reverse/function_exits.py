"""How a gradient function ends its forward pass and returns: the status check, the
returned array's seed, the active arguments' adjoints stored, deferred frees run; and a
callee's split into an augmented forward and a reverse function (:mod:`adcore.reverse.callees`)."""
from .. import numba_abi as abi
from ..errors import UnsupportedError
from ..ir.model import local
from ..ir.writer import float_const, function_text
from ..known_functions import CALL_DTOR, FREE
from . import value_stack as runtime
from .parallel_loops import HEAD_BYTES


class FunctionExits:
    """The exits' part of :class:`adcore.reverse.generator.AdjointGenerator`."""

    def split_functions(self, forward, reverse):
        """A callee's augmented forward and reverse (see :mod:`adcore.reverse.callees`)."""
        e, split = self.e, self.spec.split
        rt, pair = split.ret_type, split.pair
        kept = list(self.values.registers.items())
        e.lines = []
        e.label("ad.fwdexit")
        result = e(f"phi {rt} " + ", ".join(f"[ {s.ref}, {b.ref} ]" for b, s in self.ret_blocks), "result") \
            if rt != "void" else None
        which = e("phi i32 " + ", ".join(f"[ {k}, {b.ref} ]" for k, (b, _) in enumerate(self.ret_blocks)), "ret")
        for value, reg in kept:
            self.push(value.type, e(f"load {value.type}, ptr {reg}"))
        returns = len(self.ret_blocks)
        if returns > 1:                  # which return was taken (one return: nothing to tell)
            self.push("i32", which)
        e.line(f"ret {rt} {result}" if result else "ret void")
        exit_ = e.lines
        e.lines = []
        which = self.pop("i32") if returns > 1 else "0"
        for value, reg in reversed(kept):
            e.line(f"store {value.type} {self.pop(value.type)}, ptr {reg}")
        cases = " ".join(f"i32 {k}, label {local('ad.r.' + b.name)}"
                         for k, (b, _) in enumerate(self.ret_blocks[1:], 1))
        e.line(f"switch i32 {which}, label {local('ad.r.' + self.ret_blocks[0][0].name)} [ {cases} ]")
        start = e.lines
        e.lines = []
        e.label("ad.done")
        adjoints = "undef"
        for j, index in enumerate(self.spec.active):
            arg = self.func.args[index]
            value = e(f"load {arg.type}, ptr {self.slots[arg]}") if arg in self.slots \
                else float_const(arg.type, 0)
            adjoints = e(f"insertvalue {pair.adjoint_type} {adjoints}, {arg.type} {value}, {j}")
        e.line(f"ret {pair.adjoint_type} {adjoints}" if self.spec.active else "ret void")
        done = e.lines
        args = [f"{a.type} {a.ref}" for a in self.func.args] + self.shadow_params
        dret = [f"{rt} %ad.dret"] if self.spec.ret_active else []
        stacks = [f"ptr {s}" for s in runtime.FRAME_STACKS]
        entry = ["ad.entry:"] + self.allocas
        augmented = function_text(f"internal {rt} @{pair.augmented}({', '.join(args + stacks)})",
                                  entry + [f"  br label {self.func.entry.ref}"] + forward + exit_)
        reverse_ = function_text(f"internal {pair.adjoint_type} @{pair.reverse}({', '.join(args + dret + stacks)})",
                                 entry + start + reverse + done)
        return augmented + reverse_

    def seed_returned_array(self, bytes_field):
        """Add ``dret`` into the shadow of the returned array before the reverse pass.  The
        returned array must have the seed's shape and (C-contiguous) strides: else the bytes
        field is set to -1 and the reverse pass is skipped."""
        e = self.e
        data = abi.field_offset(abi.DATA)
        if data not in self.returned_shadow:
            raise UnsupportedError("the returned array", self.spec.pyname,
                                   "only a newly allocated float array can be returned")
        t = self.spec.seed[1]
        ndim = (len(self.spec.seed[0]) - abi.SHAPE) // 2

        def returned(position):        # a field of the returned array struct
            return e(f"load i64, ptr {e(f'getelementptr i8, ptr {self.retptr.ref}, i64 {abi.field_offset(position)}')}")

        nitems = returned(abi.NITEMS)
        same = e(f"icmp eq i64 {nitems}, %ad.seed.{abi.NITEMS}")
        for d in range(ndim):
            n, stride = returned(abi.shape_field(d)), returned(abi.stride_field(ndim, d))
            same_n = e(f"icmp eq i64 {n}, %ad.seed.{abi.shape_field(d)}")
            same_stride = e(f"icmp eq i64 {stride}, %ad.seed.{abi.stride_field(ndim, d)}")
            same_stride = e(f"or i1 {same_stride}, {e(f'icmp ule i64 {n}, 1')}")
            same = e(f"and i1 {same}, {e(f'and i1 {same_n}, {same_stride}')}")
        e.line(f"br i1 {same}, label %ad.rseed.add, label %ad.rseed.bad")
        e.label("ad.rseed.bad")
        e.line(f"store i64 -1, ptr {bytes_field}")
        self.keep_stack("%ad.stack", failed=True)
        self.release()
        e.line(f"ret i32 {abi.STATUS_OK}")
        e.label("ad.rseed.add")
        self.memory_types.add(t)
        shadow = e(f"load ptr, ptr {self.returned_shadow[data]}")
        bytes_ = e(f"mul i64 {nitems}, {runtime.SIZES[t]}")
        e.line(f"call void @ad.accumulate.{t}(ptr {shadow}, ptr %ad.seed.{abi.DATA}, i64 {bytes_})")

    def keep_stack(self, stack, failed=False):
        """Hand ``stack``'s memory (and that of the operand copies) to its reserve slot for
        the next call (or free it); release the parallel loops' tapes (``failed``: with
        what their pieces kept, whose reverses did not run)."""
        self.e.line(f"call void @ad.stack.keep(ptr {stack}, ptr {runtime.RESERVED[stack]}, i64 1)")
        if stack == "%ad.stack" and self.loop_bytes_used:
            self.e.line(f"call void @ad.loop.tapes.release(ptr %ad.looptapes, i64 {HEAD_BYTES}, "
                        f"ptr @{CALL_DTOR}, ptr @{FREE})" if failed else "call void @ad.stack.free(ptr %ad.looptapes)")
        if stack == "%ad.stack" and self.copies_used:
            self.e.line(f"call void @ad.copies.keep(ptr %ad.copies, ptr {runtime.RESERVED['%ad.copies']})")

    def release(self):
        """Run the deferred destructors and frees of the forward pass."""
        self.e.line(f"call void @ad.release(ptr %ad.dtors, ptr @{CALL_DTOR})")
        self.e.line(f"call void @ad.release(ptr %ad.rawfrees, ptr @{FREE})")

    def exits(self):
        e, spec = self.e, self.spec
        rt = spec.result_type
        e.label("ad.fwdexit")
        status = e("phi i32 " + ", ".join(f"[ {s.ref}, {b.ref} ]" for b, s in self.ret_blocks), "status")
        which = e("phi i32 " + ", ".join(f"[ {k}, {b.ref} ]" for k, (b, _) in enumerate(self.ret_blocks)), "ret")
        base = e("load ptr, ptr %ad.stack")
        top = e(f"load ptr, ptr {e(f'getelementptr inbounds {runtime.STACK_TYPE}, ptr %ad.stack, i32 0, i32 1')}")
        used = e(f"sub i64 {e(f'ptrtoint ptr {top} to i64')}, {e(f'ptrtoint ptr {base} to i64')}")
        if self.loop_bytes_used:         # and what the parallel loops' chunks kept
            used = e(f"add i64 {used}, {e('load i64, ptr %ad.loopbytes')}")
        field = e(f"getelementptr inbounds {rt}, ptr {self.retptr.ref}, i32 0, i32 {spec.bytes_field}")
        e.line(f"store i64 {used}, ptr {field}")
        ok = e(f"or i1 {e(f'icmp eq i32 {status}, {abi.STATUS_OK}')}, {e(f'icmp eq i32 {status}, {abi.STATUS_NONE}')}")
        e.line(f"br i1 {ok}, label %ad.rseed, label %ad.fail")
        e.label("ad.fail")
        self.keep_stack("%ad.stack", failed=True)
        self.release()
        e.line(f"ret i32 {status}")
        e.label("ad.rseed")
        if spec.seed:
            self.seed_returned_array(field)
        e.line("br label %ad.rstart")
        e.label("ad.rstart")
        for array in self.snapshots.bases():     # the primal's final contents, put back at the end
            self.copy_array("snapshot", "%ad.finals", array)
        cases = " ".join(f"i32 {k}, label {local('ad.r.' + b.name)}"
                         for k, (b, _) in enumerate(self.ret_blocks[1:], 1))
        e.line(f"switch i32 {which}, label {local('ad.r.' + self.ret_blocks[0][0].name)} [ {cases} ]")
        e.label("ad.done")
        for index, field_no in zip(spec.active, spec.active_fields):
            arg, zero = self.func.args[index], float_const(self.func.args[index].type, 0)
            value = e(f"fadd {arg.type} {e(f'load {arg.type}, ptr {self.slots[arg]}')}, {zero}") \
                if arg in self.slots else zero           # + 0.0: an untouched adjoint reads 0.0, not -0.0
            e.line(f"store {arg.type} {value}, ptr {e(f'getelementptr inbounds {rt}, ptr {self.retptr.ref}, i32 0, i32 {field_no}')}")
        if self.snapshots.at:
            for array in reversed(self.snapshots.bases()):
                self.copy_array("restore", "%ad.finals", array)
            self.keep_stack("%ad.finals")
        self.keep_stack("%ad.stack")
        self.release()
        e.line(f"ret i32 {abi.STATUS_OK}")
