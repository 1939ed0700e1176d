; The value stack's runtime helpers (adcore.reverse.value_stack.helpers): growing a stack,
; the arena, deferred releases and decrefs, array snapshots, operand copies, zeroed shadows.
; "stack" is the stack's type { base, top, end }.
; A gradient function's value stack, its stack of final contents and its buffer of operand
; copies keep their memory for the next call in a reserve slot each; the pieces of a parallel
; loop keep their stacks' in a pool of slots (page faults on fresh memory cost more than the
; copies they hold, and threads taking them contend in the kernel): ad.stack.take starts a
; stack on a buffer of slots[0 .. n), ad.stack.keep puts the stack's buffer back in an empty
; slot (its capacity in its first word), or frees it.
@ad.reserve.stack = internal global ptr null
@ad.reserve.finals = internal global ptr null
@ad.reserve.copies = internal global ptr null
define internal void @ad.stack.take(ptr %s, ptr %slots, i64 %n) {
entry:
  br label %look
look:
  %k = phi i64 [ 0, %entry ], [ %k1, %next ]
  %more = icmp ult i64 %k, %n
  br i1 %more, label %try, label %exit
try:
  %slot = getelementptr ptr, ptr %slots, i64 %k
  %seen = load atomic ptr, ptr %slot monotonic, align 8
  %empty = icmp eq ptr %seen, null
  br i1 %empty, label %next, label %claim
claim:
  %r = atomicrmw xchg ptr %slot, ptr null acquire
  %none = icmp eq ptr %r, null
  br i1 %none, label %next, label %take
next:
  %k1 = add i64 %k, 1
  br label %look
take:
  %cap = load i64, ptr %r
  %end = getelementptr i8, ptr %r, i64 %cap
  %topp = getelementptr inbounds $stack, ptr %s, i32 0, i32 1
  %endp = getelementptr inbounds $stack, ptr %s, i32 0, i32 2
  store ptr %r, ptr %s
  store ptr %r, ptr %topp
  store ptr %end, ptr %endp
  br label %exit
exit:
  ret void
}
define internal void @ad.stack.keep(ptr %s, ptr %slots, i64 %n) {
entry:
  %base = load ptr, ptr %s
  %endp = getelementptr inbounds $stack, ptr %s, i32 0, i32 2
  %end = load ptr, ptr %endp
  %e = ptrtoint ptr %end to i64
  %b = ptrtoint ptr %base to i64
  %cap = sub i64 %e, %b
  %some = icmp ne ptr %base, null
  %small = icmp ule i64 %cap, $reserve_limit
  %ok = and i1 %some, %small
  br i1 %ok, label %header, label %drop
header:
  store i64 %cap, ptr %base
  br label %look
look:
  %k = phi i64 [ 0, %header ], [ %k1, %next ]
  %more = icmp ult i64 %k, %n
  br i1 %more, label %try, label %drop
try:
  %slot = getelementptr ptr, ptr %slots, i64 %k
  %pair = cmpxchg ptr %slot, ptr null, ptr %base acq_rel monotonic
  %put = extractvalue { ptr, i1 } %pair, 1
  br i1 %put, label %exit, label %next
next:
  %k1 = add i64 %k, 1
  br label %look
drop:
  call void @free(ptr %base)
  br label %exit
exit:
  ret void
}
; The tapes of the parallel loops a failed gradient ran (%s: a stack of their addresses, each
; tape's head %head bytes, its first word the number of pieces): each piece's deferred
; destructors and frees run and its value stack is freed, then %s itself.
define internal void @ad.loop.tapes.release(ptr %s, i64 %head, ptr %dtor, ptr %free) noinline {
entry:
  %topp = getelementptr inbounds $stack, ptr %s, i32 0, i32 1
  %base = load ptr, ptr %s
  br label %tapes
tapes:
  %top = load ptr, ptr %topp
  %done = icmp ule ptr %top, %base
  br i1 %done, label %exit, label %pop
pop:
  %below = getelementptr i8, ptr %top, i64 -8
  store ptr %below, ptr %topp
  %tape = load ptr, ptr %below
  %pieces = load i64, ptr %tape
  br label %piece
piece:
  %c = phi i64 [ 0, %pop ], [ %c1, %release ]
  %more = icmp slt i64 %c, %pieces
  br i1 %more, label %release, label %tapes
release:
  %off = mul i64 %c, $frame_bytes
  %at = add i64 %off, %head
  %frame = getelementptr i8, ptr %tape, i64 %at
  %dtors = getelementptr i8, ptr %frame, i64 $stack_bytes
  %raw = getelementptr i8, ptr %frame, i64 $two_stacks
  call void @ad.release(ptr %dtors, ptr %dtor)
  call void @ad.release(ptr %raw, ptr %free)
  call void @ad.stack.free(ptr %frame)
  %c1 = add i64 %c, 1
  br label %piece
exit:
  call void @ad.stack.free(ptr %s)
  ret void
}
define internal void @ad.stack.free(ptr %s) {
entry:
  %base = load ptr, ptr %s
  call void @free(ptr %base)
  ret void
}
define internal void @ad.stack.reserve(ptr %s, i64 %bytes) alwaysinline {
entry:
  %topp = getelementptr inbounds $stack, ptr %s, i32 0, i32 1
  %endp = getelementptr inbounds $stack, ptr %s, i32 0, i32 2
  %top = load ptr, ptr %topp
  %end = load ptr, ptr %endp
  %t = ptrtoint ptr %top to i64
  %e = ptrtoint ptr %end to i64
  %room = sub i64 %e, %t
  %short = icmp ugt i64 %bytes, %room
  br i1 %short, label %grow, label %exit
grow:
  call void @ad.stack.grow(ptr %s, i64 %bytes)
  br label %exit
exit:
  ret void
}
define internal void @ad.stack.grow(ptr %s, i64 %need) noinline cold {
entry:
  %topp = getelementptr inbounds $stack, ptr %s, i32 0, i32 1
  %endp = getelementptr inbounds $stack, ptr %s, i32 0, i32 2
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
}
define internal ptr @ad.arena.alloc(ptr %a, ptr %frees, i64 %size) {
entry:
  %topp = getelementptr inbounds $stack, ptr %a, i32 0, i32 1
  %endp = getelementptr inbounds $stack, ptr %a, i32 0, i32 2
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
  %cap = call i64 @llvm.umax.i64(i64 %rounded, i64 $arena_chunk)
  %c = call ptr @$allocate(i64 %cap)
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
}
define internal void @ad.release(ptr %s, ptr %release) alwaysinline {
entry:
  %base = load ptr, ptr %s
  %unused = icmp eq ptr %base, null
  br i1 %unused, label %exit, label %used
used:
  call void @ad.release.used(ptr %s, ptr %release)
  br label %exit
exit:
  ret void
}
define internal void @ad.release.used(ptr %s, ptr %release) noinline {
entry:
  %topp = getelementptr inbounds $stack, ptr %s, i32 0, i32 1
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
}
define internal void @ad.decref(ptr %s, ptr %m) {
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
}
define internal void @ad.snapshot(ptr %s, ptr %data, i64 %bytes) {
entry:
  %topp = getelementptr inbounds $stack, ptr %s, i32 0, i32 1
  %endp = getelementptr inbounds $stack, ptr %s, i32 0, i32 2
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
}
define internal void @ad.restore(ptr %s, ptr %data, i64 %bytes) {
entry:
  %topp = getelementptr inbounds $stack, ptr %s, i32 0, i32 1
  %b7 = add i64 %bytes, 7
  %rounded = and i64 %b7, -8
  %top = load ptr, ptr %topp
  %neg = sub i64 0, %rounded
  %at = getelementptr i8, ptr %top, i64 %neg
  store ptr %at, ptr %topp
  call void @llvm.memcpy.p0.p0.i64(ptr %data, ptr %at, i64 %bytes, i1 false)
  ret void
}
; A copy of a custom rule's operand, for the reverse pass: in the gradient's buffer of copies
; %c (kept between calls, ad.copies.keep) while it has room, else in memory of its own freed at
; the end; %c's top counts every copy's bytes, so that the next call's buffer holds them all.
define internal ptr @ad.copy.operand(ptr %frees, ptr %c, ptr %src, i64 %size) noinline {
entry:
  %none = icmp eq ptr %c, null
  br i1 %none, label %own, label %count
count:
  %topp = getelementptr inbounds $stack, ptr %c, i32 0, i32 1
  %endp = getelementptr inbounds $stack, ptr %c, i32 0, i32 2
  %base = load ptr, ptr %c
  %top = load ptr, ptr %topp
  %end = load ptr, ptr %endp
  %s15 = add i64 %size, 15
  %rounded = and i64 %s15, -16
  %next = getelementptr i8, ptr %top, i64 %rounded
  store ptr %next, ptr %topp
  %some = icmp ne ptr %base, null
  %room = icmp ule ptr %next, %end
  %fits = and i1 %some, %room
  br i1 %fits, label %bump, label %own
bump:
  call void @llvm.memcpy.p0.p0.i64(ptr %top, ptr %src, i64 %size, i1 false)
  ret ptr %top
own:
  %p = call ptr @$allocate(i64 %size)
  call void @llvm.memcpy.p0.p0.i64(ptr %p, ptr %src, i64 %size, i1 false)
  call void @ad.push.ptr(ptr %frees, ptr %p)
  ret ptr %p
}
define internal void @ad.copies.keep(ptr %c, ptr %slot) {
entry:
  %topp = getelementptr inbounds $stack, ptr %c, i32 0, i32 1
  %endp = getelementptr inbounds $stack, ptr %c, i32 0, i32 2
  %base = load ptr, ptr %c
  %top = load ptr, ptr %topp
  %end = load ptr, ptr %endp
  %t = ptrtoint ptr %top to i64
  %b = ptrtoint ptr %base to i64
  %e = ptrtoint ptr %end to i64
  %need = sub i64 %t, %b
  %cap = sub i64 %e, %b
  %short = icmp ugt i64 %need, %cap
  br i1 %short, label %grow, label %keep
grow:
  call void @free(ptr %base)
  %fresh = call ptr @realloc(ptr null, i64 %need)
  store ptr %fresh, ptr %c
  %fend = getelementptr i8, ptr %fresh, i64 %need
  store ptr %fend, ptr %endp
  br label %keep
keep:
  call void @ad.stack.keep(ptr %c, ptr %slot, i64 1)
  ret void
}
define internal ptr @ad.shadow.raw(i64 %size) noinline {
entry:
  %p = call ptr @$allocate(i64 %size)
  call void @llvm.memset.p0.i64(ptr %p, i8 0, i64 %size, i1 false)
  ret ptr %p
}
define internal ptr @ad.shadow.alloc(i64 %size, i32 %align) noinline {
entry:
  %m = call ptr @$meminfo_alloc_aligned(i64 %size, i32 %align)
  %null = icmp eq ptr %m, null
  br i1 %null, label %exit, label %zero
zero:
  %dp = getelementptr inbounds $meminfo_type, ptr %m, i32 0, i32 $meminfo_data
  %d = load ptr, ptr %dp
  call void @llvm.memset.p0.i64(ptr %d, i8 0, i64 %size, i1 false)
  br label %exit
exit:
  ret ptr %m
}
