"""The reverse pass's value stack, as LLVM IR.

The augmented forward pass pushes the values the reverse pass needs and cannot
recompute (and, where a loop counter cannot tell, which predecessor a block was
entered from); the reverse pass pops them in the opposite order.  The stack is a
``{base, top, end}`` triple in the gradient function's frame, grown with ``realloc``
by a cold out-of-line helper; push and pop are always-inlined.
"""
import re

from ..known_functions import ALLOCATE, CALL_DTOR, FREE, MEMINFO_ALLOC_ALIGNED, declaration
from ..numba_abi import MEMINFO_DATA, MEMINFO_TYPE

ARENA_CHUNK = 65536             # bytes of each chunk of the arena (more for a larger request)
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
    ``copy_types``."""
    out = [f"""define internal void @ad.stack.grow(ptr %s, i64 %need) noinline cold {{
entry:
  %topp = getelementptr inbounds {STACK_TYPE}, ptr %s, i32 0, i32 1
  %endp = getelementptr inbounds {STACK_TYPE}, ptr %s, i32 0, i32 2
  %base = load ptr, ptr %s
  %top = load ptr, ptr %topp
  %end = load ptr, ptr %endp
  %b = ptrtoint ptr %base to i64
  %t = ptrtoint ptr %top to i64
  %e = ptrtoint ptr %end to i64
  %used = sub i64 %t, %b
  %cap = sub i64 %e, %b
  %want = add i64 %used, %need
  %twice = shl i64 %cap, 1
  %m1 = call i64 @llvm.umax.i64(i64 %twice, i64 %want)
  %m2 = call i64 @llvm.umax.i64(i64 %m1, i64 65536)
  %nb = call ptr @realloc(ptr %base, i64 %m2)
  store ptr %nb, ptr %s
  %ntop = getelementptr i8, ptr %nb, i64 %used
  store ptr %ntop, ptr %topp
  %nend = getelementptr i8, ptr %nb, i64 %m2
  store ptr %nend, ptr %endp
  ret void
}}"""]
    out.append(f"""define internal ptr @ad.arena.alloc(ptr %a, ptr %frees, i64 %size) {{
entry:
  %topp = getelementptr inbounds {STACK_TYPE}, ptr %a, i32 0, i32 1
  %endp = getelementptr inbounds {STACK_TYPE}, ptr %a, i32 0, i32 2
  %top = load ptr, ptr %topp
  %end = load ptr, ptr %endp
  %s15 = add i64 %size, 15
  %rounded = and i64 %s15, -16
  %next = getelementptr i8, ptr %top, i64 %rounded
  %full = icmp ugt ptr %next, %end
  %empty = icmp eq ptr %top, null
  %grow = or i1 %full, %empty
  br i1 %grow, label %chunk, label %put
chunk:
  %cap = call i64 @llvm.umax.i64(i64 %rounded, i64 {ARENA_CHUNK})
  %c = call ptr @{ALLOCATE}(i64 %cap)
  call void @ad.push.ptr(ptr %frees, ptr %c)
  %cend = getelementptr i8, ptr %c, i64 %cap
  store ptr %cend, ptr %endp
  br label %put
put:
  %at = phi ptr [ %top, %entry ], [ %c, %chunk ]
  %after = getelementptr i8, ptr %at, i64 %rounded
  store ptr %after, ptr %topp
  call void @llvm.memset.p0.i64(ptr %at, i8 0, i64 %size, i1 false)
  ret ptr %at
}}
define internal void @ad.release(ptr %s, ptr %release) alwaysinline {{
entry:
  %base = load ptr, ptr %s
  %unused = icmp eq ptr %base, null
  br i1 %unused, label %exit, label %used
used:
  call void @ad.release.used(ptr %s, ptr %release)
  br label %exit
exit:
  ret void
}}
define internal void @ad.release.used(ptr %s, ptr %release) noinline {{
entry:
  %topp = getelementptr inbounds {STACK_TYPE}, ptr %s, i32 0, i32 1
  %base = load ptr, ptr %s
  br label %loop
loop:
  %top = load ptr, ptr %topp
  %done = icmp ule ptr %top, %base
  br i1 %done, label %exit, label %body
body:
  %m = call ptr @ad.pop.ptr(ptr %s)
  call void %release(ptr %m)
  br label %loop
exit:
  call void @free(ptr %base)
  ret void
}}
define internal void @ad.decref(ptr %s, ptr %m) {{
entry:
  %null = icmp eq ptr %m, null
  br i1 %null, label %exit, label %dec
dec:
  %old = atomicrmw sub ptr %m, i64 1 acq_rel
  %last = icmp eq i64 %old, 1
  br i1 %last, label %defer, label %exit
defer:
  call void @ad.push.ptr(ptr %s, ptr %m)
  br label %exit
exit:
  ret void
}}
define internal void @ad.snapshot(ptr %s, ptr %data, i64 %bytes) {{
entry:
  %topp = getelementptr inbounds {STACK_TYPE}, ptr %s, i32 0, i32 1
  %endp = getelementptr inbounds {STACK_TYPE}, ptr %s, i32 0, i32 2
  %b7 = add i64 %bytes, 7
  %rounded = and i64 %b7, -8
  %top = load ptr, ptr %topp
  %end = load ptr, ptr %endp
  %next = getelementptr i8, ptr %top, i64 %rounded
  %full = icmp ugt ptr %next, %end
  br i1 %full, label %grow, label %put
grow:
  call void @ad.stack.grow(ptr %s, i64 %rounded)
  %top2 = load ptr, ptr %topp
  br label %put
put:
  %at = phi ptr [ %top, %entry ], [ %top2, %grow ]
  call void @llvm.memcpy.p0.p0.i64(ptr %at, ptr %data, i64 %bytes, i1 false)
  %after = getelementptr i8, ptr %at, i64 %rounded
  store ptr %after, ptr %topp
  ret void
}}
define internal void @ad.restore(ptr %s, ptr %data, i64 %bytes) {{
entry:
  %topp = getelementptr inbounds {STACK_TYPE}, ptr %s, i32 0, i32 1
  %b7 = add i64 %bytes, 7
  %rounded = and i64 %b7, -8
  %top = load ptr, ptr %topp
  %neg = sub i64 0, %rounded
  %at = getelementptr i8, ptr %top, i64 %neg
  store ptr %at, ptr %topp
  call void @llvm.memcpy.p0.p0.i64(ptr %data, ptr %at, i64 %bytes, i1 false)
  ret void
}}
define internal ptr @ad.copy.operand(ptr %frees, ptr %src, i64 %size) noinline {{
entry:
  %p = call ptr @{ALLOCATE}(i64 %size)
  call void @llvm.memcpy.p0.p0.i64(ptr %p, ptr %src, i64 %size, i1 false)
  call void @ad.push.ptr(ptr %frees, ptr %p)
  ret ptr %p
}}
define internal ptr @ad.shadow.raw(i64 %size) noinline {{
entry:
  %p = call ptr @{ALLOCATE}(i64 %size)
  call void @llvm.memset.p0.i64(ptr %p, i8 0, i64 %size, i1 false)
  ret ptr %p
}}
define internal ptr @ad.shadow.alloc(i64 %size, i32 %align) noinline {{
entry:
  %m = call ptr @{MEMINFO_ALLOC_ALIGNED}(i64 %size, i32 %align)
  %null = icmp eq ptr %m, null
  br i1 %null, label %exit, label %zero
zero:
  %dp = getelementptr inbounds {MEMINFO_TYPE}, ptr %m, i32 0, i32 {MEMINFO_DATA}
  %d = load ptr, ptr %dp
  call void @llvm.memset.p0.i64(ptr %d, i8 0, i64 %size, i1 false)
  br label %exit
exit:
  ret ptr %m
}}""")
    for t in sorted(copy_types):
        out.append(_elementwise(f"ad.copy.adjoint.{t}", t, "src", "dst", zero_first=True))
        out.append(_elementwise(f"ad.accumulate.{t}", t, "dst", "src", zero_first=False))
    for t in sorted(types):
        n, tag = size_of(t), type_tag(t)
        out.append(f"""define internal void @ad.push.{tag}(ptr %s, {t} %v) alwaysinline {{
entry:
  %topp = getelementptr inbounds {STACK_TYPE}, ptr %s, i32 0, i32 1
  %endp = getelementptr inbounds {STACK_TYPE}, ptr %s, i32 0, i32 2
  %top = load ptr, ptr %topp
  %end = load ptr, ptr %endp
  %next = getelementptr i8, ptr %top, i64 {n}
  %full = icmp ugt ptr %next, %end
  br i1 %full, label %grow, label %put
grow:
  call void @ad.stack.grow(ptr %s, i64 {n})
  %top2 = load ptr, ptr %topp
  br label %put
put:
  %at = phi ptr [ %top, %entry ], [ %top2, %grow ]
  store {t} %v, ptr %at, align 1
  %after = getelementptr i8, ptr %at, i64 {n}
  store ptr %after, ptr %topp
  ret void
}}
define internal {t} @ad.pop.{tag}(ptr %s) alwaysinline {{
entry:
  %topp = getelementptr inbounds {STACK_TYPE}, ptr %s, i32 0, i32 1
  %top = load ptr, ptr %topp
  %at = getelementptr i8, ptr %top, i64 -{n}
  store ptr %at, ptr %topp
  %v = load {t}, ptr %at, align 1
  ret {t} %v
}}""")
    return "\n".join(out)


def _elementwise(name, t, into, from_, zero_first):
    """``name(ptr dst, ptr src, i64 bytes)``: ``into[i] += from_[i]`` over the elements of
    type ``t``, then ``from_[i] = 0`` when ``zero_first`` (the adjoint of a copy)."""
    zero = f"  store {t} 0.0, ptr %p{from_}\n" if zero_first else ""
    return f"""define internal void @{name}(ptr %dst, ptr %src, i64 %bytes) {{
entry:
  %n = udiv i64 %bytes, {size_of(t)}
  br label %head
head:
  %i = phi i64 [ 0, %entry ], [ %next, %body ]
  %more = icmp ult i64 %i, %n
  br i1 %more, label %body, label %exit
body:
  %p{into} = getelementptr {t}, ptr %{into}, i64 %i
  %p{from_} = getelementptr {t}, ptr %{from_}, i64 %i
  %a = load {t}, ptr %p{into}
  %b = load {t}, ptr %p{from_}
  %sum = fadd {t} %a, %b
  store {t} %sum, ptr %p{into}
{zero}  %next = add i64 %i, 1
  br label %head
exit:
  ret void
}}"""


DECLARATIONS = {
    "realloc": "declare ptr @realloc(ptr, i64)",
    "free": "declare void @free(ptr)",
    "llvm.umax.i64": "declare i64 @llvm.umax.i64(i64, i64)",
    "llvm.memset.p0.i64": "declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)",
    "llvm.memcpy.p0.p0.i64": "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)",
    **{name: declaration(name) for name in (CALL_DTOR, MEMINFO_ALLOC_ALIGNED, ALLOCATE, FREE)},
}
