"""Frontend: from a Numba kernel (or foreign LLVM IR) to one clean scalar function, and
the refusals of what adcore does not differentiate, in the user's words."""
