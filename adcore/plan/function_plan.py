"""The plan of one gradient function, made before its code is written: which scratch
arrays are snapshotted (:mod:`adcore.plan.snapshots`), the save-or-recompute policy
(:mod:`adcore.plan.values`, which decides the rest lazily while the reverse bodies ask for
values), which loops' arrays a replay refills (:mod:`adcore.plan.replays`) and which loops
carry a hint for LLVM (:mod:`adcore.plan.varying_loops`).  Each part is a named pass of
:data:`adcore.plan.PASSES` where it can be switched off."""
from ..timings import stage
from . import enabled
from .cache_cut import needed_values
from .replays import find_replays
from .snapshots import Snapshots
from .values import Values
from .varying_loops import LoopHints, varying_latches


class FunctionPlan:
    """``snapshots``, ``values``, ``replays`` (``{latch: Replay}``), ``hinted_latches`` and
    ``loop_hints`` of one gradient function."""

    def __init__(self, snapshots, values, replays, hinted_latches):
        self.snapshots, self.values, self.replays = snapshots, values, replays
        self.hinted_latches, self.loop_hints = hinted_latches, LoopHints()


def plan_function(gen):
    """The :class:`FunctionPlan` of ``gen`` (an AdjointGenerator whose analyses, spec,
    emitter and allocas are set): values are materialised with its emitter."""
    func, spec, analyses = gen.func, gen.spec, gen.analyses
    args = func.args
    extents = {} if spec.split else {args[d]: (args[n], args[i]) for d, (n, i) in spec.extents.items()}
    with stage("plan: snapshots"):
        snapshots = Snapshots(func, analyses.cfg, analyses.pointers, analyses.clobbers,
                              analyses.activity.active, extents, spec.distinct_arrays)
    values = Values(analyses.cfg, analyses.clobbers, gen.e, gen.alloca, snapshots.loop_of)
    values.needed = lambda: needed_values(func, analyses.activity, analyses.rule_of, gen.is_callee,
                                          gen.derivative_def)
    values.rewritten = frozenset(data for data, _, _ in snapshots.bases())
    values.changed_store = lambda store: not spec.keep_primal and gen.returns_primal(store)
    replays = {}
    if enabled("replays"):
        with stage("plan: replays"):
            replays = find_replays(analyses.cfg, analyses.pointers, analyses.clobbers, snapshots)
    # a callee's metadata ids could clash with another callee's: its loops get no hints
    hinted = set() if spec.split else varying_latches(analyses.cfg, values.variance)
    return FunctionPlan(snapshots, values, replays, hinted)
