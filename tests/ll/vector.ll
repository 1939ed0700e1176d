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
