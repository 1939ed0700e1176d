; In-place overwrites, integer index arrays, struct and array pointers (typed pointers).

%struct.Point = type { double, double }

; Gauss-Seidel smoothing of u in place, `steps` sweeps over the interior points
define void @smooth(double* %u, i64 %n, i64 %steps) {
entry:
  %last = sub i64 %n, 1
  br label %sweep

sweep:
  %s = phi i64 [ 0, %entry ], [ %s1, %sweep_end ]
  br label %point

point:
  %i = phi i64 [ 1, %sweep ], [ %i1, %point ]
  %im = sub i64 %i, 1
  %ip = add i64 %i, 1
  %pl = getelementptr inbounds double, double* %u, i64 %im
  %pc = getelementptr inbounds double, double* %u, i64 %i
  %pr = getelementptr inbounds double, double* %u, i64 %ip
  %l = load double, double* %pl, align 8
  %c = load double, double* %pc, align 8
  %r = load double, double* %pr, align 8
  %lr = fadd double %l, %r
  %lap = call double @llvm.fmuladd.f64(double %c, double -2.0, double %lr)
  %cc = fmul double %c, %c
  %upd = fmul double %lap, 2.5e-01
  %new = call double @llvm.fmuladd.f64(double %cc, double 1.0e-01, double %upd)
  %new2 = fadd double %c, %new
  store double %new2, double* %pc, align 8
  %i1 = add i64 %i, 1
  %more = icmp slt i64 %i1, %last
  br i1 %more, label %point, label %sweep_end

sweep_end:
  %s1 = add i64 %s, 1
  %smore = icmp slt i64 %s1, %steps
  br i1 %smore, label %sweep, label %exit

exit:
  ret void
}

declare double @llvm.fmuladd.f64(double, double, double)

; out[idx[i]] += w[i] * x[i]; idx is an int32 array that may repeat entries
define void @scatter(double* %w, double* %x, i32* %idx, double* %out, i64 %n) {
entry:
  br label %loop

loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %pidx = getelementptr inbounds i32, i32* %idx, i64 %i
  %j32 = load i32, i32* %pidx, align 4
  %j = sext i32 %j32 to i64
  %pw = getelementptr inbounds double, double* %w, i64 %i
  %px = getelementptr inbounds double, double* %x, i64 %i
  %vw = load double, double* %pw, align 8
  %vx = load double, double* %px, align 8
  %po = getelementptr inbounds double, double* %out, i64 %j
  %old = load double, double* %po, align 8
  %new = call double @llvm.fmuladd.f64(double %vw, double %vx, double %old)
  store double %new, double* %po, align 8
  %i1 = add i64 %i, 1
  %more = icmp slt i64 %i1, %n
  br i1 %more, label %loop, label %exit

exit:
  ret void
}

; sum over points of the distance from the origin; points are pairs of doubles
define double @lengths(%struct.Point* %p, i32 %n) {
entry:
  %count = sext i32 %n to i64
  br label %loop

loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %acc = phi double [ 0.0, %entry ], [ %acc1, %loop ]
  %px = getelementptr inbounds %struct.Point, %struct.Point* %p, i64 %i, i32 0
  %py = getelementptr inbounds %struct.Point, %struct.Point* %p, i64 %i, i32 1
  %x = load double, double* %px, align 8
  %y = load double, double* %py, align 8
  %xx = fmul double %x, %x
  %r2 = call double @llvm.fmuladd.f64(double %y, double %y, double %xx)
  %r = call double @llvm.sqrt.f64(double %r2)
  %acc1 = fadd double %acc, %r
  %i1 = add i64 %i, 1
  %more = icmp slt i64 %i1, %count
  br i1 %more, label %loop, label %exit

exit:
  ret double %acc1
}

declare double @llvm.sqrt.f64(double)

; the cubic c[0] + c[1] t + c[2] t^2 + c[3] t^3 by Horner's rule, c a [4 x double]*
define double @cubic([4 x double]* %c, double %t) {
entry:
  %p3 = getelementptr inbounds [4 x double], [4 x double]* %c, i64 0, i64 3
  %p2 = getelementptr inbounds [4 x double], [4 x double]* %c, i64 0, i64 2
  %p1 = getelementptr inbounds [4 x double], [4 x double]* %c, i64 0, i64 1
  %p0 = getelementptr inbounds [4 x double], [4 x double]* %c, i64 0, i64 0
  %c3 = load double, double* %p3, align 8
  %c2 = load double, double* %p2, align 8
  %c1 = load double, double* %p1, align 8
  %c0 = load double, double* %p0, align 8
  %h2 = call double @llvm.fmuladd.f64(double %c3, double %t, double %c2)
  %h1 = call double @llvm.fmuladd.f64(double %h2, double %t, double %c1)
  %h0 = call double @llvm.fmuladd.f64(double %h1, double %t, double %c0)
  ret double %h0
}

; a noinline helper with a bitcast from double* to i8* and back (typed-pointer idiom), called
; through a wrapper: y[i] = helper(x, i)
define internal double @helper(i8* %raw, i64 %i) noinline {
entry:
  %d = bitcast i8* %raw to double*
  %p = getelementptr inbounds double, double* %d, i64 %i
  %v = load double, double* %p, align 8
  %e = call double @exp(double %v)
  ret double %e
}

declare double @exp(double)

define void @apply(double* %x, double* %y, i64 %n) {
entry:
  %raw = bitcast double* %x to i8*
  br label %loop

loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %v = call double @helper(i8* %raw, i64 %i)
  %py = getelementptr inbounds double, double* %y, i64 %i
  store double %v, double* %py, align 8
  %i1 = add i64 %i, 1
  %more = icmp slt i64 %i1, %n
  br i1 %more, label %loop, label %exit

exit:
  ret void
}
