; Counted, nested and while loops (typed pointers).

declare double @llvm.fabs.f64(double)

define double @dot(double* nocapture readonly %x, double* nocapture readonly %y, i64 %n) {
entry:
  %empty = icmp sle i64 %n, 0
  br i1 %empty, label %exit, label %loop

loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %acc = phi double [ 0.0, %entry ], [ %acc1, %loop ]
  %px = getelementptr inbounds double, double* %x, i64 %i
  %py = getelementptr inbounds double, double* %y, i64 %i
  %vx = load double, double* %px, align 8
  %vy = load double, double* %py, align 8
  %m = fmul double %vx, %vy
  %acc1 = fadd double %acc, %m
  %i1 = add nuw nsw i64 %i, 1
  %more = icmp slt i64 %i1, %n
  br i1 %more, label %loop, label %exit

exit:
  %r = phi double [ 0.0, %entry ], [ %acc1, %loop ]
  ret double %r
}

; y = A x for a row-major m x n matrix A
define void @matvec(double* %A, double* %x, double* %y, i64 %m, i64 %n) {
entry:
  br label %rows

rows:
  %i = phi i64 [ 0, %entry ], [ %i1, %rows_end ]
  %row = mul i64 %i, %n
  br label %cols

cols:
  %j = phi i64 [ 0, %rows ], [ %j1, %cols ]
  %acc = phi double [ 0.0, %rows ], [ %acc1, %cols ]
  %k = add i64 %row, %j
  %pa = getelementptr inbounds double, double* %A, i64 %k
  %px = getelementptr inbounds double, double* %x, i64 %j
  %a = load double, double* %pa, align 8
  %b = load double, double* %px, align 8
  %acc1 = call double @llvm.fmuladd.f64(double %a, double %b, double %acc)
  %j1 = add i64 %j, 1
  %cmore = icmp slt i64 %j1, %n
  br i1 %cmore, label %cols, label %rows_end

rows_end:
  %py = getelementptr inbounds double, double* %y, i64 %i
  store double %acc1, double* %py, align 8
  %i1 = add i64 %i, 1
  %rmore = icmp slt i64 %i1, %m
  br i1 %rmore, label %rows, label %exit

exit:
  ret void
}

declare double @llvm.fmuladd.f64(double, double, double)

; square root of a by Newton's method: a while loop with a data-dependent trip count
define double @newton_sqrt(double %a) {
entry:
  br label %test

test:
  %y = phi double [ %a, %entry ], [ %y1, %body ]
  %sq = fmul double %y, %y
  %err = fsub double %sq, %a
  %abs = call double @llvm.fabs.f64(double %err)
  %far = fcmp ogt double %abs, 1.0e-12
  br i1 %far, label %body, label %exit

body:
  %q = fdiv double %a, %y
  %s = fadd double %y, %q
  %y1 = fmul double %s, 5.000000e-01
  br label %test

exit:
  ret double %y
}
