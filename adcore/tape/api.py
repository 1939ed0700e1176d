"""User entry points: ``gradient``, ``withgradient`` and ``record``."""
from typing import Any, NamedTuple

import numpy as np

from ..annotations import Active, Duplicated
from ..errors import ActivityError, ADError
from .builders import building_arrays
from .recording import Tape
from .tracked import Tracked, primal
from .trees import grad_tree, track


class ValueAndGradient(NamedTuple):
    """The result of ``withgradient``: ``val`` is f's whole output, ``grad`` one gradient per argument."""
    val: Any
    grad: tuple


class Recording(NamedTuple):
    """The result of ``record``: the ``tape``, the tracked ``args`` trees and f's output ``out``."""
    tape: Tape
    args: tuple
    out: Any


def _unwrap(arg):
    if isinstance(arg, Active):
        return arg.val
    if isinstance(arg, Duplicated):
        raise ActivityError("adcore.tape.gradient takes plain values (differentiated) or Const(...); "
                            "Duplicated belongs to adcore.autodiff and layers.gradient")
    return arg


def record(f, *args):
    """Run ``f`` on tracked copies of ``args`` and return ``Recording(tape, args, out)``.

    Float and complex leaves of the argument trees become the tape's inputs (in
    argument order); ``out`` is f's output, with tracked arrays where it depends on
    them.  While f runs, ``np.array``/``np.asarray``/``np.r_``/``np.c_`` build tracked
    arrays from tracked values (see ``builders``).
    """
    tape = Tape()
    tracked = tuple([track(_unwrap(a), tape) for a in args])
    with building_arrays():
        out = f(*tracked)
    return Recording(tape, tracked, out)


def _loss(out):
    """The differentiated part of f's output: the output, or its first element."""
    if isinstance(out, tuple) and out:
        return out[0]
    if isinstance(out, dict) and out:
        return next(iter(out.values()))
    return out


def withgradient(f, *args):
    """``(val, grad)``: f's output and the gradient of its scalar loss with respect to each argument.

    The loss is f's output, or its first element when f returns a tuple or dict.
    A complex loss differentiates its real part (so a holomorphic f gives f'(z)); the
    gradient for a complex argument ``z = x + iy`` is ``dL/dx - i dL/dy`` (autograd's and
    JAX's convention).  ``grad`` has one entry per argument, mirroring its structure:
    arrays for float and complex arrays, floats for floats, tuples for tuples/lists, dicts for dicts, ``{field:
    gradient}`` dicts for tree nodes, ``None`` for ``Const(...)`` and non-float values.
    """
    tape, tracked, out = record(f, *args)
    loss = _loss(out)
    if type(loss) is Tracked:
        if loss.size != 1:
            raise ADError(f"gradient needs a scalar loss, but f returned an array of shape {loss.shape}; "
                          "reduce it (e.g. np.sum) or call Tape.backward with a seed")
        adjoints = tape.backward(loss.id)
    else:
        if np.size(loss) != 1 or not isinstance(np.asarray(loss).item(), (int, float, complex)):
            raise ADError(f"gradient needs a scalar float loss, but f returned {loss!r}")
        adjoints = None  # the loss does not depend on the arguments
    return ValueAndGradient(primal(out), tuple([grad_tree(t, adjoints) for t in tracked]))


def gradient(f, *args):
    """The gradient of f's scalar loss with respect to each argument (see ``withgradient``)."""
    return withgradient(f, *args).grad
