"""Data-parallel gradients and training on Dask distributed, at 1 and 2 workers.

    python -m bench distributed [--quick] [--scheduler ADDRESS]

Two workloads: the gradient of a GMM log-likelihood over 10^6 points (d = 10, K = 25) in 8
shards held by the workers (``adcore.distributed.gradient``), and an epoch of the digits
MLP with batches of 256 split across the workers (``layers.train(..., cluster=client)``).
Each runs in one process (adcore, and the hand-written GMM gradient), then on a local
cluster of one worker and one of two (one thread each), or on the workers of the scheduler
at ``--scheduler``.  The notes give the speed-up over one worker, the time of a call or
step spent outside the workers' gradient code (sending, scheduling, summing) and the bytes
of parameters and gradients sent per call or step.  Results are checked against the
one-process gradient or training run, and between cluster sizes (bit for bit: the parts
are summed in a fixed order).
"""
import copy

import numba
import numpy as np

import adcore
from adcore import Const, Duplicated, Reverse

from . import digits, parallel
from .measure import rel_err
from .registry import workload
from .rows import failed, row, skipped

W = "distributed"
SHARDS = 8
gmm_serial = numba.njit(parallel.gmm_loglik)        # one thread per worker


def _clusters(config):
    """``[(label, client, workers)]``: local clusters of 1 and 2 workers, or the given
    scheduler's; closed by the caller."""
    from distributed import Client, LocalCluster
    if config.scheduler:
        client = Client(config.scheduler)
        n = len(client.scheduler_info(n_workers=-1)["workers"])
        return [(f"{n} workers at {config.scheduler}", client, n, None)]
    out = []
    for n in (1, 2):
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                               dashboard_address=None)
        client = Client(cluster)
        client.wait_for_workers(n)
        out.append((f"{n} worker" + "s" * (n > 1), client, n, cluster))
    return out


def _close(clusters):
    for _, client, _, cluster in clusters:
        client.close()
        if cluster is not None:
            cluster.close()


def _compute_seconds(client, fn, prefix):
    """``(wall seconds of fn(), the busiest worker's seconds in tasks named prefix...)``."""
    import time
    from distributed import get_task_stream
    with get_task_stream(client) as stream:
        t0 = time.perf_counter()
        fn()
        wall = time.perf_counter() - t0
    busy = {}
    for task in stream.data:
        if str(task["key"]).startswith(prefix):
            for s in task["startstops"]:
                if s["action"] == "compute":
                    busy[task["worker"]] = busy.get(task["worker"], 0.0) + s["stop"] - s["start"]
    return wall, max(busy.values(), default=0.0)


def _bytes(arrays):
    return sum(np.asarray(a).nbytes for a in arrays)


def gmm_rows(config, clusters):
    n = int((100_000 if config.quick else 1_000_000) * config.size)
    d, K = 10, 25
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, d))
    params = (rng.standard_normal(K), rng.standard_normal((K, d)), 0.1 * rng.standard_normal((K, d)))
    shards = [np.ascontiguousarray(s) for s in np.array_split(x, SHARDS)]
    case = f"GMM log-likelihood gradient, n={n}, d={d}, K={K}, {SHARDS} shards"

    def one_process():
        return adcore.gradient(Reverse, gmm_serial, *params, Const(x))[:3]

    def hand():
        g = (np.zeros(K), np.zeros((K, d)), np.zeros((K, d)))
        parallel.gmm_gradient(*params, x, *g, np.zeros(K))
        return g

    ref = one_process()
    calls, placed = [], []
    for label, client, workers, _ in clusters:
        futures = client.scatter(shards)                 # sent once, kept across calls
        client.wait_for_workers(workers)
        placed.append(futures)
        calls.append(lambda c=client, f=futures: adcore.distributed.gradient(gmm_serial, c, f, *params))
    times = config.sampler.interleaved([one_process, hand] + calls)
    rows = [row(W, case, "adcore, one process", times[0], vs_ref=1.0, note="reference"),
            row(W, case, "hand-written gradient, one process", times[1],
                vs_ref=times[1].median / times[0].median,
                err=_err(hand(), ref), tol=1e-9)]
    results = []
    for (label, client, workers, _), call, t in zip(clusters, calls, times[2:]):
        got = call()
        results.append(got)
        wall, busy = _compute_seconds(client, call, "shard_gradient")
        sent = _bytes(params) * SHARDS + _bytes(ref) * SHARDS
        speedup = "" if t is times[2] else f"{times[2].median / t.median:.2f}x the 1-worker time; "
        rows.append(row(W, case, f"adcore.distributed, {label}", t, vs_ref=t.median / times[0].median,
                        err=_err(got, ref), tol=1e-9,
                        note=f"{speedup}{max(wall - busy, 0.0) * 1e3:.0f} ms of {wall * 1e3:.0f} "
                             f"outside the gradient code; {sent / 1e3:.0f} kB of parameters and "
                             f"gradients sent per call"))
    if len(results) == 2:
        same = all(np.array_equal(a, b) for a, b in zip(*results))
        rows.append(row(W, case, "1 and 2 workers agree bit for bit",
                        check="ok" if same else "FAIL"))
        rows[-1]["ok"] = same
    for futures in placed:
        for f in futures:
            f.release()
    return rows


def _err(got, ref):
    return max(rel_err(g, r) for g, r in zip(got, ref))


def mlp_rows(config, clusters):
    import layers
    import optim
    xtr, ytr, _, _ = digits.data()
    model = layers.f32(digits.models()["MLP"])
    batch = 256
    reps = 1 if config.quick else 4                      # the training set, 4 times per epoch
    data = [(xtr[k:k + batch], ytr[k:k + batch]) for k in range(0, len(xtr) - batch + 1, batch)] * reps
    case = f"digits MLP epoch, {len(data)} steps of batch {batch}, Adam"

    def trainer(client=None, sent=None):
        def run():
            m = copy.deepcopy(model)
            state = optim.setup(optim.Adam(3e-3), m)
            losses = layers.train(digits.loss, Duplicated(m), sent or data, state, cluster=client)
            return m, losses
        return run

    ref_model, ref_losses = trainer()()
    fns, sent_data = [trainer()], []
    for _, client, _, _ in clusters:
        sent = adcore.distributed.scatter_batches(client, data)
        sent_data.append(sent)
        fns.append(trainer(client, sent))
    times = config.sampler.interleaved(fns, number=1)
    rows = [row(W, case, "adcore, one process (native loop)", times[0], vs_ref=1.0, note="reference")]
    params = layers.destructure(model)[0]
    for (label, client, workers, _), fn, t in zip(clusters, fns[1:], times[1:]):
        wall, busy = _compute_seconds(client, fn, "part_gradient")
        m, losses = fn()
        err = max(rel_err(a, b) for (_, a), (_, b) in
                  zip(adcore.tree.leaves(m), adcore.tree.leaves(ref_model)))
        per_step = (params.nbytes * workers + params.nbytes * workers) / 1e3
        speedup = "" if t is times[1] else f"{times[1].median / t.median:.2f}x the 1-worker time; "
        rows.append(row(W, case, f"layers.train(cluster=), {label}", t,
                        vs_ref=t.median / times[0].median, err=err, tol=1e-4,
                        note=f"{speedup}{max(wall - busy, 0.0) / len(data) * 1e3:.1f} ms per step "
                             f"outside the gradient code; {per_step:.0f} kB sent per step"))
    for sent in sent_data:
        sent.release()
    return rows


@workload(W, "Dask distributed: GMM gradient over shards and digits MLP training, 1 and 2 workers")
def run(config):
    try:
        import adcore.distributed  # noqa: F401
    except ImportError as err:
        return [skipped(W, "", "adcore.distributed", str(err))]
    clusters = _clusters(config)
    rows = []
    try:
        for part in (gmm_rows, mlp_rows):
            try:
                rows += part(config, clusters)
            except Exception as exc:     # a failed part is a failed row
                rows.append(failed(W, part.__name__, part.__name__, exc))
    finally:
        _close(clusters)
    return rows
