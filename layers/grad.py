"""``gradient`` and ``withgradient`` for models, with Flux's conventions.

Plain arguments use the tape engine (``adcore.tape``).  The gradient of a model
mirrors it (``adcore.tree``): dicts for layer fields, tuples for ``Chain.layers``,
arrays at the leaves (zeros where the loss does not depend on them), ``None`` for
non-trainable parts.
"""
from adcore.annotations import Duplicated


def first_output(out):
    """The loss part of ``f``'s output: the output, or the first element of a tuple or dict."""
    if isinstance(out, tuple) and out:
        return out[0]
    if isinstance(out, dict) and out:
        return next(iter(out.values()))
    return out


def withgradient(f, *args, zero=True):
    """``(val, grad)``: ``f(*args)`` and its gradient with respect to each argument.

    ``f`` returns a scalar loss, or a tuple or dict whose first element is the loss
    (then ``val`` is the whole output); a non-scalar loss raises ``adcore.ADError``.
    ``grad`` has one entry per argument.  ``zero`` concerns ``Duplicated`` models
    (the LLVM-level engine), which are not supported yet.
    """
    if any(isinstance(a, Duplicated) for a in args):
        raise NotImplementedError(
            "Duplicated(model) selects the LLVM-level engine, which layers does not support "
            "yet; pass the plain model to use the tape engine")
    from adcore import tape
    return tape.withgradient(f, *args)


def gradient(f, *args, zero=True):
    """The gradient of the scalar ``f(*args)`` with respect to each argument (a tuple);
    see ``withgradient``."""
    return withgradient(f, *args, zero=zero).grad
