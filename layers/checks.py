"""Input checks shared by the layers: a wrong shape is an error naming the layer and the
shape it expects."""
import numpy as np


def expect_shape(layer, x, pattern):
    """Check ``x`` against ``pattern``, a tuple with an int where the size is fixed and a
    name (``"batch"``, ``"height"``) where it is free; raises ``ValueError`` otherwise."""
    shape = np.shape(x)
    ok = len(shape) == len(pattern) and all(
        isinstance(p, str) or n == p for n, p in zip(shape, pattern))
    if not ok:
        name = layer.show_string() if hasattr(layer, "show_string") else type(layer).__name__
        want = "(" + ", ".join(map(str, pattern)) + ("," if len(pattern) == 1 else "") + ")"
        raise ValueError(f"{name} expects an input of shape {want}, got shape {tuple(shape)}")
