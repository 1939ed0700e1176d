"""The workloads of ``python -m bench``: each runs as ``fn(quick, size)`` and returns table rows
(``measure.row``). The other engineers' benchmark modules are adapted to those rows here."""
import contextlib
import importlib
import io

import numpy as np

from . import gmm, mlp, seed_peers
from .measure import failed, first_call, median_seconds, row, skipped


def _seed(quick, size):
    """bench/seed.py's rows (the engines of layers and a hand-written Numba loop), then the
    peers trained for the same epochs from the same initial weights, checked against the
    reference's final loss (seed.py's hand-written loop; the tape engine while seed.py is
    missing)."""
    epochs = max(1, int((100 if quick else 1000) * size))
    try:
        seed = importlib.import_module("bench.seed")
    except ImportError:
        rows = [skipped("seed", "", "bench/seed.py", "not written yet: layers' engines not run")]
        ref_loss, ref_ms = _tape_seed(epochs, rows)
        return rows + seed_peer_rows(epochs, ref_loss, ref_ms)
    rows, ref_loss, ref_ms, epochs = _adapt_seed(seed.run(quick))
    return rows + seed_peer_rows(epochs, ref_loss, ref_ms)


def _pick(r, *keys):
    return next((r[k] for k in keys if r.get(k) is not None), None)


def _adapt_seed(seed_rows):
    """``(rows, reference final loss, reference ms, epochs)`` from bench/seed.py's rows: each
    names its implementation, its time and its final loss; the hand-written one is the
    reference."""
    rows = []
    ref = next((r for r in seed_rows if "hand" in str(_pick(r, "impl", "engine", "name"))), seed_rows[0])
    ref_ms = _pick(ref, "ms") or 1e3 * _pick(ref, "seconds", "s", "time_s")
    ref_loss = _pick(ref, "final_loss", "loss")
    epochs = int(_pick(ref, "epochs") or 1000)
    for r in seed_rows:
        ms = _pick(r, "ms") or 1e3 * _pick(r, "seconds", "s", "time_s")
        loss = _pick(r, "final_loss", "loss")
        err = None if loss is None or ref_loss is None else abs(loss - ref_loss) / abs(ref_loss)
        rows.append(row("seed", f"{epochs} epochs x 41 samples", str(_pick(r, "impl", "engine", "name")),
                        ms, vs_ref=ms / ref_ms, first_s=_pick(r, "first_call_s", "compile_s"),
                        err=None if r is ref else err, tol=1e-3,
                        note="reference" if r is ref else ("" if loss is None else f"final loss {loss:.6f}")))
    return rows, ref_loss, ref_ms, epochs


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
    rows.append(row("seed", f"{epochs} epochs x 41 samples", "layers.train, tape engine", t * 1e3,
                    check=f"final loss {final:.6f}", note="reference"))
    return final, t * 1e3


def seed_peer_rows(epochs, ref_loss, ref_ms):
    """The peers' training runs: time and final loss against ``ref_loss``."""
    model, (xs, ys) = _seed_model()
    init = (model[0].weight, model[0].bias, model[1].weight)
    case = f"{epochs} epochs x 41 samples"
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
        out.append(row("seed", case, name, t * 1e3, vs_ref=t * 1e3 / ref_ms,
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
