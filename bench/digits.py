"""``python -m bench digits``: a small CNN and an MLP trained on scikit-learn's bundled 8x8
handwritten digits (``sklearn.datasets.load_digits``, no download), with ``Duplicated`` (the
LLVM engine), with the tape engine and, when installed, with PyTorch (the same architecture,
weights, Adam and batches; ``bench.peers``), from the same initial weights on the same batches.

Per model and engine: the test accuracy and training loss after each epoch, and the time of
each epoch (the first one, which compiles, is reported apart). A held-out fifth of the data
is the test split. Checked: the CNN's final test accuracy against 97 % (full runs: 15
epochs), and the engines' final accuracies against each other's. With ``--output DIR`` the curves go to
``DIR/digits_curves.png``.
"""
import time

import numpy as np

from layers import (Chain, Conv, Dense, MaxPool, flatten, logitcrossentropy, onecold, relu,
                    train)
from optim import Adam, setup

from . import peers
from .row_threads import at_threads, thread_rows
from .rows import row, skipped
from .timing import Timing

W = "digits"
TARGET = 0.97
MISSING = ('scikit-learn is not installed: pip install -e ".[digits]" (it ships the digits '
           'data set)')


def data(seed=0):
    """``(xtrain, ytrain, xtest, ytest)``: images ``(n, 1, 8, 8)`` in [0, 1] (float32), one-hot
    training labels, integer test labels; a fifth held out, split with a fixed seed."""
    from sklearn.datasets import load_digits
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    y = digits.target
    order = np.random.default_rng(seed).permutation(len(y))
    ntest = len(y) // 5
    test, tr = order[:ntest], order[ntest:]
    return x[tr], np.eye(10, dtype=np.float32)[y[tr]], x[test], y[test]


def models():
    """The two architectures, built with fixed seeds."""
    cnn = Chain(Conv((3, 3), 1, 8, relu, pad=1, rng=1), MaxPool((2, 2)),
                Conv((3, 3), 8, 16, relu, pad=1, rng=2), MaxPool((2, 2)),
                flatten, Dense(16 * 2 * 2, 10, rng=3))
    mlp = Chain(flatten, Dense(64, 64, relu, rng=4), Dense(64, 10, rng=5))
    return {"CNN": cnn, "MLP": mlp}


def loss(m, x, y):
    return logitcrossentropy(m(x), y)


def epoch_batches(xtr, ytr, batch, rng):
    """One epoch of shuffled full batches (the remainder is dropped, so every step has the
    same shapes and ``train`` runs one native loop with ``Duplicated``)."""
    order = rng.permutation(len(xtr))
    n = len(xtr) // batch
    return [(xtr[order[k * batch:(k + 1) * batch]], ytr[order[k * batch:(k + 1) * batch]])
            for k in range(n)]


def accuracy(model, x, labels):
    return float(np.mean(onecold(model(x)) == labels))


def fit(model, engine, split, epochs, batch=32, eta=3e-3, seed=0, progress=None):
    """Trains ``model`` in place; returns per-epoch ``seconds``, ``loss`` (mean over the
    epoch's steps) and ``accuracy`` (test split)."""
    from adcore import Duplicated
    xtr, ytr, xte, yte = split
    target = Duplicated(model) if engine == "Duplicated" else model
    state = setup(Adam(eta), model)
    rng = np.random.default_rng(seed)
    hist = {"seconds": [], "loss": [], "accuracy": []}
    for _ in range(epochs):
        items = epoch_batches(xtr, ytr, batch, rng)
        t0 = time.perf_counter()
        losses = train(loss, target, items, state)
        hist["seconds"].append(time.perf_counter() - t0)
        hist["loss"].append(float(np.mean(losses)))
        hist["accuracy"].append(accuracy(model, xte, yte))
        if progress is not None:
            progress.update(1)
            progress.set_postfix(acc=f"{hist['accuracy'][-1]:.3f}", refresh=False)
    return hist


def torch_model(torch, model):
    """The PyTorch twin of a ``layers`` Chain of Conv (symmetric padding), MaxPool, flatten
    and Dense layers with relu or identity activations, holding copies of its weights."""
    from layers import activations
    nn, out = torch.nn, []
    acts = {activations.relu: nn.ReLU, activations.identity: None}
    for layer in model.layers:
        kind = type(layer).__name__
        if kind == "Conv":
            torch_layer = nn.Conv2d(layer.weight.shape[1], layer.weight.shape[0], layer.window,
                                    stride=layer.stride, padding=tuple(lo for lo, _ in layer.pad),
                                    dilation=layer.dilation)
            act = layer.act
        elif kind == "Dense":
            torch_layer, act = nn.Linear(layer.weight.shape[1], layer.weight.shape[0]), layer.activation
        elif kind == "MaxPool":
            out.append(nn.MaxPool2d(layer.window, layer.stride))
            continue
        else:                                     # flatten
            out.append(nn.Flatten())
            continue
        with torch.no_grad():
            torch_layer.weight.copy_(torch.from_numpy(layer.weight))
            torch_layer.bias.copy_(torch.from_numpy(layer.bias))
        out.append(torch_layer)
        if acts[act] is not None:
            out.append(acts[act]())
    return nn.Sequential(*out)


def fit_torch(torch, model, split, epochs, batch=32, eta=3e-3, seed=0, progress=None):
    """``fit`` with PyTorch: the twin of ``model`` trained by ``torch.optim.Adam`` on the
    same batches (one thread, as everything in the bench)."""
    xtr, ytr, xte, yte = split
    net = torch_model(torch, model)
    opt = torch.optim.Adam(net.parameters(), lr=eta, betas=(0.9, 0.999), eps=1e-8)
    rng = np.random.default_rng(seed)
    hist = {"seconds": [], "loss": [], "accuracy": []}
    for _ in range(epochs):
        items = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in epoch_batches(xtr, ytr, batch, rng)]
        t0 = time.perf_counter()
        losses = []
        for x, y in items:
            opt.zero_grad()
            value = torch.nn.functional.cross_entropy(net(x), y)
            value.backward()
            opt.step()
            losses.append(value.item())
        hist["seconds"].append(time.perf_counter() - t0)
        hist["loss"].append(float(np.mean(losses)))
        with torch.no_grad():
            hist["accuracy"].append(float(np.mean(net(torch.from_numpy(xte)).argmax(1).numpy() == yte)))
        if progress is not None:
            progress.update(1)
    return hist


def plot(histories, path):
    """Loss and test accuracy per epoch of every run into ``path``; ``None``, or a note
    when matplotlib is missing."""
    from .charts import MISSING as NO_PLOT, _pyplot
    plt = _pyplot()
    if plt is None:
        return NO_PLOT
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for name, h in histories.items():
        epochs = range(1, len(h["loss"]) + 1)
        a.plot(epochs, h["loss"], marker=".", label=name)
        b.plot(epochs, h["accuracy"], marker=".", label=name)
    a.set(xlabel="epoch", ylabel="training loss (mean over the epoch)", yscale="log")
    b.set(xlabel="epoch", ylabel="test accuracy")
    b.axhline(TARGET, color="gray", linestyle=":", linewidth=1)
    for ax in (a, b):
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle("digits (sklearn load_digits): layers' engines")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


def epoch_thread_rows(config, split, batch=32):
    """One epoch of the CNN with ``Duplicated`` at 1 thread (``train``'s native loop) and at
    every core (each batch's rows split across the threads), side by side; the threaded
    gradient of a batch checked against the serial one."""
    import numba
    from adcore import Duplicated
    from adcore.tree import leaves
    from layers import f32, gradient, threads
    model = f32(models()["CNN"])
    dup, state = Duplicated(model), setup(Adam(3e-3), model)
    items = epoch_batches(split[0], split[1], batch, np.random.default_rng(0))
    x, y = items[0]

    def flat_gradient(n):
        g = at_threads(n, lambda: gradient(loss, dup, x, y))()[0]
        return np.concatenate([np.ravel(a) for _, a in leaves(g)]).astype(np.float64)
    at_threads(numba.config.NUMBA_NUM_THREADS, lambda: threads(loss, dup, x, y))()   # stages the split
    serial, threaded = flat_gradient(1), flat_gradient(numba.config.NUMBA_NUM_THREADS)
    check = (float(np.abs(threaded - serial).max() / np.abs(serial).max()), 1e-5)
    case = f"CNN, one epoch of {len(items)} batches of {batch}, time per epoch"
    return thread_rows(W, case, "layers, Duplicated: train", lambda: train(loss, dup, items, state),
                       lambda: threads(loss, dup, x, y), config.sampler, number=1, check=check)


def run(config):
    """Each model trained by each engine for the same epochs from the same weights."""
    try:
        split = data()
    except ImportError:
        return [skipped(W, "", "digits", MISSING)]
    from tqdm.auto import tqdm
    from layers import f32
    epochs = max(2, int((4 if config.quick else 15) * config.size))
    torch = peers.get("torch")
    engines = ("Duplicated", "tape") + (("PyTorch",) if torch is not None else ())
    rows, histories = [], {}
    with tqdm(total=2 * len(engines) * epochs, desc="digits", leave=False) as bar:
        for name, model in models().items():
            case = f"{name}, {len(split[0])} train / {len(split[2])} test images, batch 32, " \
                   f"time per epoch"
            final = {}
            for engine in engines:
                h = fit_torch(torch, model, split, epochs, progress=bar) if engine == "PyTorch" \
                    else fit(f32(model), engine, split, epochs, progress=bar)
                histories[f"{name}, {engine}"] = h
                final[engine] = acc = h["accuracy"][-1]
                curve = " ".join(f"{a:.3f}" for a in h["accuracy"])
                target = TARGET if name == "CNN" and not config.quick else None   # 15 epochs
                impl = engine if engine == "PyTorch" else f"layers, {engine}"
                rows.append(row(W, case, impl, Timing(tuple(h["seconds"][1:])),
                                first_call_s=h["seconds"][0],
                                err=None if target is None else max(0.0, target - acc),
                                tol=None if target is None else 0.0,
                                check=f"test accuracy {acc:.1%}" +
                                ("" if target is None else f" (target {target:.0%})"),
                                note=f"accuracy per epoch: {curve}"))
            gap = max(final.values()) - min(final.values())
            rows.append(row(W, f"{name}: engines agree", " vs ".join(final), err=gap, tol=0.01,
                            note="final test accuracies differ by at most 1 point"))
    rows += epoch_thread_rows(config, split)
    if torch is None:
        rows.append(skipped(W, "", "PyTorch", peers.why("torch")))
    if config.output:
        from pathlib import Path
        folder = Path(config.output)
        folder.mkdir(parents=True, exist_ok=True)
        note = plot(histories, folder / "digits_curves.png")
        if note:
            rows.append(skipped(W, "", "curves", note))
    return rows
