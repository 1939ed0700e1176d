; A stack buffer (alloca) indexed by arguments, so that SROA cannot promote it
; (opaque pointers).  stackbuf(x, i, j) = x[0]^2 when i == j.

define double @stackbuf(ptr %x, i64 %i, i64 %j) {
entry:
  %tmp = alloca [4 x double], align 8
  %x0 = load double, ptr %x, align 8
  %sq = fmul double %x0, %x0
  %p = getelementptr inbounds [4 x double], ptr %tmp, i64 0, i64 %i
  store double %sq, ptr %p, align 8
  %q = getelementptr inbounds [4 x double], ptr %tmp, i64 0, i64 %j
  %v = load double, ptr %q, align 8
  ret double %v
}
