"""Reverse mode: the gradient function's IR (augmented forward pass and reverse pass),
shadows, the value stack, calls, and the reverse of parallel loops."""
