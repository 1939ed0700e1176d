"""Analyses of the clean primal: control flow and loops, pointer bases, shadowed memory
and clobbers, activity, loop variance, loop exit values."""
