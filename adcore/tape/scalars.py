"""Scalar helpers that the ``scalar`` templates of the op tables call as ``S.<name>``.

Plain Python on one float each, written so that Numba compiles them: a code generator
(the compiled path of ``layers``) compiles this module's ``__all__`` and binds it to ``S``
in the generated program.  The tape engine itself never calls them.
"""
import math

__all__ = ["sigmoid", "softplus", "logaddexp", "sign", "rint"]


def sigmoid(x):
    """``1 / (1 + exp(-x))`` without overflow."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def softplus(x):
    """``log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|))``."""
    if x > 0:
        return x + math.log1p(math.exp(-x))
    return math.log1p(math.exp(x))


def logaddexp(a, b):
    """``log(exp(a) + exp(b))``, shifted by the maximum."""
    m = max(a, b)
    return m + math.log(math.exp(a - m) + math.exp(b - m))


def sign(x):
    """numpy's ``sign``: -1, 0 or 1 (NaN stays NaN)."""
    return 1.0 if x > 0 else -1.0 if x < 0 else 0.0 * x


def rint(x):
    """Round half to even, as numpy's ``rint``."""
    r = math.floor(x + 0.5)
    if r - x == 0.5 and r % 2 != 0:
        r -= 1.0
    return r
