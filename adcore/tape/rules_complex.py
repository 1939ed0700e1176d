"""Rules of the non-holomorphic complex functions (convention: see ``rules``).

With the cotangent ``c = dL/dx - i dL/dy`` of ``z = x + iy``, a real-valued
``w = u(x, y)`` with cotangent ``g`` gives ``c = g (du/dx - i du/dy)``.
"""
import numpy as np

from .rules import _nonzero, rule


@rule("real", np.real, view=True, complex_ok=True)
def _real(g, r):
    """out = x:  dz = g."""
    return (g,)


@rule("imag", np.imag, view=True, complex_ok=True)
def _imag(g, r):
    """out = y:  dz = -i g  (0 for a real operand: the tape keeps the real part)."""
    return (np.multiply(g, -1j),)


@rule("conj", np.conjugate, complex_ok=True)
def _conj(g, r):
    """out = x - iy:  dz = conj(g)."""
    return (np.conj(g),)


@rule("angle", np.angle, complex_ok=True)
def _angle(g, r):
    """out = atan2(y, x):  dz = -i g conj(z) / |z|**2  (0 at z = 0, and for a real operand)."""
    z = r.args[0]
    return (np.multiply(g, -1j) * np.conj(z) / _nonzero(z * np.conj(z)),)


def real_if_close_forward(x, tol=100):
    return np.real_if_close(x, tol=tol)


@rule("real_if_close", real_if_close_forward, view=True, complex_ok=True)
def _real_if_close(g, r):
    """out = x where every |y| <= tol (in machine epsilons when tol > 1, as numpy), else z:
    dz = g  (the cotangent of x alone in the first case: the tape casts it to z's type).
    As autograd: the branch is fixed by the primal value, as for any piecewise function."""
    return (g,)
