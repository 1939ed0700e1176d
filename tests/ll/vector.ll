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
