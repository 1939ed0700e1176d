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
