; libm calls and math intrinsics, double and float (opaque pointers).

declare double @sin(double)
declare double @cos(double)
declare double @tan(double)
declare double @exp(double)
declare double @log(double)
declare double @tanh(double)
declare double @sinh(double)
declare double @cosh(double)
declare double @atan(double)
declare double @asin(double)
declare double @acos(double)
declare double @sqrt(double)
declare double @cbrt(double)
declare double @exp2(double)
declare double @log2(double)
declare double @log10(double)
declare double @log1p(double)
declare double @expm1(double)
declare double @erf(double)
declare double @asinh(double)
declare double @pow(double, double)
declare double @atan2(double, double)
declare double @hypot(double, double)
declare double @fmod(double, double)
declare double @copysign(double, double)
declare double @llvm.sin.f64(double)
declare double @llvm.cos.f64(double)
declare double @llvm.exp.f64(double)
declare double @llvm.log.f64(double)
declare double @llvm.sqrt.f64(double)
declare double @llvm.fabs.f64(double)
declare double @llvm.exp2.f64(double)
declare double @llvm.log10.f64(double)
declare double @llvm.floor.f64(double)
declare double @llvm.pow.f64(double, double)
declare double @llvm.minnum.f64(double, double)
declare double @llvm.maxnum.f64(double, double)
declare double @llvm.copysign.f64(double, double)
declare double @llvm.powi.f64.i32(double, i32)
declare float @sinf(float)
declare float @expf(float)
declare float @tanhf(float)
declare float @llvm.sqrt.f32(float)
declare float @powf(float, float)

; out[k] = f_k(x[k]) (unary) or f_k(x[k], y[k]) (binary)
define void @mathfns(ptr %x, ptr %y, ptr %out) {
entry:
  %xp0 = getelementptr inbounds double, ptr %x, i64 0
  %x0 = load double, ptr %xp0, align 8
  %r0 = call double @sin(double %x0)
  %op0 = getelementptr inbounds double, ptr %out, i64 0
  store double %r0, ptr %op0, align 8
  %xp1 = getelementptr inbounds double, ptr %x, i64 1
  %x1 = load double, ptr %xp1, align 8
  %r1 = call double @cos(double %x1)
  %op1 = getelementptr inbounds double, ptr %out, i64 1
  store double %r1, ptr %op1, align 8
  %xp2 = getelementptr inbounds double, ptr %x, i64 2
  %x2 = load double, ptr %xp2, align 8
  %r2 = call double @tan(double %x2)
  %op2 = getelementptr inbounds double, ptr %out, i64 2
  store double %r2, ptr %op2, align 8
  %xp3 = getelementptr inbounds double, ptr %x, i64 3
  %x3 = load double, ptr %xp3, align 8
  %r3 = call double @exp(double %x3)
  %op3 = getelementptr inbounds double, ptr %out, i64 3
  store double %r3, ptr %op3, align 8
  %xp4 = getelementptr inbounds double, ptr %x, i64 4
  %x4 = load double, ptr %xp4, align 8
  %r4 = call double @log(double %x4)
  %op4 = getelementptr inbounds double, ptr %out, i64 4
  store double %r4, ptr %op4, align 8
  %xp5 = getelementptr inbounds double, ptr %x, i64 5
  %x5 = load double, ptr %xp5, align 8
  %r5 = call double @tanh(double %x5)
  %op5 = getelementptr inbounds double, ptr %out, i64 5
  store double %r5, ptr %op5, align 8
  %xp6 = getelementptr inbounds double, ptr %x, i64 6
  %x6 = load double, ptr %xp6, align 8
  %r6 = call double @sinh(double %x6)
  %op6 = getelementptr inbounds double, ptr %out, i64 6
  store double %r6, ptr %op6, align 8
  %xp7 = getelementptr inbounds double, ptr %x, i64 7
  %x7 = load double, ptr %xp7, align 8
  %r7 = call double @cosh(double %x7)
  %op7 = getelementptr inbounds double, ptr %out, i64 7
  store double %r7, ptr %op7, align 8
  %xp8 = getelementptr inbounds double, ptr %x, i64 8
  %x8 = load double, ptr %xp8, align 8
  %r8 = call double @atan(double %x8)
  %op8 = getelementptr inbounds double, ptr %out, i64 8
  store double %r8, ptr %op8, align 8
  %xp9 = getelementptr inbounds double, ptr %x, i64 9
  %x9 = load double, ptr %xp9, align 8
  %r9 = call double @asin(double %x9)
  %op9 = getelementptr inbounds double, ptr %out, i64 9
  store double %r9, ptr %op9, align 8
  %xp10 = getelementptr inbounds double, ptr %x, i64 10
  %x10 = load double, ptr %xp10, align 8
  %r10 = call double @acos(double %x10)
  %op10 = getelementptr inbounds double, ptr %out, i64 10
  store double %r10, ptr %op10, align 8
  %xp11 = getelementptr inbounds double, ptr %x, i64 11
  %x11 = load double, ptr %xp11, align 8
  %r11 = call double @sqrt(double %x11)
  %op11 = getelementptr inbounds double, ptr %out, i64 11
  store double %r11, ptr %op11, align 8
  %xp12 = getelementptr inbounds double, ptr %x, i64 12
  %x12 = load double, ptr %xp12, align 8
  %r12 = call double @cbrt(double %x12)
  %op12 = getelementptr inbounds double, ptr %out, i64 12
  store double %r12, ptr %op12, align 8
  %xp13 = getelementptr inbounds double, ptr %x, i64 13
  %x13 = load double, ptr %xp13, align 8
  %r13 = call double @exp2(double %x13)
  %op13 = getelementptr inbounds double, ptr %out, i64 13
  store double %r13, ptr %op13, align 8
  %xp14 = getelementptr inbounds double, ptr %x, i64 14
  %x14 = load double, ptr %xp14, align 8
  %r14 = call double @log2(double %x14)
  %op14 = getelementptr inbounds double, ptr %out, i64 14
  store double %r14, ptr %op14, align 8
  %xp15 = getelementptr inbounds double, ptr %x, i64 15
  %x15 = load double, ptr %xp15, align 8
  %r15 = call double @log10(double %x15)
  %op15 = getelementptr inbounds double, ptr %out, i64 15
  store double %r15, ptr %op15, align 8
  %xp16 = getelementptr inbounds double, ptr %x, i64 16
  %x16 = load double, ptr %xp16, align 8
  %r16 = call double @log1p(double %x16)
  %op16 = getelementptr inbounds double, ptr %out, i64 16
  store double %r16, ptr %op16, align 8
  %xp17 = getelementptr inbounds double, ptr %x, i64 17
  %x17 = load double, ptr %xp17, align 8
  %r17 = call double @expm1(double %x17)
  %op17 = getelementptr inbounds double, ptr %out, i64 17
  store double %r17, ptr %op17, align 8
  %xp18 = getelementptr inbounds double, ptr %x, i64 18
  %x18 = load double, ptr %xp18, align 8
  %r18 = call double @erf(double %x18)
  %op18 = getelementptr inbounds double, ptr %out, i64 18
  store double %r18, ptr %op18, align 8
  %xp19 = getelementptr inbounds double, ptr %x, i64 19
  %x19 = load double, ptr %xp19, align 8
  %r19 = call double @asinh(double %x19)
  %op19 = getelementptr inbounds double, ptr %out, i64 19
  store double %r19, ptr %op19, align 8
  %xp20 = getelementptr inbounds double, ptr %x, i64 20
  %x20 = load double, ptr %xp20, align 8
  %r20 = call double @llvm.sin.f64(double %x20)
  %op20 = getelementptr inbounds double, ptr %out, i64 20
  store double %r20, ptr %op20, align 8
  %xp21 = getelementptr inbounds double, ptr %x, i64 21
  %x21 = load double, ptr %xp21, align 8
  %r21 = call double @llvm.cos.f64(double %x21)
  %op21 = getelementptr inbounds double, ptr %out, i64 21
  store double %r21, ptr %op21, align 8
  %xp22 = getelementptr inbounds double, ptr %x, i64 22
  %x22 = load double, ptr %xp22, align 8
  %r22 = call double @llvm.exp.f64(double %x22)
  %op22 = getelementptr inbounds double, ptr %out, i64 22
  store double %r22, ptr %op22, align 8
  %xp23 = getelementptr inbounds double, ptr %x, i64 23
  %x23 = load double, ptr %xp23, align 8
  %r23 = call double @llvm.log.f64(double %x23)
  %op23 = getelementptr inbounds double, ptr %out, i64 23
  store double %r23, ptr %op23, align 8
  %xp24 = getelementptr inbounds double, ptr %x, i64 24
  %x24 = load double, ptr %xp24, align 8
  %r24 = call double @llvm.sqrt.f64(double %x24)
  %op24 = getelementptr inbounds double, ptr %out, i64 24
  store double %r24, ptr %op24, align 8
  %xp25 = getelementptr inbounds double, ptr %x, i64 25
  %x25 = load double, ptr %xp25, align 8
  %r25 = call double @llvm.fabs.f64(double %x25)
  %op25 = getelementptr inbounds double, ptr %out, i64 25
  store double %r25, ptr %op25, align 8
  %xp26 = getelementptr inbounds double, ptr %x, i64 26
  %x26 = load double, ptr %xp26, align 8
  %r26 = call double @llvm.exp2.f64(double %x26)
  %op26 = getelementptr inbounds double, ptr %out, i64 26
  store double %r26, ptr %op26, align 8
  %xp27 = getelementptr inbounds double, ptr %x, i64 27
  %x27 = load double, ptr %xp27, align 8
  %r27 = call double @llvm.log10.f64(double %x27)
  %op27 = getelementptr inbounds double, ptr %out, i64 27
  store double %r27, ptr %op27, align 8
  %xp28 = getelementptr inbounds double, ptr %x, i64 28
  %x28 = load double, ptr %xp28, align 8
  %r28 = call double @llvm.floor.f64(double %x28)
  %op28 = getelementptr inbounds double, ptr %out, i64 28
  store double %r28, ptr %op28, align 8
  %xp29 = getelementptr inbounds double, ptr %x, i64 29
  %x29 = load double, ptr %xp29, align 8
  %yp29 = getelementptr inbounds double, ptr %y, i64 29
  %y29 = load double, ptr %yp29, align 8
  %r29 = call double @pow(double %x29, double %y29)
  %op29 = getelementptr inbounds double, ptr %out, i64 29
  store double %r29, ptr %op29, align 8
  %xp30 = getelementptr inbounds double, ptr %x, i64 30
  %x30 = load double, ptr %xp30, align 8
  %yp30 = getelementptr inbounds double, ptr %y, i64 30
  %y30 = load double, ptr %yp30, align 8
  %r30 = call double @atan2(double %x30, double %y30)
  %op30 = getelementptr inbounds double, ptr %out, i64 30
  store double %r30, ptr %op30, align 8
  %xp31 = getelementptr inbounds double, ptr %x, i64 31
  %x31 = load double, ptr %xp31, align 8
  %yp31 = getelementptr inbounds double, ptr %y, i64 31
  %y31 = load double, ptr %yp31, align 8
  %r31 = call double @hypot(double %x31, double %y31)
  %op31 = getelementptr inbounds double, ptr %out, i64 31
  store double %r31, ptr %op31, align 8
  %xp32 = getelementptr inbounds double, ptr %x, i64 32
  %x32 = load double, ptr %xp32, align 8
  %yp32 = getelementptr inbounds double, ptr %y, i64 32
  %y32 = load double, ptr %yp32, align 8
  %r32 = call double @fmod(double %x32, double %y32)
  %op32 = getelementptr inbounds double, ptr %out, i64 32
  store double %r32, ptr %op32, align 8
  %xp33 = getelementptr inbounds double, ptr %x, i64 33
  %x33 = load double, ptr %xp33, align 8
  %yp33 = getelementptr inbounds double, ptr %y, i64 33
  %y33 = load double, ptr %yp33, align 8
  %r33 = call double @copysign(double %x33, double %y33)
  %op33 = getelementptr inbounds double, ptr %out, i64 33
  store double %r33, ptr %op33, align 8
  %xp34 = getelementptr inbounds double, ptr %x, i64 34
  %x34 = load double, ptr %xp34, align 8
  %yp34 = getelementptr inbounds double, ptr %y, i64 34
  %y34 = load double, ptr %yp34, align 8
  %r34 = call double @llvm.pow.f64(double %x34, double %y34)
  %op34 = getelementptr inbounds double, ptr %out, i64 34
  store double %r34, ptr %op34, align 8
  %xp35 = getelementptr inbounds double, ptr %x, i64 35
  %x35 = load double, ptr %xp35, align 8
  %yp35 = getelementptr inbounds double, ptr %y, i64 35
  %y35 = load double, ptr %yp35, align 8
  %r35 = call double @llvm.minnum.f64(double %x35, double %y35)
  %op35 = getelementptr inbounds double, ptr %out, i64 35
  store double %r35, ptr %op35, align 8
  %xp36 = getelementptr inbounds double, ptr %x, i64 36
  %x36 = load double, ptr %xp36, align 8
  %yp36 = getelementptr inbounds double, ptr %y, i64 36
  %y36 = load double, ptr %yp36, align 8
  %r36 = call double @llvm.maxnum.f64(double %x36, double %y36)
  %op36 = getelementptr inbounds double, ptr %out, i64 36
  store double %r36, ptr %op36, align 8
  %xp37 = getelementptr inbounds double, ptr %x, i64 37
  %x37 = load double, ptr %xp37, align 8
  %yp37 = getelementptr inbounds double, ptr %y, i64 37
  %y37 = load double, ptr %yp37, align 8
  %r37 = call double @llvm.copysign.f64(double %x37, double %y37)
  %op37 = getelementptr inbounds double, ptr %out, i64 37
  store double %r37, ptr %op37, align 8
  %xp38 = getelementptr inbounds double, ptr %x, i64 38
  %x38 = load double, ptr %xp38, align 8
  %r38 = call double @llvm.powi.f64.i32(double %x38, i32 3)
  %op38 = getelementptr inbounds double, ptr %out, i64 38
  store double %r38, ptr %op38, align 8
  ret void
}

; the float versions
define float @mathf(float %a, ptr %x) {
entry:
  %x0 = load float, ptr %x, align 4
  %s = call float @sinf(float %a)
  %e = call float @expf(float %x0)
  %t = call float @tanhf(float %s)
  %q = call float @llvm.sqrt.f32(float %e)
  %p = call float @powf(float %q, float %a)
  %m = fmul float %t, %p
  store float %m, ptr %x, align 4
  %r = fadd float %m, %x0
  ret float %r
}
