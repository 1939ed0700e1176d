"""Loops whose trip count changes with an enclosing loop: their scalar remainder unrolled.

Such a loop (the rows under each column of ADBench's packed triangle: ``for r in range(c + 1,
d)``) runs a different number of trips each time, most runs short.  LLVM vectorises it 8
wide and interleaves 4 times (AVX-512), so a run of fewer than 32 trips, and the last trips
of any run, go through the scalar remainder loop, which LLVM keeps rolled: loop control for
every trip.  The forward pass's copy of such a loop and its replay (:mod:`adcore.plan.replays`)
carry ``llvm.loop.vectorize.followup_epilogue`` asking for that remainder to be unrolled 4
times.  The trip count is taken to change when the start or the bound of the counter its exit
test compares (:mod:`adcore.analysis.exit_values`) changes with an enclosing loop
(:mod:`adcore.analysis.loop_variance`), an estimate: a hint's only effect is speed, never what the code
computes.  Loops with more loads and stores than :mod:`adcore.backend.loop_hints` lets LLVM vectorise
get no hint (that limit, for compile time, skips loops that carry one).
"""
from ..analysis.exit_values import exit_test
from ..backend.loop_hints import MAX_VECTORISED_ACCESSES

# Metadata ids of the hints: above those of any primal module, which LLVM numbers from 0
# (the parser renumbers them).
FIRST_ID = 1 << 20
REMAINDER_UNROLL = 4


def trip_count_varies(test, variance):
    """Whether the loop of exit test ``test`` (an :class:`adcore.analysis.exit_values.ExitTest`) may
    run a different number of trips in different iterations of a loop around it
    (``variance``: the function's :class:`adcore.analysis.loop_variance.LoopVariance`)."""
    header = test.loop.header
    around = variance.loops_around(header) - {header}
    return bool(around & (variance.of(test.start.defn) | variance.of(test.bound.defn)))


def varying_latches(cfg, variance):
    """The latches of the innermost counted loops of ``cfg`` whose trip count varies, of at
    most ``MAX_VECTORISED_ACCESSES`` loads and stores."""
    out = set()
    for loop in cfg.loops:
        iv = cfg.ivs.get(loop.header)
        inner = any(h is not loop.header and h in loop.blocks for h in cfg.loop_at)
        if iv is None or inner:
            continue
        accesses = sum(i.opcode in ("load", "store") for b in loop.blocks for i in b.instrs)
        test = exit_test(loop, iv.outside)
        if test is not None and accesses <= MAX_VECTORISED_ACCESSES and trip_count_varies(test, variance):
            out.add(loop.latches[0])
    return out


class LoopHints:
    """The hints of one gradient function: ``attach(text)`` gives a loop latch's branch
    ``text`` with the hint attached (unchanged when it carries loop metadata already),
    ``text()`` the metadata nodes the attachments name."""

    def __init__(self):
        self.loops = 0

    def attach(self, text):
        if "!llvm.loop" in text:
            return text
        self.loops += 1
        return f"{text}, !llvm.loop !{FIRST_ID + 1 + self.loops}"

    def text(self):
        if not self.loops:
            return ""
        unroll, followup = FIRST_ID, FIRST_ID + 1
        nodes = [f'!{unroll} = !{{!"llvm.loop.unroll.count", i32 {REMAINDER_UNROLL}}}',
                 f'!{followup} = !{{!"llvm.loop.vectorize.followup_epilogue", !{unroll}}}']
        nodes += [f"!{k} = distinct !{{!{k}, !{followup}}}"
                  for k in range(followup + 1, followup + 1 + self.loops)]
        return "\n".join(nodes) + "\n"
