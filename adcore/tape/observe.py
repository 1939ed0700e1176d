"""A hook for tools that record a function once and replay the recording.

The recording holds every differentiable op, but not what the function computes from
tracked values outside it: Python values (``bool(x)`` in an ``if``, ``int(x)``,
``x.item()``) and plain arrays (comparisons, ``np.isfinite``, ``argmax``, ``round``).
A tool replaying the recording (the compiled path of ``layers``) must see those.  While
``observing(observer)`` runs on a thread, the tape calls on that thread:

``observer.to_python(how)``
    before a tracked value becomes a Python value; ``how`` names the conversion
    (``"bool()"``, ``"float()"``, ``"int()"``, ``"complex()"``, ``".item()"``,
    ``".tolist()"``).  Raising refuses the conversion.
``observer.plain(out, ufunc, operands)``
    for a plain (untracked) result ``out`` computed from ``operands``, some tracked;
    ``ufunc`` is the name of the numpy ufunc when ``out`` is one elementwise call
    ``ufunc(*operands)``, else ``None``.  The tape returns what it returns instead of ``out``.

Outside ``observing`` the tape calls nothing (one thread-local lookup per such value).
"""
import contextlib
import threading

_local = threading.local()


def observer():
    """The observer active on this thread, or ``None``."""
    return getattr(_local, "observer", None)


@contextlib.contextmanager
def observing(obs):
    """Make the tape report to ``obs`` (on this thread) while the block runs."""
    old = observer()
    _local.observer = obs
    try:
        yield obs
    finally:
        _local.observer = old


def to_python(how):
    """Report that a tracked value is being converted to a Python value by ``how``."""
    obs = observer()
    if obs is not None:
        obs.to_python(how)


def plain(out, ufunc, operands):
    """Report the plain result ``out`` computed from tracked ``operands``; returns the value to use."""
    obs = observer()
    return out if obs is None else obs.plain(out, ufunc, operands)
