"""The reverse pass's value stack, as LLVM IR.

The augmented forward pass pushes the values the reverse pass needs and cannot
recompute (and, where a loop counter cannot tell, which predecessor a block was
entered from); the reverse pass pops them in the opposite order.  The stack is a
``{base, top, end}`` triple in the gradient function's frame, grown with ``realloc``
by a cold out-of-line helper; push and pop are always-inlined.
"""
SIZES = {"double": 8, "float": 4, "i64": 8, "i32": 4, "i16": 2, "i8": 1, "i1": 1, "ptr": 8}
STACK_TYPE = "{ ptr, ptr, ptr }"


def type_tag(type_):
    return type_.replace(" ", "")


def helpers(types):
    """IR text of the grow helper and of push/pop for each type in ``types``."""
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
    for t in sorted(types):
        n, tag = SIZES[t], type_tag(t)
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


DECLARATIONS = {
    "realloc": "declare ptr @realloc(ptr, i64)",
    "free": "declare void @free(ptr)",
    "llvm.umax.i64": "declare i64 @llvm.umax.i64(i64, i64)",
}
