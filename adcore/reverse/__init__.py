"""Reverse mode: the gradient function's IR (augmented forward pass and reverse pass),
shadows, the value stack, functions differentiated as callees and their call sites, custom
rules' calls, and the reverse of parallel loops."""
