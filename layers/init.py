"""Weight initialisers: ``init(*shape, rng=None, dtype=np.float32)``."""
import math

import numpy as np


def _rng(rng):
    """A ``numpy.random.Generator`` from ``None``, an int seed or a Generator."""
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def _fans(shape):
    """``(fan_in, fan_out)`` of a weight of shape ``(out, in, *kernel)``."""
    if len(shape) == 1:
        return 1, shape[0]
    k = math.prod(shape[2:])
    return shape[1] * k, shape[0] * k


def glorot_uniform(*shape, rng=None, dtype=np.float32, gain=1.0):
    """Uniform on ``[-a, a]`` with ``a = gain * sqrt(6 / (fan_in + fan_out))`` (Glorot & Bengio);
    ``rng`` is a seed or a ``numpy.random.Generator``."""
    fan_in, fan_out = _fans(shape)
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return _rng(rng).uniform(-a, a, size=shape).astype(dtype)

