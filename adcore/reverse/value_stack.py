"""The reverse pass's value stack, as LLVM IR.

The augmented forward pass pushes the values the reverse pass needs and cannot
recompute (and, where a loop counter cannot tell, which predecessor a block was
entered from); the reverse pass pops them in the opposite order.  The stack is a
``{base, top, end}`` triple in the gradient function's frame, grown with ``realloc``
by a cold out-of-line helper; push and pop are always-inlined.
"""
import re

from ..ir.writer import fill
from ..known_functions import ALLOCATE, CALL_DTOR, FREE, MEMINFO_ALLOC_ALIGNED, declaration
from ..numba_abi import MEMINFO_DATA, MEMINFO_TYPE

ARENA_CHUNK = 65536             # bytes of each chunk of the arena (more for a larger request)
RESERVE_LIMIT = 1 << 30         # bytes of the largest stack buffer kept for a gradient's next call
RESERVED = {"%ad.stack": "@ad.reserve.stack", "%ad.finals": "@ad.reserve.finals",
            "%ad.copies": "@ad.reserve.copies"}       # a gradient's stack -> its reserve slot


def without_reserves(text):
    """Gradient IR ``text`` whose stacks neither take nor keep reserved memory: freed at the
    end as their own (for gradient IR differentiated again, :func:`adcore.hvp`)."""
    text = re.sub(r"^  call void @ad\.(stack\.take|copies\.keep)\(.*\n", "", text, flags=re.M)
    text = re.sub(r"call void @ad\.stack\.keep\((ptr [^,]+), ptr @ad\.reserve\.\w+, i64 1\)",
                  r"call void @ad.stack.free(\1)", text)
    return text.replace("@ad.copy.operand(ptr %ad.rawfrees, ptr %ad.copies,", "@ad.copy.operand(ptr %ad.rawfrees, ptr null,")
FRAME_STACKS = ("%ad.stack", "%ad.dtors", "%ad.rawfrees", "%ad.arena")   # a gradient's stacks
SIZES = {"double": 8, "float": 4, "i64": 8, "i32": 4, "i16": 2, "i8": 1, "i1": 1, "ptr": 8}


def size_of(type_):
    """Bytes a value of ``type_`` takes on the stack (scalars and vectors of them)."""
    m = re.match(r"^<\s*([0-9]+)\s*x\s*(\w+)\s*>$", type_)
    return int(m.group(1)) * SIZES[m.group(2)] if m else SIZES[type_]


def kept_bytes(type_):
    """Bytes keeping a value of ``type_`` costs per loop iteration (8 for a type the stack
    helpers do not size, such as a struct)."""
    return size_of(type_) if type_ in SIZES or type_.startswith("<") else 8


STACK_TYPE = "{ ptr, ptr, ptr }"
STACK_BYTES = 24                 # base, top, end
FRAME_BYTES = STACK_BYTES * len(FRAME_STACKS)   # a gradient's frame stacks, zeroed when empty


def type_tag(type_):
    """A name-safe spelling of ``type_`` for helper names (``<4 x float>`` -> ``v4float``)."""
    return re.sub(r"[<>\s]", "", type_).replace("x", "", 1) if type_.startswith("<") else type_


def with_generated(module, gen, helpers_of):
    """IR text of ``module`` (the cleaned primal) plus the functions built by generator
    ``gen`` and by those of the calls it differentiates, the runtime declarations they use
    that ``module`` lacks, and ``helpers_of(generators)``, the runtime helpers' text."""
    texts, gens = [gen.build()], [gen]
    if gen.callees is not None:
        texts += gen.callees.generate()
        gens += gen.callees.generators
    existing = {f.name for f in module.functions}
    decls = dict(DECLARATIONS)
    for g in gens:
        decls.update(g.e.declarations)
    extra = [d for name, d in decls.items() if name not in existing]
    return str(module) + "\n" + "\n".join(texts) + helpers_of(gens) + "\n" + "\n".join(extra) + "\n"


def helpers(types, copy_types=()):
    """IR text of the stack helpers (grow, push/pop for each type in ``types``), of the
    arena (zeroed 16-byte aligned memory in chunks freed with the deferred frees: the
    stack allocations of functions differentiated as calls), of the deferred decref and
    release of meminfos, of array snapshots (:mod:`adcore.plan.snapshots`), of zeroed shadow allocations, of operand
    copies for custom rules, and of the memcpy adjoint for each float type in
    ``copy_types`` (the templates ``value_stack.ll``, ``stack_push_pop.ll`` and
    ``elementwise_sum.ll`` of :mod:`adcore.ir.writer`)."""
    out = [fill("value_stack", stack=STACK_TYPE, arena_chunk=ARENA_CHUNK, allocate=ALLOCATE,
                reserve_limit=RESERVE_LIMIT, frame_bytes=FRAME_BYTES, stack_bytes=STACK_BYTES,
                two_stacks=2 * STACK_BYTES,
                meminfo_alloc_aligned=MEMINFO_ALLOC_ALIGNED, meminfo_type=MEMINFO_TYPE,
                meminfo_data=MEMINFO_DATA)]
    for t in sorted(copy_types):
        out.append(_elementwise(f"ad.copy.adjoint.{t}", t, "src", "dst", zero_first=True))
        out.append(_elementwise(f"ad.accumulate.{t}", t, "dst", "src", zero_first=False))
    for t in sorted(types):
        out.append(fill("stack_push_pop", stack=STACK_TYPE, type=t, tag=type_tag(t), size=size_of(t)))
    return "\n".join(out)


def _elementwise(name, t, into, from_, zero_first):
    """``name(ptr dst, ptr src, i64 bytes)``: ``into[i] += from_[i]`` over the elements of
    type ``t``, then ``from_[i] = 0`` when ``zero_first`` (the adjoint of a copy)."""
    zero = f"  store {t} 0.0, ptr %p.from\n" if zero_first else ""
    return fill("elementwise_sum", name=name, type=t, size=size_of(t), into=into, zero=zero,
                **{"from": from_})


DECLARATIONS = {
    "realloc": "declare ptr @realloc(ptr, i64)",
    "free": "declare void @free(ptr)",
    "llvm.umax.i64": "declare i64 @llvm.umax.i64(i64, i64)",
    "llvm.memset.p0.i64": "declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)",
    "llvm.memcpy.p0.p0.i64": "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)",
    **{name: declaration(name) for name in (CALL_DTOR, MEMINFO_ALLOC_ALIGNED, ALLOCATE, FREE)},
}
