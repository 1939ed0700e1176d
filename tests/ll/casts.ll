; Casts float <-> double and int <-> float, a float return (typed pointers).

; x[i] (float) is widened, scaled by a * i, accumulated in double and written back
; narrowed: in-place overwrite of a float32 array
define float @casts(float* %x, double %a, i32 %n) {
entry:
  br label %loop

loop:
  %i = phi i32 [ 0, %entry ], [ %i1, %loop ]
  %acc = phi double [ 0.0, %entry ], [ %acc1, %loop ]
  %p = getelementptr inbounds float, float* %x, i32 %i
  %v = load float, float* %p, align 4
  %vd = fpext float %v to double
  %fi = sitofp i32 %i to double
  %w = fadd double %fi, 1.0
  %t = fmul double %vd, %w
  %t2 = fmul double %t, %a
  %acc1 = fadd double %acc, %t2
  %back = fptrunc double %t2 to float
  store float %back, float* %p, align 4
  %i1 = add nsw i32 %i, 1
  %c = icmp slt i32 %i1, %n
  br i1 %c, label %loop, label %exit

exit:
  %k = fptosi double %a to i32          ; float -> int, used as an index
  %pk = getelementptr inbounds float, float* %x, i32 %k
  %xk = load float, float* %pk, align 4
  %u = uitofp i32 %n to float
  %xs = fmul float %xk, %u
  %r = fptrunc double %acc1 to float
  %res = fadd float %r, %xs
  ret float %res
}

; a float parameter receiving a Python float (float64, narrowed by the wrapper)
define float @scalef(float %a, double %b) {
entry:
  %bf = fptrunc double %b to float
  %m = fmul float %a, %bf
  %s = fmul float %m, %a
  ret float %s
}
