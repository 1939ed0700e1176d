"""``gradient`` and ``withgradient`` for models, with Flux's conventions.

Plain arguments use the tape engine (``adcore.tape``); a ``Duplicated`` argument
selects the LLVM-level engine (``layers.staging``), where the other arguments are
constants.  The gradient of a model mirrors it (``adcore.tree``): dicts for layer
fields, tuples for ``Chain.layers``, arrays at the leaves (zeros where the loss does
not depend on them), ``None`` for non-trainable parts.
"""
from adcore.annotations import Duplicated
from adcore.errors import ActivityError
from adcore.tape import ValueAndGradient
from adcore.tape import withgradient as tape_withgradient

from .staging.program import gradients, lookup, loss_part as first_output, stage


def withgradient(f, *args, zero=True):
    """``(val, grad)``: ``f(*args)`` and its gradient with respect to each argument.

    ``f`` returns a scalar loss, or a tuple or dict whose first element is the loss
    (then ``val`` is the whole output); a non-scalar loss raises ``adcore.ADError``.
    ``grad`` has one entry per argument.

    With a ``Duplicated`` argument the loss is compiled (once per model structure and
    argument shapes) and differentiated by adcore; its gradient is written into the
    stored shadow, which is zeroed first unless ``zero=False``, and the returned arrays
    are that shadow's arrays.  Non-``Duplicated`` arguments are then constants (``None``).
    """
    for a in args:
        if isinstance(a, Duplicated):
            return ValueAndGradient(*stage(f, args, zero))
    return tape_withgradient(f, *args)


def gradient(f, *args, zero=True):
    """The gradient of the scalar ``f(*args)`` with respect to each argument (a tuple);
    see ``withgradient``."""
    for a in args:
        if isinstance(a, Duplicated):
            return gradients(f, args, zero)
    return withgradient(f, *args).grad


def threads(f, *args):
    """How the ``Duplicated`` gradient of ``f(*args)`` uses the cores, as a sentence: its
    batch's rows split into parts on Numba's threads, or why it runs serially (staging
    the program, and with more than one Numba thread its split, if not done yet)."""
    if not any(isinstance(a, Duplicated) for a in args):
        raise ActivityError("layers.threads: the model must be passed as Duplicated(model)")
    rows = lookup(f, args)[0].row_threads
    rows.split_for(f, args)
    return rows.describe
