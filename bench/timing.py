"""Timing: samples of a call after warm-up (``Sampler``), their summary (``Timing``), and the
time of a first call."""
import math
import statistics
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    """Seconds per call of each sample (a sample times ``number`` calls in a row), after
    ``warmup`` untimed calls."""
    samples: tuple
    number: int = 1
    warmup: int = 0

    @property
    def median(self):
        return statistics.median(self.samples)

    def scaled(self, factor):
        """The same samples times ``factor`` (seconds per call -> seconds per 1000 epochs)."""
        return Timing(tuple(s * factor for s in self.samples), self.number, self.warmup)

    def stats(self):
        """n, min, quartiles, max and interquartile range (``statistics.quantiles``,
        inclusive method: with one sample, all equal it)."""
        s = sorted(self.samples)
        q1, q2, q3 = statistics.quantiles(s, n=4, method="inclusive") if len(s) > 1 else s * 3
        return dict(n=len(s), min=s[0], q1=q1, median=q2, q3=q3, max=s[-1], iqr=q3 - q1)


@dataclass(frozen=True)
class Sampler:
    """How to sample: ``repeat`` timed samples, each of enough calls to last at least
    ``min_time`` seconds (calibrated on one call after ``warmup`` untimed calls)."""
    repeat: int = 5
    min_time: float = 0.002
    warmup: int = 1

    def _calibrate(self, fn, number):
        """Calls per sample: from a call timed right after another (the callable timed
        before may have left the caches cold, making one call of a fast callable seem
        to last a whole sample)."""
        if number is not None:
            return number
        fn()
        t0 = time.perf_counter()
        fn()
        return max(1, math.ceil(self.min_time / max(time.perf_counter() - t0, 1e-9)))

    def time(self, fn, number=None, warmup=None):
        """A Timing of ``fn()``; ``number`` fixes the calls per sample instead of calibrating."""
        return self.interleaved([fn], number, warmup)[0]

    def interleaved(self, fns, number=None, warmup=None):
        """Timings of several callables whose samples alternate, so that a change of machine
        load hits them alike; ``None`` entries give ``None``."""
        warmup = self.warmup if warmup is None else warmup
        live = [f for f in fns if f is not None]
        for f in live:
            for _ in range(warmup):
                f()
        numbers = {id(f): self._calibrate(f, number) for f in live}
        samples = {id(f): [] for f in live}
        for _ in range(self.repeat):
            for f in live:
                n = numbers[id(f)]
                t0 = time.perf_counter()
                for _ in range(n):
                    f()
                samples[id(f)].append((time.perf_counter() - t0) / n)
        return [None if f is None else Timing(tuple(samples[id(f)]), numbers[id(f)], warmup)
                for f in fns]


def default_sampler(quick):
    """The sampling of ``python -m bench`` without ``--repeat``/``--min-time``: 5 samples of at
    least 2 ms with ``--quick`` (the quick run stays under a minute), else 15 of at least 10 ms."""
    return Sampler(repeat=5, min_time=0.002) if quick else Sampler(repeat=15, min_time=0.01)


def first_call(fn):
    """``(seconds, result)`` of one call: on a fresh compiled function, the compile latency."""
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out
