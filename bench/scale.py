"""How adcore's gradient grows with the problem (issue 18's ``scale`` workload).

A gradient should cost a constant multiple of its primal at every size and cache memory that
grows like the primal's work, not faster. Three families, each at growing sizes:

- ADBench's GMM at (d, K) = (2, 5), (10, 25) and, in full runs, (32, 50), (64, 100), n = 1000
  points (``bench.gmm``'s kernels and peers, ``bench.gmm_points``' kernels and
  ``bench.gmm_c``'s, written as ADBench's C is), with the peak resident memory of one adcore
  call;
- ADBench's LSTM (``bench.lstm``) at growing sequence lengths c, checked against the tape engine;
- kernels of ``bench.kernels`` at n and 10 n (full runs).

    python -m bench scale [--quick]

On a shared machine the GMM's ratios are best read from ``python -m bench.scale [d,K ...]``
(:func:`interleaved_gmm`): process time, the engines interleaved round by round, medians,
for both layouts of the kernel (``bench.gmm``, ``bench.gmm_points``).
"""
import statistics
import sys
import time

import numpy as np

import adcore
from adcore import Const, Duplicated, Reverse, tape

from . import gmm, gmm_c, gmm_points, kernels, lstm, peers
from .measure import peak_rss, rel_err, reset_peak_rss
from .rows import failed, row, skipped

W = "scale"
GMM_SIZES = ((2, 5), (10, 25), (32, 50), (64, 100))
LSTM_LENGTHS = (64, 256, 1024)


def peak_bytes(fn):
    """Growth of the process's peak resident memory during one call of ``fn`` (Linux), or None."""
    base = reset_peak_rss()
    if base is None:
        return None
    fn()
    return peak_rss() - base


def gmm_rows(d, K, n, sampler):
    """bench.gmm's timed rows at one size (both layouts), the per-point adcore row noting its
    peak memory."""
    inst = gmm.instance(K, n, d)
    rows = [dict(r, case=f"GMM {r['case']}", workload=W)
            for r in gmm.time_rows(inst, sampler, layouts=(gmm_points.Kernels, gmm_c.Kernels))]
    kern = gmm.Kernels(inst)
    peak = peak_bytes(kern.adcore)
    for r in rows:
        if r["impl"] == "adcore gradient" and peak is not None:
            r["note"] = (r["note"] + "; " if r["note"] else "") + f"peak RSS +{peak / 2**20:.0f} MB"
    return rows


class LSTMKernel:
    """adcore's gradient of the LSTM kernel on one instance, buffers allocated once."""

    def __init__(self, inst):
        self.inst = inst
        self.scratch = lstm.scratch(inst)
        self.grads = tuple(np.zeros_like(p) for p in inst.params)
        self.shadows = tuple(np.zeros_like(s) for s in self.scratch)

    def objective(self):
        i = self.inst
        return lstm.objective(*i.params, i.state0, i.seq, *self.scratch)

    def gradient(self):
        for g in self.grads + self.shadows:
            g[...] = 0.0
        i = self.inst
        adcore.autodiff(Reverse, lstm.objective,
                        *(Duplicated(p, g) for p, g in zip(i.params, self.grads)),
                        Const(i.state0), Const(i.seq),
                        *(Duplicated(s, ds) for s, ds in zip(self.scratch, self.shadows)))
        return self.grads


def lstm_rows(c, sampler, per_char_ref):
    """The LSTM at length ``c``: objective, adcore (checked against the tape engine), tape and
    peers; ``per_char_ref`` holds adcore's time per character at the first length."""
    inst = lstm.instance(c)
    case = f"LSTM {inst.label()}"
    kern = LSTMKernel(inst)
    t_obj = sampler.time(kern.objective)
    rows = [row(W, case, "Numba objective", t_obj, note="the primal kernel")]

    def xp_loss(xp, main, extra, state0, seq):
        return lstm.objective_xp(xp, main, extra, state0, seq)
    tape_grad = lambda: tape.gradient(lambda m, e: xp_loss(np, m, e, inst.state0, inst.seq),
                                      *inst.params)
    ref = tape_grad()
    try:
        kern.gradient()
        err = rel_err(kern.grads, ref)
        t = sampler.time(kern.gradient)
        per_char = t.median / (c - 1)
        per_char_ref.setdefault("adcore", per_char)
        rows.append(row(W, case, "adcore gradient", t, grad_obj=t.median / t_obj.median,
                        cached_bytes=adcore.last_cached_bytes(), err=err, tol=1e-10,
                        note=f"vs tape; time per character x{per_char / per_char_ref['adcore']:.2f} "
                             f"the shortest length's; {adcore.last_cached_bytes() / (c - 1):.0f} B "
                             f"cached per character"))
    except Exception as exc:
        rows.append(failed(W, case, "adcore gradient", exc))
    t_tape = sampler.time(tape_grad)
    rows.append(row(W, case, "adcore.tape (numpy)", t_tape, grad_obj=t_tape.median / t_obj.median))
    for name, eng in peers.engines(xp_loss, inst.params, (inst.state0, inst.seq)).items():
        if isinstance(eng, str):
            rows.append(skipped(W, case, name, eng))
            continue
        try:
            _, g = eng[1]()
            t_g = sampler.time(eng[1])
            rows.append(row(W, case, name, t_g, grad_obj=t_g.median / t_obj.median,
                            err=rel_err(g, ref), tol=1e-9, note="vs tape"))
        except Exception as exc:
            rows.append(failed(W, case, name, exc))
    return rows


def kernel_rows(sampler):
    """Kernels of bench.kernels at n and 10 n: adcore's time and cached bytes."""
    rows = []
    for name, size, primal, grad, *_ in kernels.workloads(quick=True) + kernels.workloads(quick=False):
        if name not in ("sum(sin(x)*x*x)", "in-place stencil", "logsumexp"):
            continue
        case = f"{name}, {size}"
        grad()
        t_p, t_g = sampler.time(primal), sampler.time(grad)
        rows.append(row(W, case, "adcore gradient", t_g, grad_obj=t_g.median / t_p.median,
                        cached_bytes=adcore.last_cached_bytes()))
    return rows


def run(config):
    """GMM sizes and LSTM lengths (two of each in quick runs); in full runs also the kernels
    at two n."""
    n = max(2, int(1000 * config.size))
    rows = []
    for d, K in GMM_SIZES[:2] if config.quick else GMM_SIZES:
        rows += gmm_rows(d, K, n, config.sampler)
    per_char_ref = {}
    for c in LSTM_LENGTHS[:2] if config.quick else LSTM_LENGTHS:
        rows += lstm_rows(max(3, int(c * min(config.size, 1.0))), config.sampler, per_char_ref)
    return rows if config.quick else rows + kernel_rows(config.sampler)


def _cpu_time(fn, budget):
    """Process CPU seconds per call of ``fn``, calling it until ``budget`` seconds are spent."""
    calls, start = 0, time.process_time()
    while True:
        fn()
        calls += 1
        spent = time.process_time() - start
        if spent > budget:
            return spent / calls


def interleaved_gmm(sizes=GMM_SIZES, n=1000, rounds=5, budget=0.3, out=print):
    """The GMM at each (d, K): one round times, in both layouts (``bench.gmm``'s per point and
    component, ``bench.gmm_points``' across points), adcore's gradient, the objective and the
    hand-written gradient, then JAX's and PyTorch's gradient and objective, one after the
    other (process time); printed are the medians over ``rounds``, as ratios, with adcore's
    cached bytes and its error against the hand-written gradient, one line per layout. A
    peer's objective is given over the Numba objective's: where it is below 1 the peer's
    primal is the faster one."""
    for d, K in sizes:
        inst = gmm.instance(K, n, d)
        layouts = {"": gmm.Kernels(inst), "points ": gmm_points.Kernels(inst),
                   "ADBench-C-style ": gmm_c.Kernels(inst)}
        fns, checks = {}, {}
        for tag, kern in layouts.items():
            _, hand = kern.hand()
            hand = [g.copy() for g in hand]
            _, ad = kern.adcore()
            checks[tag] = rel_err(ad, hand), adcore.last_cached_bytes()
            fns.update({tag + "adcore": kern.adcore, tag + "objective": kern.objective,
                        tag + "hand": kern.hand})
        engines = {name: eng for name, eng in gmm.engines(inst).items()
                   if name.startswith(("JAX", "PyTorch")) and not isinstance(eng, str)}
        peers_ = {name: eng[1] for name, eng in engines.items()}
        objectives = {name + " objective": eng[0] for name, eng in engines.items()}
        fns.update(peers_)
        fns.update(objectives)
        for fn in [*peers_.values(), *objectives.values()]:
            fn()
        times = {name: [] for name in fns}
        for _ in range(rounds):
            for name, fn in fns.items():
                times[name].append(_cpu_time(fn, budget))
        med = {name: statistics.median(t) for name, t in times.items()}
        for tag in layouts:
            err, cached = checks[tag]
            hand, obj, ad = (med[tag + k] for k in ("hand", "objective", "adcore"))
            peer_text = "".join(f", {name} x ref {med[name] / hand:.2f} "
                                f"(adcore / it {ad / med[name]:.2f}, its objective / "
                                f"Numba's {med[name + ' objective'] / obj:.2f})"
                                for name in peers_)
            label = f"d={d} K={K} n={n}" + (f" {tag.strip()} layout" if tag else "")
            out(f"{label}: hand-written {hand * 1e3:.3g} ms, adcore x ref {ad / hand:.2f}, "
                f"grad/objective {ad / obj:.2f}, cached {cached / 1e6:.2f} MB{peer_text}; "
                f"error {err:.1e}")


if __name__ == "__main__":
    interleaved_gmm([tuple(int(v) for v in a.split(",")) for a in sys.argv[1:]] or GMM_SIZES)
