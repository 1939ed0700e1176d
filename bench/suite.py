"""The workloads of ``python -m bench``: each runs as ``fn(quick, size)`` and returns table rows
(``measure.row``). The other engineers' benchmark modules are adapted to those rows here."""
import contextlib
import importlib
import io

import numpy as np

from . import gmm, mlp, seed_peers
from .measure import failed, first_call, median_seconds, row, skipped


def _seed(quick, size):
    """bench/seed.py's rows (the engines of layers and a hand-written Numba loop, per 1000
    epochs), then the peers trained from the same initial weights with the same Adam; their
    final loss is checked against layers.train on the tape engine for the same epochs."""
    epochs = max(1, int((100 if quick else 1000) * size))
    rows, ref_ms = [], None
    try:
        seed = importlib.import_module("bench.seed")
    except ImportError:
        rows.append(skipped("seed", "", "bench/seed.py", "not written yet: layers' engines not run"))
    else:
        rows, ref_ms = _adapt_seed(seed.run(quick or size < 1)[0])
    ref_loss, tape_ms = _tape_seed(epochs, rows)
    return rows + seed_peer_rows(epochs, ref_loss, ref_ms or tape_ms)


CASE = "time per 1000 epochs x 41 samples"


def _adapt_seed(seed_rows):
    """``(rows, ms per 1000 epochs of the hand-written loop)`` from bench/seed.py's rows."""
    timed = [r for r in seed_rows if "seconds_per_1000_epochs" in r]
    ref = next(r for r in timed if "hand" in r["variant"])["seconds_per_1000_epochs"] * 1e3
    rows = [row("seed", CASE, r["variant"], r["seconds_per_1000_epochs"] * 1e3,
                vs_ref=r["seconds_per_1000_epochs"] * 1e3 / ref,
                note="reference" if "hand" in r["variant"] else
                f"last-epoch loss {r['mean_loss_after_warmup']:.4f} (bench/seed.py)")
            for r in timed]
    for r in seed_rows:
        if "seconds_per_1000_epochs" not in r:
            first = "first" in r["variant"]
            rows.append(row("seed", "compile and call latency (bench/seed.py)", r["variant"],
                            None if first else r["seconds"] * 1e3,
                            first_s=r["seconds"] if first else None))
    return rows, ref


def _seed_model():
    """The seed model with its initial weights, and the samples."""
    from layers import Chain, Dense, only, tanh
    model = Chain(Dense(1, 23, tanh, rng=0), Dense(23, 1, bias=False, rng=1), only)
    return model, seed_peers.data()


def _tape_seed(epochs, rows):
    """Trains with ``layers.train`` on the tape engine; appends its row, returns its final
    loss and time."""
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
                    note=f"{t / epochs * 1e3:.2f} s per 1000 epochs"))
    return final, t / epochs * 1e6


def seed_peer_rows(epochs, ref_loss, ref_ms):
    """The peers' training runs: time per 1000 epochs against ``ref_ms``, final loss against
    ``ref_loss``."""
    model, (xs, ys) = _seed_model()
    init = (model[0].weight, model[0].bias, model[1].weight)
    case = CASE
    out = []
    for name, train in seed_peers.trainers(*init, xs, ys).items():
        if isinstance(train, str):
            out.append(skipped("seed", case, name, train))
            continue
        try:
            first, final = first_call(lambda: train(epochs))
            # a run of over a second is timed once; a shorter one (JAX's first call compiles)
            # again, as the median of 3
            t = first if first > 1 else median_seconds(lambda: train(epochs), 3, warmup=0)
        except Exception as exc:
            out.append(failed("seed", case, name, exc))
            continue
        ms = t / epochs * 1e6
        out.append(row("seed", case, name, ms, vs_ref=ms / ref_ms,
                       first_s=None if first > 1 else first,
                       err=abs(final - ref_loss) / ref_loss, tol=1e-3,
                       note=f"final loss {final:.6f}"))
    return out


def _kernels(quick, size):
    """bench/kernels.py: primal, adcore gradient and hand-written gradient of each kernel."""
    kernels = importlib.import_module("bench.kernels")
    out = []
    for r in kernels.run(quick or size < 1):
        case = f"{r['workload']}, {r['size']}"
        out += [row("kernels", case, "Numba primal", r["primal_ms"]),
                row("kernels", case, "hand-written Numba gradient", r["hand_ms"], vs_ref=1.0,
                    grad_obj=r["hand_ms"] / r["primal_ms"], note="reference"),
                row("kernels", case, "adcore gradient", r["adcore_ms"], vs_ref=r["adcore_over_hand"],
                    grad_obj=r["grad_over_primal"], first_s=r["first_call_s"],
                    cached=r["cached_bytes"])]
    return out


def _tape(quick, size):
    """bench/tape_bench.py: the tape engine's per-op overhead and MLP gradient next to autograd."""
    tape_bench = importlib.import_module("bench.tape_bench")
    with contextlib.redirect_stdout(io.StringIO()):
        rows = tape_bench.run(quick or size < 1)
    out = []
    for r in rows:
        for impl in ("adcore.tape", "autograd"):
            if r[impl] is None:
                out.append(skipped("tape", r["benchmark"], impl, "autograd not installed"))
                continue
            ms = r[impl] if r["unit"] == "ms" else None
            text = None if ms is not None else f"{r[impl]:.2f} {r['unit']}"
            note = f"adcore.tape / autograd = {r['ratio']:.2f}" if impl == "autograd" else ""
            out.append(row("tape", r["benchmark"].strip(), impl, ms, text=text, note=note))
    return out


WORKLOADS = {
    "seed": ("seed training: per-sample Adam on a 1-23-1 tanh network", _seed),
    "mlp": ("Flux docs MLP 784-32-10, one gradient", mlp.run),
    "gmm": ("ADBench GMM objective: gradient/objective ratios and checks", gmm.run),
    "kernels": ("kernel set: gradient/primal and adcore/hand-written", _kernels),
    "tape": ("tape engine overhead next to HIPS autograd", _tape),
}
QUICK = ("seed", "mlp", "gmm", "kernels")
