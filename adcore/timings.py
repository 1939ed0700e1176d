"""Where compile time goes: seconds per pipeline stage of each compile.

``adcore.last_compile_report()`` returns the report of the most recent compile,
:func:`compile_reports` the recent ones in order (one call may compile several things: a
gradient, then a training loop calling it); ``ADCORE_TIMINGS=1`` prints every report to
standard error as it is made.  Stages nest:
a stage's seconds exclude those of the stages inside it (the Numba compiles of custom-rule
reverses inside ``generate``, say), so the rows add up to the total.  Each stage has its
wall-clock seconds and the CPU seconds of the process (``time.process_time``: what to
compare on a machine busy with other work).
"""
import os
import sys
import time
from collections import deque
from contextlib import contextmanager

_active = []                     # reports being recorded, innermost last
_made = deque(maxlen=64)         # the most recent reports, oldest first


class CompileReport:
    """The seconds (``seconds``: wall clock, ``cpu_seconds``: the process's CPU time) of
    each stage of one compile of ``what``, in the order they ran."""

    def __init__(self, what):
        self.what = what
        self.seconds, self.cpu_seconds = {}, {}
        self._stack = []         # [stage, start, CPU start, seconds and CPU seconds of nested stages]

    @property
    def total(self):
        return sum(self.seconds.values())

    @property
    def total_cpu(self):
        return sum(self.cpu_seconds.values())

    def __str__(self):
        width = max([len(s) for s in self.seconds] + [5])
        rows = [f"  {name:<{width}}  {sec * 1e3:9.1f} ms  {self.cpu_seconds[name] * 1e3:9.1f} ms CPU"
                for name, sec in self.seconds.items()]
        return "\n".join([f"adcore compile of {self.what}:"] + rows +
                         [f"  {'total':<{width}}  {self.total * 1e3:9.1f} ms  {self.total_cpu * 1e3:9.1f} ms CPU"])

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
    entry = [name, time.perf_counter(), time.process_time(), 0.0, 0.0]
    report._stack.append(entry)
    try:
        yield
    finally:
        report._stack.pop()
        elapsed, cpu = time.perf_counter() - entry[1], time.process_time() - entry[2]
        report.seconds[name] = report.seconds.get(name, 0.0) + elapsed - entry[3]
        report.cpu_seconds[name] = report.cpu_seconds.get(name, 0.0) + cpu - entry[4]
        if report._stack:
            report._stack[-1][3] += elapsed
            report._stack[-1][4] += cpu
