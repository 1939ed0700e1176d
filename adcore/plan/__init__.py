"""The plan between analysis and generation: what the reverse pass keeps or recomputes
(the minimum cut), scratch arrays snapshotted or refilled, loop order, and its report.

The plan is made of named passes, each of which can be switched off for one compile
(``adcore.compile_gradient(..., passes={"replays": False})``) or for the process
(``ADCORE_PASSES="-replays,-min_cut"``, read at the first compile).  A pass switched off
leaves a plan that is still exact, only slower or larger: every pass is an optimisation
over the plain plan of keeping what the reverse pass needs on the value stack.  The
compile report times each pass (``plan: <name>``).
"""
import contextlib
import contextvars
import os

from ..errors import ActivityError

# name -> what the pass does (and what the plan does instead when it is off)
PASSES = {
    "recompute": "pure values inside loops are recomputed by the reverse pass where that "
                 "saves bytes (off: every value the reverse pass needs in a loop is kept)",
    "min_cut": "which recomputable values in loops are kept: a minimum cut over the values the "
               "reverse rules read (off: each value decided alone, by the bytes it saves)",
    "stored_copies": "a value stored at a[i] in a loop is loaded back from a[i] in the reverse "
                     "pass (off: it is kept)",
    "kept_derivatives": "sin and cos in a loop whose operand would be kept: the forward pass "
                        "computes and keeps the derivative (cos, sin) instead (off: the operand "
                        "is kept and the reverse pass computes the derivative)",
    "snapshots": "scratch arrays a loop overwrites are copied once per iteration (off: each "
                 "load of them the reverse pass needs is kept)",
    "replays": "scratch arrays the reverse pass can refill are refilled instead of copied "
               "back (off: their snapshots are copied back)",
    "loop_order": "innermost loops whose iterations commute run their reverse counting up "
                  "(off: every reverse counts down)",
    "read_modify_write": "the reverse of a[j] += v leaves the shadow of a[j] as it is (off: "
                         "it zeroes the shadow and adds it back)",
}
ENVIRONMENT = "ADCORE_PASSES"

_chosen = contextvars.ContextVar("adcore_disabled_passes", default=None)
_from_environment = []       # [the passes ADCORE_PASSES switches off], read once


def _parse_environment(text):
    off = set()
    for item in filter(None, (s.strip() for s in text.split(","))):
        name = item.lstrip("+-")
        _check(name, f"{ENVIRONMENT}={text!r}")
        if item.startswith("-"):
            off.add(name)
    return frozenset(off)


def _check(name, where):
    if name not in PASSES:
        raise ActivityError(f"{where}: unknown plan pass {name!r}; the passes are "
                            f"{', '.join(PASSES)}")


def disabled():
    """The passes switched off for the compile being made (a frozenset of names)."""
    chosen = _chosen.get()
    if chosen is not None:
        return chosen
    if not _from_environment:
        _from_environment.append(_parse_environment(os.environ.get(ENVIRONMENT, "")))
    return _from_environment[0]


def enabled(name):
    """Whether pass ``name`` runs in the compile being made."""
    return name not in disabled()


def switched_off(passes):
    """The passes ``passes`` (``{name: bool}``, None for the default) switches off, on top
    of those ``ADCORE_PASSES`` does; an unknown name or a value that is not a bool is an
    :class:`adcore.ActivityError`, raised before anything compiles."""
    base = disabled()
    if passes is None:
        return base
    if not isinstance(passes, dict):
        raise ActivityError(f"passes must be a dict {{name: bool}}, got {type(passes).__name__}")
    off = set(base)
    for name, on in passes.items():
        _check(name, "passes")
        if not isinstance(on, bool):
            raise ActivityError(f"passes[{name!r}] must be True or False, got {on!r}")
        (off.discard if on else off.add)(name)
    return frozenset(off)


@contextlib.contextmanager
def using(off):
    """Compile with the passes ``off`` (a frozenset from :func:`switched_off`) switched off."""
    token = _chosen.set(frozenset(off))
    try:
        yield
    finally:
        _chosen.reset(token)
