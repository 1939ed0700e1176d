; Vector arithmetic as loop vectorisers emit it (opaque pointers).

; x[0:2] *= a
define void @vscale(ptr %x, double %a) {
entry:
  %v = load <2 x double>, ptr %x, align 8
  %s = insertelement <2 x double> poison, double %a, i64 0
  %b = shufflevector <2 x double> %s, <2 x double> poison, <2 x i32> zeroinitializer
  %m = fmul <2 x double> %v, %b
  store <2 x double> %m, ptr %x, align 8
  ret void
}

; x[1:9] = tanh(x[1:9]) * a: 256-bit loads and stores 8 bytes past a 16-byte boundary
; (their shadows must keep the align 4, or a faulting aligned move may be emitted)
define void @vtanh8(ptr %x, float %a) {
entry:
  %p = getelementptr float, ptr %x, i64 1
  %v = load <8 x float>, ptr %p, align 4
  %t = call <8 x float> @llvm.tanh.v8f32(<8 x float> %v)
  %s = insertelement <8 x float> poison, float %a, i64 0
  %b = shufflevector <8 x float> %s, <8 x float> poison, <8 x i32> zeroinitializer
  %m = fmul <8 x float> %t, %b
  store <8 x float> %m, ptr %p, align 4
  ret void
}
declare <8 x float> @llvm.tanh.v8f32(<8 x float>)

; y[0] = sum_k w_k v[k]^2 with v = x[0:4] * a: every lane extracted (lane 1 twice, lane 3
; never), then y[1:3] = lanes 0 and 2 inserted into a fresh vector: each lane's adjoint
; is added to that lane alone
define void @vlanes(ptr %x, ptr %y, double %a) {
entry:
  %v = load <4 x double>, ptr %x, align 8
  %s = insertelement <4 x double> poison, double %a, i64 0
  %b = shufflevector <4 x double> %s, <4 x double> poison, <4 x i32> zeroinitializer
  %m = fmul <4 x double> %v, %b
  %e0 = extractelement <4 x double> %m, i64 0
  %e1 = extractelement <4 x double> %m, i32 1
  %e1b = extractelement <4 x double> %m, i64 1
  %e2 = extractelement <4 x double> %m, i64 2
  %q0 = fmul double %e0, %e0
  %q1 = fmul double %e1, %e1b
  %q2 = fmul double %e2, %e2
  %w1 = fmul double %q1, 3.0
  %t = fadd double %q0, %w1
  %u = fadd double %t, %q2
  store double %u, ptr %y, align 8
  %n0 = insertelement <2 x double> zeroinitializer, double %e0, i64 0
  %n1 = insertelement <2 x double> %n0, double %e2, i64 1
  %r = fmul <2 x double> %n1, %n1
  %py = getelementptr double, ptr %y, i64 1
  store <2 x double> %r, ptr %py, align 8
  ret void
}

; y[i:i+2] = (x[i]^2, 3 x[i]) for i < n: each iteration's second lane is overwritten by the
; next (the loop's reverse must count down), then sum_k (k+1) y[k]^2 over y[0:n+1]
define double @voverlap(ptr %x, ptr %y, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %px = getelementptr inbounds double, ptr %x, i64 %i
  %v = load double, ptr %px, align 8
  %s = fmul double %v, %v
  %t = fmul double %v, 3.0
  %a = insertelement <2 x double> poison, double %s, i64 0
  %b = insertelement <2 x double> %a, double %t, i64 1
  %py = getelementptr inbounds double, ptr %y, i64 %i
  store <2 x double> %b, ptr %py, align 8
  %i1 = add nuw nsw i64 %i, 1
  %more = icmp slt i64 %i1, %n
  br i1 %more, label %loop, label %sum
sum:
  %k = phi i64 [ 0, %loop ], [ %k1, %sum ]
  %acc = phi double [ 0.0, %loop ], [ %acc1, %sum ]
  %pk = getelementptr inbounds double, ptr %y, i64 %k
  %w = load double, ptr %pk, align 8
  %k1 = add nuw nsw i64 %k, 1
  %kf = uitofp i64 %k1 to double
  %ww = fmul double %w, %w
  %term = fmul double %ww, %kf
  %acc1 = fadd double %acc, %term
  %done = icmp sgt i64 %k1, %n
  br i1 %done, label %exit, label %sum
exit:
  ret double %acc1
}

; y[i] = y[i] + y[i+1] / 2 + x[i], y[i+1] read in one two-lane load before the next iteration
; overwrites it (the loop's reverse must count down; linear, so nothing is kept per
; iteration), then sum_k (k+1) y[k]^2 over y[0:n]
define double @vwideload(ptr %x, ptr %y, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %px = getelementptr inbounds double, ptr %x, i64 %i
  %v = load double, ptr %px, align 8
  %py = getelementptr inbounds double, ptr %y, i64 %i
  %pair = load <2 x double>, ptr %py, align 8
  %here = extractelement <2 x double> %pair, i64 0
  %next = extractelement <2 x double> %pair, i64 1
  %m = fmul double %next, 0.5
  %h = fadd double %here, %m
  %s = fadd double %h, %v
  store double %s, ptr %py, align 8
  %i1 = add nuw nsw i64 %i, 1
  %more = icmp slt i64 %i1, %n
  br i1 %more, label %loop, label %sum
sum:
  %k = phi i64 [ 0, %loop ], [ %k1, %sum ]
  %acc = phi double [ 0.0, %loop ], [ %acc1, %sum ]
  %pk = getelementptr inbounds double, ptr %y, i64 %k
  %w = load double, ptr %pk, align 8
  %k1 = add nuw nsw i64 %k, 1
  %kf = uitofp i64 %k1 to double
  %ww = fmul double %w, %w
  %term = fmul double %ww, %kf
  %acc1 = fadd double %acc, %term
  %done = icmp sge i64 %k1, %n
  br i1 %done, label %exit, label %sum
exit:
  ret double %acc1
}
