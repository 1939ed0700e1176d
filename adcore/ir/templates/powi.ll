; x^n by repeated squaring: the compiler-runtime builtin "name" (__powidf2, __powisf2) of
; floating-point type "type" that LLVM's code generator makes of llvm.powi
; (adcore.backend.native).
define $type @$name($type %x, i32 %n) {
entry:
  %neg = icmp slt i32 %n, 0
  %minus = sub i32 0, %n
  %e0 = select i1 %neg, i32 %minus, i32 %n
  br label %head
head:
  %r = phi $type [ 1.0, %entry ], [ %r2, %body ]
  %b = phi $type [ %x, %entry ], [ %b2, %body ]
  %e = phi i32 [ %e0, %entry ], [ %e2, %body ]
  %done = icmp eq i32 %e, 0
  br i1 %done, label %exit, label %body
body:
  %bit = and i32 %e, 1
  %odd = icmp ne i32 %bit, 0
  %rb = fmul $type %r, %b
  %r2 = select i1 %odd, $type %rb, $type %r
  %b2 = fmul $type %b, %b
  %e2 = lshr i32 %e, 1
  br label %head
exit:
  %inv = fdiv $type 1.0, %r
  %y = select i1 %neg, $type %inv, $type %r
  ret $type %y
}
