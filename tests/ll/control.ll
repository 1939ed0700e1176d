; Branches, switch, phi, select, early return (opaque pointers).

declare double @llvm.sin.f64(double)

define double @piecewise(double %x, i32 %mode) {
entry:
  switch i32 %mode, label %default [
    i32 0, label %case0
    i32 1, label %case1
  ]

case0:
  %a = fmul double %x, %x
  br label %join

case1:
  %b = call double @llvm.sin.f64(double %x)
  br label %join

default:
  %neg = fcmp olt double %x, 0.0
  br i1 %neg, label %early, label %pos

early:
  %e = fmul double %x, %x
  %e2 = fmul double %e, %x
  ret double %e2

pos:
  %s = fmul double %x, 3.0
  br label %join

join:
  %v = phi double [ %a, %case0 ], [ %b, %case1 ], [ %s, %pos ]
  %big = fcmp ogt double %v, 1.0
  %w = select i1 %big, double %v, double 0.5
  %r = fmul double %w, %x
  ret double %r
}

; clip(x[i], lo, hi) written to out; the count of clipped entries returned (integer return)
define i32 @clip(ptr %x, ptr %out, i64 %n, double %lo, double %hi) {
entry:
  %empty = icmp eq i64 %n, 0
  br i1 %empty, label %done, label %loop

loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %next ]
  %count = phi i32 [ 0, %entry ], [ %count1, %next ]
  %px = getelementptr inbounds double, ptr %x, i64 %i
  %v = load double, ptr %px, align 8
  %below = fcmp olt double %v, %lo
  br i1 %below, label %low, label %check_high

low:
  br label %next

check_high:
  %above = fcmp ogt double %v, %hi
  %c = select i1 %above, double %hi, double %v
  %inc = zext i1 %above to i32
  br label %next

next:
  %y = phi double [ %lo, %low ], [ %c, %check_high ]
  %add = phi i32 [ 1, %low ], [ %inc, %check_high ]
  %count1 = add i32 %count, %add
  %po = getelementptr inbounds double, ptr %out, i64 %i
  store double %y, ptr %po, align 8
  %i1 = add nuw i64 %i, 1
  %more = icmp ult i64 %i1, %n
  br i1 %more, label %loop, label %done

done:
  %r = phi i32 [ 0, %entry ], [ %count1, %next ]
  ret i32 %r
}
