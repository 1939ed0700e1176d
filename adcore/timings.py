"""Where compile time goes: seconds per pipeline stage of each compile.

``adcore.last_compile_report()`` returns the report of the most recent compile,
:func:`compile_reports` the recent ones in order (one call may compile several things: a
gradient, then a training loop calling it); ``ADCORE_TIMINGS=1`` prints every report to
standard error as it is made.  Stages nest:
a stage's seconds exclude those of the stages inside it (the Numba compiles of custom-rule
reverses inside ``generate``, say), so the rows add up to the total.
"""
import os
import sys
import time
from collections import deque
from contextlib import contextmanager

_active = []                     # reports being recorded, innermost last
_made = deque(maxlen=64)         # the most recent reports, oldest first


class CompileReport:
    """The seconds of each stage of one compile of ``what``, in the order they ran."""

    def __init__(self, what):
        self.what = what
        self.seconds = {}
        self._stack = []         # [stage, start, seconds of nested stages]

    @property
    def total(self):
        return sum(self.seconds.values())

    def __str__(self):
        width = max([len(s) for s in self.seconds] + [5])
        rows = [f"  {name:<{width}}  {sec * 1e3:9.1f} ms" for name, sec in self.seconds.items()]
        return "\n".join([f"adcore compile of {self.what}:"] + rows +
                         [f"  {'total':<{width}}  {self.total * 1e3:9.1f} ms"])

    def __repr__(self):
        return f"<CompileReport {self.what}: {self.total * 1e3:.1f} ms>"


def last_compile_report():
    """The :class:`CompileReport` of the most recent compile (None before the first)."""
    return _made[-1] if _made else None


def compile_reports():
    """The :class:`CompileReport` of the most recent compiles (up to 64), oldest first."""
    return list(_made)


@contextmanager
def compiling(what):
    """Record the stages of one compile of ``what``; yields its report."""
    report = CompileReport(what)
    _active.append(report)
    try:
        yield report
    finally:
        _active.remove(report)
    _made.append(report)
    if os.environ.get("ADCORE_TIMINGS") == "1":
        print(report, file=sys.stderr)


@contextmanager
def stage(name):
    """Time stage ``name`` of the compile being recorded (nothing when none is)."""
    if not _active:
        yield
        return
    report = _active[-1]
    entry = [name, time.perf_counter(), 0.0]
    report._stack.append(entry)
    try:
        yield
    finally:
        report._stack.pop()
        elapsed = time.perf_counter() - entry[1]
        report.seconds[name] = report.seconds.get(name, 0.0) + elapsed - entry[2]
        if report._stack:
            report._stack[-1][2] += elapsed
