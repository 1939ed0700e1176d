"""Train and test mode, as Flux: layers with an ``active`` attribute (``BatchNorm``,
``Dropout``) use batch statistics and drop units when ``active`` is ``True``, not when it
is ``False``, and when it is ``None`` (automatic) only inside ``gradient``/``withgradient``/
``train`` (recognised by traced operands, on either engine)."""
from adcore.annotations import Duplicated
from adcore.tape.tracked import Tracked
from adcore.tree import children

__all__ = ["trainmode", "testmode", "is_active"]


def is_active(layer, *arrays):
    """The layer's mode for a call on ``arrays`` (its input and parameters)."""
    if layer.active is not None:
        return layer.active
    return any(type(a) is Tracked for a in arrays)


def _set(model, value):
    target = model.val if isinstance(model, Duplicated) else model
    seen = set()

    def walk(x):
        if id(x) in seen:
            return
        seen.add(id(x))
        if hasattr(x, "active") and hasattr(type(x), "__tree_fields__"):
            x.active = value
        for _, c in children(x):
            walk(c)

    walk(target)
    return model


def trainmode(model, mode=True):
    """Force training behaviour (``mode=True``), test behaviour (``False``) or the automatic
    one (``"auto"``) on every layer of ``model`` that has a mode; returns ``model``."""
    return _set(model, None if mode == "auto" else bool(mode))


def testmode(model, mode=True):
    """Force test behaviour (``mode=True``), training behaviour (``False``) or the automatic
    one (``"auto"``); returns ``model``."""
    return _set(model, None if mode == "auto" else not mode)
