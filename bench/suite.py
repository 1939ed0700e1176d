"""The built-in workloads of ``python -m bench``, registered in the order they run. The other
engineers' benchmark modules are adapted to result rows (``bench.rows.row``) here."""
import importlib

import numpy as np

from . import compile_times, digits, distributed, forward, gmm_points, mlp, mlp_train, parallel, scale, seed_peers  # noqa: F401 (compile_times, distributed, forward and parallel register themselves)
from .registry import workload
from .rows import failed, row, skipped
from .timing import Timing, first_call

CASE = "time per 1000 epochs x 41 samples"
EPOCHS = 1000


@workload("seed", "seed training: per-sample Adam on a 1-23-1 tanh network", quick=True)
def run_seed(config):
    """bench/seed.py's rows (the engines of layers and a hand-written Numba loop, per 1000
    epochs), then the peers trained from the same initial weights with the same Adam; their
    final loss is checked against layers.train on the tape engine for the same epochs."""
    epochs = max(1, int((100 if config.quick else EPOCHS) * config.size))
    rows, ref = [], None
    try:
        seed_module = importlib.import_module("bench.seed")
    except ImportError:
        rows.append(skipped("seed", "", "bench/seed.py", "not written yet: layers' engines not run"))
    else:
        rows, ref = _adapt_seed(seed_module.run(config.sampler)[0])
    ref_loss, tape_epoch = _tape_seed(epochs, rows)
    return rows + seed_peer_rows(epochs, ref_loss, ref or tape_epoch, config.sampler)


def _adapt_seed(seed_rows):
    """``(rows, median seconds per epoch of the hand-written loop)`` from bench/seed.py's rows."""
    timed = [r for r in seed_rows if "epoch" in r]
    ref = min(r["epoch"].median for r in timed if "hand" in r["variant"])
    rows = [row("seed", CASE, r["variant"], r["epoch"].scaled(EPOCHS),
                vs_ref=r["epoch"].median / ref,
                note="reference" if r["epoch"].median == ref else
                f"last-epoch loss {r['mean_loss_after_warmup']:.4f} (bench/seed.py)")
            for r in timed]
    latency = "compile and call latency (bench/seed.py)"
    for r in seed_rows:
        if "call" in r:
            rows.append(row("seed", latency, r["variant"], r["call"]))
        elif "seconds" in r:
            rows.append(row("seed", latency, r["variant"], first_call_s=r["seconds"]))
    return rows, ref


def _seed_model():
    """The seed model with its initial weights, and the samples."""
    from layers import Chain, Dense, only, tanh
    model = Chain(Dense(1, 23, tanh, rng=0), Dense(23, 1, bias=False, rng=1), only)
    return model, seed_peers.data()


def _tape_seed(epochs, rows):
    """Trains with ``layers.train`` on the tape engine; appends its row, returns its final
    loss and seconds per epoch."""
    from layers import train
    from optim import Adam, setup
    model, (xs, ys) = _seed_model()
    data = [(np.array([x], np.float32), y) for x, y in zip(xs, ys)]
    state = setup(Adam(), model)

    def loss(m, x, y):
        return (m(x) - y) ** 2
    t, _ = first_call(lambda: [train(loss, model, data, state) for _ in range(epochs)])
    final = seed_peers.mean_loss(model[0].weight, model[0].bias, model[1].weight, xs, ys)
    rows.append(row("seed", f"final loss after {epochs} epochs (checks the peers)",
                    "layers.train, tape engine", check=f"final loss {final:.6f}",
                    note=f"{t / epochs * EPOCHS:.2f} s per 1000 epochs"))
    return final, t / epochs


def seed_peer_rows(epochs, ref_loss, ref_epoch, sampler):
    """The peers' training runs: time per 1000 epochs against ``ref_epoch`` (seconds per
    epoch), final loss against ``ref_loss``."""
    model, (xs, ys) = _seed_model()
    init = (model[0].weight, model[0].bias, model[1].weight)
    out = []
    for name, train in seed_peers.trainers(*init, xs, ys).items():
        if isinstance(train, str):
            out.append(skipped("seed", CASE, name, train))
            continue
        try:
            first, final = first_call(lambda: train(epochs))
            # a training run of over a second is one sample (its first call); a shorter one
            # (JAX's first call compiles) is sampled again
            timing = Timing((first,)) if first > 1 else sampler.time(lambda: train(epochs), warmup=0)
        except Exception as exc:
            out.append(failed("seed", CASE, name, exc))
            continue
        per_epoch = timing.scaled(1 / epochs)
        out.append(row("seed", CASE, name, per_epoch.scaled(EPOCHS),
                       vs_ref=per_epoch.median / ref_epoch,
                       first_call_s=None if first > 1 else first,
                       err=abs(final - ref_loss) / ref_loss, tol=1e-3,
                       note=f"final loss {final:.6f}"))
    return out


workload("mlp", "Flux docs MLP 784-32-10, one gradient", quick=True)(mlp.run)
workload("mlp-train", "MLP 784-256-256-10, one Adam training step")(mlp_train.run)
workload("gmm", "ADBench GMM objective: gradient/objective ratios and checks", quick=True)(gmm_points.run)
workload("scale", "GMM, LSTM and kernels at growing sizes: cost and cached bytes")(scale.run)
workload("digits", "CNN and MLP trained on sklearn's 8x8 digits, both engines")(digits.run)


@workload("kernels", "kernel set: gradient/primal and adcore/hand-written", quick=True)
def run_kernels(config):
    """bench/kernels.py: primal, adcore gradient and hand-written gradient of each kernel."""
    kernel_module = importlib.import_module("bench.kernels")
    out = []
    for r in kernel_module.run(config.sampler, config.quick or config.size < 1):
        case = f"{r['workload']}, {r['size']}"
        out.append(row("kernels", case, "Numba primal", r["primal"]))
        for impl, t in (("hand-written Numba gradient", r["hand"]),
                        ("hand-written numpy gradient", r["hand_numpy"])):
            if t is not None:
                out.append(row("kernels", case, impl, t, vs_ref=t.median / r["reference"],
                               grad_obj=t.median / r["primal"].median,
                               note="reference" if t.median == r["reference"] else ""))
        out.append(row("kernels", case, "adcore gradient", r["adcore"], vs_ref=r["adcore_over_hand"],
                       grad_obj=r["grad_over_primal"], first_call_s=r["first_call_s"],
                       cached_bytes=r["cached_bytes"]))
    return out


@workload("tape", "tape engine overhead next to HIPS autograd")
def run_tape(config):
    """bench/tape_bench.py: the tape engine's per-op overhead and MLP gradient next to autograd
    and PyTorch eager."""
    tape_bench = importlib.import_module("bench.tape_bench")
    out = []
    for r in tape_bench.run(config.sampler):
        case = r["benchmark"].strip() + (", time per op" if r["per"] == "op" else "")
        for impl in ("adcore.tape", "autograd", "torch"):
            if r[impl] is None:
                out.append(skipped("tape", case, impl, f"{impl} not installed or no such case"))
                continue
            note = f"adcore.tape / autograd = {r['ratio']:.2f}" if impl == "autograd" else ""
            out.append(row("tape", case, impl, r[impl], note=note))
    return out
