"""adcore.native.optimise vectorises loops without interleaving them: a vectorised loop
steps by its vector's lanes, so a short inner loop (the reverse of a triangular loop) runs
vector code from 4 iterations on, not 8 or 16."""
import re

import llvmlite.binding as llvm

from adcore import native

AXPY = """
define void @axpy(ptr noalias %y, ptr noalias %x, double %a, i64 %n) {
entry:
  %any = icmp sgt i64 %n, 0
  br i1 %any, label %loop, label %exit
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %px = getelementptr double, ptr %x, i64 %i
  %py = getelementptr double, ptr %y, i64 %i
  %vx = load double, ptr %px
  %vy = load double, ptr %py
  %m = fmul double %a, %vx
  %s = fadd double %vy, %m
  store double %s, ptr %py
  %next = add nuw nsw i64 %i, 1
  %more = icmp slt i64 %next, %n
  br i1 %more, label %loop, label %exit
exit:
  ret void
}
"""


def test_vector_loop_steps_by_its_lanes():
    native._start_engine()
    module = llvm.parse_assembly(AXPY)
    native.optimise(module)
    text = str(module)
    lanes = {int(n) for n in re.findall(r"load <(\d+) x double>", text)}
    steps = {int(n) for n in re.findall(r"%index\.next\S* = add nuw i64 %index\S*, (\d+)", text)}
    assert lanes and steps, text                  # vectorised
    assert steps == lanes, text                   # not interleaved (it would step by 2x, 4x)
