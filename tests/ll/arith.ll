; Float arithmetic, fma and fmuladd (opaque pointers).

declare double @llvm.fma.f64(double, double, double)
declare double @llvm.fmuladd.f64(double, double, double)

; a scalar chain through every arithmetic operation
define double @chain(double %a, double %b, double %c) {
entry:
  %s = fadd double %a, %b
  %d = fsub double %s, %c
  %m = fmul double %d, %a
  %q = fdiv double %m, %b
  %r = frem double %q, %c
  %n = fneg double %r
  %f = call double @llvm.fma.f64(double %n, double %b, double %c)
  %g = call double @llvm.fmuladd.f64(double %f, double %a, double %q)
  ret double %g
}

; out[k] = k-th operation on (in[0], in[1], in[2])
define void @ops(ptr noalias %in, ptr noalias %out) {
entry:
  %pb = getelementptr inbounds double, ptr %in, i64 1
  %pc = getelementptr inbounds double, ptr %in, i64 2
  %a = load double, ptr %in, align 8
  %b = load double, ptr %pb, align 8
  %c = load double, ptr %pc, align 8
  %add = fadd fast double %a, %b
  %sub = fsub double %a, %b
  %mul = fmul double %a, %b
  %div = fdiv double %a, %b
  %rem = frem double %a, %b
  %neg = fneg double %a
  %fma = call double @llvm.fma.f64(double %a, double %b, double %c)
  %fmuladd = call contract double @llvm.fmuladd.f64(double %a, double %b, double %c)
  store double %add, ptr %out, align 8
  %o1 = getelementptr inbounds double, ptr %out, i64 1
  store double %sub, ptr %o1, align 8
  %o2 = getelementptr inbounds double, ptr %out, i64 2
  store double %mul, ptr %o2, align 8
  %o3 = getelementptr inbounds double, ptr %out, i64 3
  store double %div, ptr %o3, align 8
  %o4 = getelementptr inbounds double, ptr %out, i64 4
  store double %rem, ptr %o4, align 8
  %o5 = getelementptr inbounds double, ptr %out, i64 5
  store double %neg, ptr %o5, align 8
  %o6 = getelementptr inbounds double, ptr %out, i64 6
  store double %fma, ptr %o6, align 8
  %o7 = getelementptr inbounds double, ptr %out, i64 7
  store double %fmuladd, ptr %o7, align 8
  ret void
}
