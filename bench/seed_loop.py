"""The seed's native training loop next to the hand-written one, interleaved in one process.

``python -m bench.seed_loop [ROUNDS]`` times, round after round, ``train(loss,
Duplicated(model), data, state, epochs=100)``, the part of it spent in the native loop
(its call alone, without the Python around it), and the fused hand-written loops of
``bench.seed`` (the faster is the reference); it prints the medians per 1000 epochs and
their ratios.  Wall time, ``OPENBLAS_NUM_THREADS`` as set; run the old and the new tree in
alternating processes (``PYTHONPATH=...``) to compare two versions of adcore.
"""
import statistics
import sys
import time

from adcore import Duplicated
from layers import train
from layers.staging import program
from optim import Adam, setup

from . import seed

EPOCHS = seed.HAND_EPOCHS


class _Timed:
    """Wraps the loop's call, summing the seconds it takes."""

    def __init__(self, run):
        self.run, self.seconds = run, 0.0

    def __call__(self, *args):
        t0 = time.perf_counter()
        out = self.run(*args)
        self.seconds += time.perf_counter() - t0
        return out


def runners():
    """``(adcore, native, hand)``: a callable training ``EPOCHS`` epochs with adcore, the
    timer of its native loop, and the hand-written loops' callables."""
    data = seed.seed_data()
    dup = Duplicated(seed.seed_model())
    state = setup(Adam(), dup)

    def adcore():
        return train(seed.loss, dup, data, state, epochs=EPOCHS)
    adcore()
    plan = program.lookup(seed.loss, (dup,) + tuple(data[0]))[0].plans[id(state)]
    native = plan.call.run = _Timed(plan.call.run)
    hand = [fn for name, (fn, _) in seed.hand_runners().items() if name.startswith("hand")]
    return adcore, native, hand


def measure(rounds=15, reps=20):
    """Medians over ``rounds`` of ms per 1000 epochs: ``{"adcore", "native", "hand"}``."""
    adcore, native, hand = runners()
    for fn in [adcore, *hand]:
        fn()
    scale = 1e3 * 1000 / (reps * EPOCHS)

    def timed(fn):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - t0) * scale
    out = {"adcore": [], "native": [], "hand": []}
    for _ in range(rounds):
        native.seconds = 0.0
        out["adcore"].append(timed(adcore))
        out["native"].append(native.seconds * scale)
        out["hand"].append(min(timed(fn) for fn in hand))
    return {k: statistics.median(v) for k, v in out.items()}


def report(m):
    return (f"ms per 1000 epochs: train(epochs={EPOCHS}) {m['adcore']:.2f} (its native loop "
            f"{m['native']:.2f}), hand-written {m['hand']:.2f}; x ref {m['adcore'] / m['hand']:.3f}, "
            f"native loop x ref {m['native'] / m['hand']:.3f}")


if __name__ == "__main__":
    print(report(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 15)))
