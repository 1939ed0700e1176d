; One adjoint of a copy of memory (adcore.reverse.value_stack): name(dst, src, bytes) adds
; the elements (of type "type", "size" bytes each) of "from" (%src or %dst) to those of
; "into" (the other), and "zero" is a line zeroing "from"'s element (%p.from) or nothing.
define internal void @$name(ptr %dst, ptr %src, i64 %bytes) {
entry:
  %n = udiv i64 %bytes, $size
  br label %head
head:
  %i = phi i64 [ 0, %entry ], [ %next, %body ]
  %more = icmp ult i64 %i, %n
  br i1 %more, label %body, label %exit
body:
  %p.into = getelementptr $type, ptr %$into, i64 %i
  %p.from = getelementptr $type, ptr %$from, i64 %i
  %a = load $type, ptr %p.into
  %b = load $type, ptr %p.from
  %sum = fadd $type %a, %b
  store $type %sum, ptr %p.into
$zero  %next = add i64 %i, 1
  br label %head
exit:
  ret void
}
