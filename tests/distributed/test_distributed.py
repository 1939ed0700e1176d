"""adcore.distributed on a Dask ``LocalCluster`` (two worker processes, one thread each):
gradients of sums over shards against one process and finite differences, data-parallel
training against training in one process, workers killed mid-step, and the errors.

One cluster serves the module; it tolerates one death per task (``allowed-failures``) so
that a task killed twice gives up quickly.  Workers are killed by a worker plugin that
ends its process when one of adcore's tasks starts, once per armed flag file.
"""
import copy
import math
import os
import threading

import numba
import numpy as np
import pytest

dask = pytest.importorskip("dask")          # an extra of the tests: .ci/run installs it
from distributed import Client, LocalCluster, WorkerPlugin  # noqa: E402

import adcore  # noqa: E402
import adcore.distributed  # noqa: E402
import layers  # noqa: E402
import optim  # noqa: E402
from adcore import ActivityError, Const, Duplicated, Reverse  # noqa: E402
from adcore.distributed import DistributedError, WorkerError  # noqa: E402
from fdcheck import fd_gradient  # noqa: E402
from layers import BatchNorm, Chain, Dense, f64, mse, tanh  # noqa: E402


@numba.njit
def gmm_data_term(alphas, means, logq, x):
    """sum_i logsumexp_k(alpha_k + sum_j logq_kj - |exp(logq_k) * (x_i - mu_k)|^2 / 2)."""
    n, d = x.shape
    K = alphas.shape[0]
    terms = np.empty(K)
    total = 0.0
    for i in range(n):
        best = -1e300
        for k in range(K):
            s = alphas[k]
            for j in range(d):
                z = math.exp(logq[k, j]) * (x[i, j] - means[k, j])
                s += logq[k, j] - 0.5 * z * z
            terms[k] = s
            best = max(best, s)
        acc = 0.0
        for k in range(K):
            acc += math.exp(terms[k] - best)
        total += best + math.log(acc)
    return total


@numba.njit
def running_sum(w, x):
    """A kernel that updates memory in place: y = x; y_i += w * y_{i-1} row by row, then
    sum(y^2)."""
    y = x.copy()
    for i in range(1, y.shape[0]):
        for j in range(y.shape[1]):
            y[i, j] += w[j] * y[i - 1, j]
    return np.sum(y * y)


class KillOnTask(WorkerPlugin):
    """Ends the worker's process when a task whose key starts with ``prefix`` starts, once
    ``skip`` such tasks have started on any worker (counted in the file ``flag.count``) and
    while the ``flag`` file exists; the first kill removes the flag unless ``keep``."""

    def __init__(self, flag, prefix, skip=0, keep=False):
        self.flag, self.prefix, self.skip, self.keep = flag, prefix, skip, keep

    def transition(self, key, start, finish, **kwargs):
        if finish != "executing" or not str(key).startswith(self.prefix):
            return
        with open(self.flag + ".count", "ab") as count:   # appends are atomic
            count.write(b"x")
        if os.path.getsize(self.flag + ".count") <= self.skip or not os.path.exists(self.flag):
            return
        if not self.keep:
            try:
                os.remove(self.flag)
            except FileNotFoundError:       # the other worker took it
                return
        os._exit(1)


@pytest.fixture(scope="module")
def client():
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                               dashboard_address=None)
        with Client(cluster) as c:
            c.wait_for_workers(2)
            yield c
        try:
            cluster.close()
        except KeyError:     # Dask's watcher of worker status after restarts; all is closed
            pass


@pytest.fixture
def armed(client, tmp_path):
    """``arm(prefix, skip=0, keep=False)``: kill a worker at the next matching task."""
    names = []

    def arm(prefix, skip=0, keep=False):
        flag = tmp_path / f"kill-{len(names)}"
        flag.write_text("")
        name = f"kill-{prefix}-{len(names)}-{os.getpid()}"
        client.register_plugin(KillOnTask(str(flag), prefix, skip, keep), name=name)
        names.append((name, flag))
        return flag
    yield arm
    for name, flag in names:
        flag.unlink(missing_ok=True)
        client.unregister_worker_plugin(name)
    client.wait_for_workers(2, timeout=60)


def gmm_problem(n=900, d=3, K=4, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(K), rng.standard_normal((K, d)), 0.3 * rng.standard_normal((K, d)),
            rng.standard_normal((n, d)))


def shards_of(x, count):
    return [np.ascontiguousarray(p) for p in np.array_split(x, count)]


# -- the gradient of a sum over shards ------------------------------------------------------
def test_gmm_gradient_equals_one_process_and_finite_differences(client):
    alphas, means, logq, x = gmm_problem()
    got = adcore.distributed.gradient(gmm_data_term, client, shards_of(x, 5), alphas, means, logq)
    one = adcore.gradient(Reverse, gmm_data_term, alphas, means, logq, Const(x))[:3]
    for g, o in zip(got, one):
        np.testing.assert_allclose(g, o, rtol=1e-11, atol=1e-11)
    fd = fd_gradient(lambda a, m, q: gmm_data_term(a, m, q, x), [alphas, means, logq], {})
    for g, f in zip(got, fd):
        np.testing.assert_allclose(g, f, rtol=1e-6, atol=1e-6)


def test_same_result_from_run_to_run_and_any_placement(client):
    """The parts are summed in a fixed tree: bit for bit the same whichever worker holds
    which shard, from numpy arrays, futures or a dask array."""
    import dask.array as da
    alphas, means, logq, x = gmm_problem(seed=1)
    shards = shards_of(x, 4)
    first = adcore.distributed.gradient(gmm_data_term, client, shards, alphas, means, logq)
    workers = sorted(client.scheduler_info()["workers"])
    placed = [client.scatter(s, workers=[workers[k % 2 == 0]]) for k, s in enumerate(shards)]
    as_dask = da.from_array(x, chunks=([len(s) for s in shards], 3))
    for shards_again in (shards, placed, as_dask):
        again = adcore.distributed.gradient(gmm_data_term, client, shards_again, alphas, means, logq)
        for a, b in zip(first, again):
            assert np.array_equal(a, b)


def test_kernel_updating_memory_in_place(client):
    rng = np.random.default_rng(2)
    w, x = 0.5 * rng.standard_normal(3), rng.standard_normal((60, 3))
    shards = shards_of(x, 3)
    (got,) = adcore.distributed.gradient(running_sum, client, shards, w)
    one = sum(adcore.gradient(Reverse, running_sum, w, Const(s))[0] for s in shards)
    np.testing.assert_allclose(got, one, rtol=1e-12)
    (fd,) = fd_gradient(lambda v: sum(running_sum(v, s) for s in shards), [w], {})
    np.testing.assert_allclose(got, fd, rtol=1e-6)


def test_const_parameters_and_tuple_shards(client):
    alphas, means, logq, x = gmm_problem(n=60, seed=3)
    shards = [(s,) for s in shards_of(x, 2)]
    ga, gm, gq = adcore.distributed.gradient(gmm_data_term, client, shards, alphas, Const(means), logq)
    assert gm is None
    one = adcore.gradient(Reverse, gmm_data_term, alphas, Const(means), logq, Const(x))
    np.testing.assert_allclose(ga, one[0], rtol=1e-12)
    np.testing.assert_allclose(gq, one[2], rtol=1e-12)


def test_refusals_before_any_work(client):
    alphas, means, logq, x = gmm_problem(n=20)
    with pytest.raises(ActivityError, match="parameter 1.*not Duplicated"):
        adcore.distributed.gradient(gmm_data_term, client, [x], alphas,
                                    Duplicated(means, np.zeros_like(means)), logq)
    with pytest.raises(TypeError, match="distributed.Client"):
        adcore.distributed.gradient(gmm_data_term, "tcp://nowhere", [x], alphas, means, logq)
    with pytest.raises(TypeError, match="non-empty list"):
        adcore.distributed.gradient(gmm_data_term, client, [], alphas, means, logq)
    lock = threading.Lock()

    def locked(w, x):
        with lock:
            return float(np.sum(w * x))
    with pytest.raises(DistributedError, match="the kernel .*locked.* cannot be sent to the "
                                               "workers.*lock"):
        adcore.distributed.gradient(locked, client, [x], alphas)


def test_a_kernel_a_worker_cannot_compile_names_the_worker(client):
    def bad(w, x):
        return np.sum(w * x) + len(object.__subclasses__())   # Numba cannot type this
    with pytest.raises(WorkerError, match=r"worker tcp://.*shard 0.*CompileError") as err:
        adcore.distributed.gradient(bad, client, [np.ones(3)], np.ones(3))
    assert err.value.worker in client.scheduler_info()["workers"]


def test_a_worker_with_another_version_is_named(client):
    worker = sorted(client.scheduler_info()["workers"])[1]

    def set_version(v):
        adcore.__version__ = v
    client.run(set_version, "0.0.0-other", workers=[worker])
    alphas, means, logq, x = gmm_problem(n=40)
    try:
        with pytest.raises(WorkerError, match=rf"worker {worker}: runs adcore 0.0.0-other "
                                              rf"\(the client has {adcore.__version__}\)"):
            adcore.distributed.gradient(gmm_data_term, client, shards_of(x, 2), alphas, means, logq)
        model, data = mlp_problem()
        before = copy.deepcopy(model)
        state = optim.setup(optim.Adam(0.01), model)
        with pytest.raises(WorkerError, match=worker):
            layers.train(mlp_loss, Duplicated(model), data, state, cluster=client)
        assert_same_model(model, before, exact=True)
    finally:
        client.run(set_version, adcore.__version__, workers=[worker])


def test_a_worker_killed_mid_call_loses_nothing(client, armed):
    alphas, means, logq, x = gmm_problem(seed=4)
    shards = shards_of(x, 4)
    clean = adcore.distributed.gradient(gmm_data_term, client, shards, alphas, means, logq)
    flag = armed("shard_gradient", skip=1)
    again = adcore.distributed.gradient(gmm_data_term, client, shards, alphas, means, logq)
    assert not flag.exists(), "no worker was killed"
    for a, b in zip(clean, again):
        assert np.array_equal(a, b)


# -- data-parallel training -------------------------------------------------------------------
def mlp_problem(seed=0, batches=4, rows=21, dtype=np.float64):
    rng = np.random.default_rng(seed)
    model = Chain(Dense(4, 16, tanh, rng=seed), Dense(16, 2, rng=seed + 1))
    model = f64(model) if dtype == np.float64 else model
    data = [(rng.standard_normal((rows, 4)).astype(dtype), rng.standard_normal((rows, 2)).astype(dtype))
            for _ in range(batches)]
    return model, data


def mlp_loss(m, x, y):
    return mse(m(x), y)


def sum_loss(m, x, y):
    return np.sum((m(x) - y) ** 2)


def squared_loss(m, x, y):          # (mean)^2: neither a sum nor a mean over rows
    return mse(m(x), y) ** 2


def arrays_of(tree):
    """The float arrays of a model or an optimiser state, in order."""
    if isinstance(tree, optim.state.Leaf):
        return arrays_of(tree.state)
    if isinstance(tree, np.ndarray):
        return [tree]
    return [a for _, c in adcore.tree.children(tree) for a in arrays_of(c)]


def assert_same_model(a, b, exact=False, rtol=1e-10):
    xs, ys = arrays_of(a), arrays_of(b)
    assert len(xs) == len(ys) > 0
    for x, y in zip(xs, ys):
        if exact:
            assert np.array_equal(x, y)
        else:
            np.testing.assert_allclose(x, y, rtol=rtol, atol=rtol)


def train_both(client, model, data, loss, rule, epochs=1, **kw):
    one, many = copy.deepcopy(model), copy.deepcopy(model)
    s1, s2 = optim.setup(rule, one), optim.setup(rule, many)
    l1 = layers.train(loss, Duplicated(one), data, s1, epochs=epochs)
    l2 = layers.train(loss, Duplicated(many), data, s2, epochs=epochs, cluster=client, **kw)
    return (one, s1, l1), (many, s2, l2)


@pytest.mark.parametrize("loss", [mlp_loss, sum_loss], ids=["mean", "sum"])
def test_training_equals_one_process(client, loss):
    model, data = mlp_problem()
    (one, s1, l1), (many, s2, l2) = train_both(client, model, data, loss, optim.Adam(0.01), epochs=2)
    np.testing.assert_allclose(l2, l1, rtol=1e-12)
    assert_same_model(many, one)
    assert len(l2) == 8 and l2[-1] < l2[0]


def test_float32_training_and_uneven_batches(client):
    model, data = mlp_problem(seed=1, rows=7, dtype=np.float32)
    data.append((data[0][0][:3], data[0][1][:3]))       # a smaller last batch
    (one, _, l1), (many, _, l2) = train_both(client, model, data, mlp_loss, optim.Descent(0.1))
    np.testing.assert_allclose(l2, l1, rtol=1e-5)
    assert_same_model(many, one, rtol=1e-5)


def test_scattered_batches_stay_for_several_calls(client):
    model, data = mlp_problem(seed=2)
    once, twice = copy.deepcopy(model), copy.deepcopy(model)
    s1, s2 = optim.setup(optim.Momentum(0.05), once), optim.setup(optim.Momentum(0.05), twice)
    l1 = layers.train(mlp_loss, Duplicated(once), data, s1, epochs=2, cluster=client)
    sent = adcore.distributed.scatter_batches(client, data)
    try:
        l2 = [layers.train(mlp_loss, Duplicated(twice), sent, s2, cluster=client) for _ in range(2)]
    finally:
        sent.release()
    assert l1.dtype == np.float64 and np.array_equal(l1, np.concatenate(l2))
    assert_same_model(once, twice, exact=True)


def test_digits_cnn_training_equals_one_process(client):
    from bench import digits
    xtr, ytr, _, _ = digits.data()
    model = digits.models()["CNN"]
    data = [(xtr[k:k + 16], ytr[k:k + 16]) for k in range(0, 48, 16)]
    (one, _, l1), (many, _, l2) = train_both(client, model, data, digits.loss, optim.Adam(3e-3))
    np.testing.assert_allclose(l2, l1, rtol=1e-5)
    assert_same_model(many, one, rtol=1e-5)


def test_a_loss_that_is_not_a_sum_over_rows_is_refused(client):
    model, data = mlp_problem(seed=3)
    before = copy.deepcopy(model)
    state = optim.setup(optim.Adam(0.01), model)
    with pytest.raises(DistributedError, match="squared_loss.* neither a sum nor a mean over the "
                                               "rows of batch 0"):
        layers.train(squared_loss, Duplicated(model), data, state, cluster=client)
    assert_same_model(model, before, exact=True)


def test_layers_with_per_batch_state_are_refused(client):
    model = Chain(Dense(4, 3), BatchNorm(3), Dense(3, 1))
    _, data = mlp_problem()
    with pytest.raises(DistributedError, match="BatchNorm at layers.1 of the model keeps state"):
        layers.train(mlp_loss, Duplicated(model), data, optim.setup(optim.Adam(), model),
                     cluster=client)


def test_a_loss_that_cannot_be_sent_is_named(client):
    model, data = mlp_problem()
    lock = threading.Lock()

    def locked_loss(m, x, y):
        with lock:
            return mse(m(x), y)
    with pytest.raises(DistributedError, match="the loss 'test_a_loss.*locked_loss' cannot be sent"):
        layers.train(locked_loss, Duplicated(model), data, optim.setup(optim.Adam(), model),
                     cluster=client)


def test_a_worker_killed_mid_training_loses_nothing(client, armed):
    model, data = mlp_problem(seed=5, batches=5)
    (_, _, l1), (clean, _, _) = train_both(client, model, data, mlp_loss, optim.Adam(0.01))
    flag = armed("part_gradient", skip=5)       # the third step (the first has 3 tasks)
    faulted = copy.deepcopy(model)
    l2 = layers.train(mlp_loss, Duplicated(faulted), data, optim.setup(optim.Adam(0.01), faulted),
                      cluster=client)
    assert not flag.exists(), "no worker was killed"
    np.testing.assert_allclose(l2, l1, rtol=1e-12)
    assert_same_model(faulted, clean, exact=True)


def test_a_cluster_that_cannot_finish_leaves_the_last_completed_step(client, armed):
    model, data = mlp_problem(seed=6, batches=3)
    done = copy.deepcopy(model)
    s_done = optim.setup(optim.Adam(0.01), done)
    layers.train(mlp_loss, Duplicated(done), data[:2], s_done)          # two steps in one process
    failing = copy.deepcopy(model)
    state = optim.setup(optim.Adam(0.01), failing)
    armed("part_gradient", skip=5, keep=True)   # from the third step on, every part kills
    with pytest.raises(DistributedError, match="training step 2 .*cannot finish"):
        layers.train(mlp_loss, Duplicated(failing), data, state, cluster=client)
    assert_same_model(failing, done)
    assert_same_model(state, s_done)            # the optimiser's moments and step counts


# -- the README's example, as the first call of a fresh process ------------------------------
README_CHECKS = """
    mu, s = 0.5, 1.5
    z = (x - mu) / s
    np.testing.assert_allclose(dmu, np.sum(-z / s), rtol=1e-10)
    np.testing.assert_allclose(ds, np.sum(-z * z / s + 1 / s), rtol=1e-10)
    assert len(losses) == 20 and all(np.isfinite(losses)) and losses[-1] < losses[0]
    print("checked")
"""


def test_readme_example_in_a_fresh_process(tmp_path):
    import pathlib
    import re
    import subprocess
    import sys
    root = pathlib.Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S)
                 if "adcore.distributed.gradient(nll" in b)
    script = tmp_path / "example.py"
    script.write_text(block + README_CHECKS)
    env = dict(os.environ, PYTHONPATH=str(root), ADCORE_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "checked" in proc.stdout, proc.stderr[-3000:]
