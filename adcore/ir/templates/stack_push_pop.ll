; Push and pop of a value (of type "type", "size" bytes, "tag" in the names) on a value
; stack (of type "stack"): adcore.reverse.value_stack.  A reserved push stores into room
; reserved before its loop (adcore.plan.pushes.Reserve), with no capacity check.
define internal void @ad.push.$tag(ptr %s, $type %v) alwaysinline {
entry:
  %topp = getelementptr inbounds $stack, ptr %s, i32 0, i32 1
  %endp = getelementptr inbounds $stack, ptr %s, i32 0, i32 2
  %top = load ptr, ptr %topp
  %end = load ptr, ptr %endp
  %next = getelementptr i8, ptr %top, i64 $size
  %full = icmp ugt ptr %next, %end
  br i1 %full, label %grow, label %put
grow:
  call void @ad.stack.grow(ptr %s, i64 $size)
  %top2 = load ptr, ptr %topp
  br label %put
put:
  %at = phi ptr [ %top, %entry ], [ %top2, %grow ]
  store $type %v, ptr %at, align 1
  %after = getelementptr i8, ptr %at, i64 $size
  store ptr %after, ptr %topp
  ret void
}
define internal void @ad.push.reserved.$tag(ptr %s, $type %v) alwaysinline {
entry:
  %topp = getelementptr inbounds $stack, ptr %s, i32 0, i32 1
  %top = load ptr, ptr %topp
  store $type %v, ptr %top, align 1
  %after = getelementptr i8, ptr %top, i64 $size
  store ptr %after, ptr %topp
  ret void
}
define internal $type @ad.pop.$tag(ptr %s) alwaysinline {
entry:
  %topp = getelementptr inbounds $stack, ptr %s, i32 0, i32 1
  %top = load ptr, ptr %topp
  %at = getelementptr i8, ptr %top, i64 -$size
  store ptr %at, ptr %topp
  %v = load $type, ptr %at, align 1
  ret $type %v
}
