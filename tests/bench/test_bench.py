"""Smoke test of the benchmark suite: the quick run on tiny sizes, its table, and that every
implementation's answer agrees with the reference."""
import numpy as np
import pytest

from bench import gmm, kernels, lstm, mlp, peers, registry, report, scale, seed_peers, suite
from bench.__main__ import run
from bench.rows import failures
from bench.timing import Sampler, default_sampler

registry.load()
QUICK = registry.quick_names()
TINY = registry.Config(quick=True, size=0.02, sampler=default_sampler(quick=True))


@pytest.fixture(scope="module")
def quick_rows():
    return run(QUICK, TINY, show_progress=False)


def test_quick_suite_rows(quick_rows):
    rows, workloads = quick_rows
    assert QUICK == ("seed", "mlp", "gmm", "kernels")
    assert [w["name"] for w in workloads] == list(QUICK)
    assert all(w["rss_peak_bytes"] > 0 for w in workloads)
    timed = [r for r in rows if r["stats"] and r["workload"] in ("mlp", "gmm", "kernels")]
    assert timed and all(len(r["samples"]) == r["stats"]["n"] == TINY.sampler.repeat for r in timed)
    assert all(r["stats"]["min"] <= r["stats"]["median"] <= r["stats"]["max"] for r in timed)
    impls = {(r["workload"], r["impl"]) for r in rows}
    for name in ("hand-written numpy+BLAS", "hand-written Numba loops", "adcore (Numba kernel)",
                 "layers, tape engine",
                 "layers, Duplicated (LLVM)", "PyTorch", "JAX (jit)", "autograd"):
        assert ("mlp", name) in impls
    for name in ("Numba objective", "hand-written Numba gradient", "adcore gradient",
                 "adcore.tape (numpy)", "PyTorch", "JAX (jit)", "autograd",
                 "Numba objective (points layout)", "hand-written Numba gradient (points layout)",
                 "adcore gradient (points layout)"):
        assert ("gmm", name) in impls
    assert {r["workload"] for r in rows} == set(QUICK)
    text = report.table(rows)
    for r in rows:
        assert r["impl"] in text


def test_every_answer_agrees_with_the_reference(quick_rows):
    rows, _ = quick_rows
    checked = [r for r in rows if r["err"] is not None]
    assert checked and [r for r in checked if not r["ok"]] == []
    timed = [r for r in rows if r["stats"] is not None and r["workload"] in ("mlp", "gmm")
             and not r["note"].startswith(("reference", "the primal"))]
    assert all(r["ok"] for r in timed)


def test_no_implementation_raises(quick_rows):
    raised = [f"{r['workload']} / {r['impl']}: {r['note']}" for r in failures(quick_rows[0])
              if r["err"] is None]
    assert raised == []


def test_gmm_test_instance_matches_adbench():
    inst = gmm.parse(gmm.TEST_INSTANCE, "test")
    assert gmm.Kernels(inst).objective() == pytest.approx(gmm.TEST_F, rel=1e-12)
    tri = gmm.tri_matrix(inst.d)
    val = gmm.objective_xp(np, *inst.params, inst.x, tri, inst.gamma, inst.m)
    assert val == pytest.approx(gmm.TEST_F, rel=1e-12)


def test_lstm_matches_adbench():
    inst = lstm.instance(1024)
    assert inst.label().endswith("(ADBench file)")
    val = lstm.objective(*inst.params, inst.state0, inst.seq, *lstm.scratch(inst))
    assert val == pytest.approx(lstm.ADBENCH_LOSS, abs=1e-8)
    short = lstm.instance(6)
    ref = lstm.objective(*short.params, short.state0, short.seq, *lstm.scratch(short))
    assert lstm.objective_xp(np, *short.params, short.state0, short.seq) == pytest.approx(ref, rel=1e-13)


def test_scale_workload_checks_gradients_at_every_size(monkeypatch):
    monkeypatch.setattr(peers, "get", lambda name: None)
    rows = scale.run(TINY)
    cases = {r["case"] for r in rows}
    assert sum(c.startswith("GMM d=2 ") for c in cases) == 1 and sum("d=10 K=25" in c for c in cases) == 1
    assert sum(c.startswith("LSTM") for c in cases) == 2
    adcore_rows = [r for r in rows if r["impl"].startswith("adcore gradient")]
    assert len(adcore_rows) == 8 and all(r["ok"] for r in adcore_rows)     # 3 GMM layouts, 2 LSTMs
    assert sum("ADBench C style" in r["impl"] for r in adcore_rows) == 2
    assert all(r["cached_bytes"] > 0 for r in adcore_rows)


def test_interleaved_gmm_prints_ratios_and_checks_the_gradient(monkeypatch):
    monkeypatch.setattr(peers, "get", lambda name: None)
    lines = []
    scale.interleaved_gmm([(3, 2)], n=20, rounds=2, budget=0.0, out=lines.append)
    assert len(lines) == 3 and lines[0].startswith("d=3 K=2 n=20: hand-written ")
    assert lines[1].startswith("d=3 K=2 n=20 points layout: hand-written ")
    assert lines[2].startswith("d=3 K=2 n=20 ADBench-C-style layout: hand-written ")
    assert all("grad/objective" in line and "JAX" not in line for line in lines)
    assert all(float(line.rsplit("error ", 1)[1]) < 1e-10 for line in lines)


def test_interleaved_gmm_times_each_peers_objective(monkeypatch):
    calls = {"objective": 0, "gradient": 0}

    def fake(kind):
        def call():
            calls[kind] += 1
            return 0.0
        return call
    monkeypatch.setattr(gmm, "engines", lambda inst: {
        "JAX (jit)": (fake("objective"), fake("gradient")), "PyTorch": "not installed"})
    lines = []
    scale.interleaved_gmm([(3, 2)], n=20, rounds=2, budget=0.0, out=lines.append)
    assert calls["objective"] == calls["gradient"] == 3      # one warm-up call, one per round
    assert all("JAX (jit) x ref " in line and "PyTorch" not in line for line in lines)
    assert float(lines[0].split("its objective / Numba's ", 1)[1].split(")", 1)[0]) > 0


def test_missing_peer_is_a_note(monkeypatch):
    monkeypatch.setattr(peers, "get", lambda name: None)
    engines = gmm.engines(gmm.parse(gmm.TEST_INSTANCE, "test"))
    assert isinstance(engines["PyTorch"], str) and "not installed" in engines["PyTorch"]
    rows = mlp.run(TINY)
    assert {r["impl"]: r["note"] for r in rows}["JAX (jit)"].startswith("skipped")


def test_seed_peers_are_sampled_and_checked(monkeypatch):
    monkeypatch.setattr(seed_peers, "trainers", lambda *args: {"fake peer": lambda epochs: 0.5,
                                                              "absent peer": "not installed"})
    rows = suite.seed_peer_rows(3, 0.5, 1e-3, Sampler(repeat=3, min_time=0.0))
    assert rows[0]["impl"] == "fake peer" and rows[0]["ok"] and rows[0]["stats"]["n"] == 3
    assert rows[1]["note"] == "skipped: not installed" and rows[1]["stats"] is None


def test_compile_workload_prints_short_references_in_milliseconds():
    from bench import compile_times
    assert compile_times._seconds(0.97) == "0.97 s"
    assert compile_times._seconds(0.0013) == "1.3 ms"     # the tape engine's first gradient


def test_seed_loop_times_the_native_loop_inside_train():
    """bench.seed_loop: the native loop's share is timed inside the very train calls."""
    from bench import seed_loop
    m = seed_loop.measure(rounds=1, reps=1)
    assert 0 < m["native"] < m["adcore"] and m["hand"] > 0
    assert "native loop x ref" in seed_loop.report(m)


def test_parallel_workload_checks_every_gradient_at_each_thread_count():
    from bench import parallel
    rows = parallel.run(TINY)
    assert not failures(rows)
    grads = [r for r in rows if r["impl"].startswith("adcore gradient") and "thread" in r["impl"]]
    threads = {1, parallel.numba.config.NUMBA_NUM_THREADS}
    assert len(grads) == 4 * len(threads) and all(r["ok"] for r in grads)
    serial = [r for r in rows if r["impl"] == "adcore gradient, parallel=False build"]
    assert len(serial) == 4
    hand = [r for r in rows if r["impl"].startswith("hand-written")]
    assert len(hand) == 2 and all(r["ok"] for r in hand)


def test_distributed_workload_checks_gradients_and_training_at_1_and_2_workers():
    from bench import distributed
    rows = distributed.run(TINY)
    assert not failures(rows)
    checked = [r for r in rows if r["impl"].startswith(("adcore.distributed", "layers.train(cluster"))]
    assert len(checked) == 4 and all(r["ok"] for r in checked)
    assert any(r["impl"] == "1 and 2 workers agree bit for bit" and r["ok"] for r in rows)


def test_scale_kernel_rows_take_the_kernel_workloads(monkeypatch):
    small = kernels.workloads(quick=True)
    monkeypatch.setattr(kernels, "workloads", lambda quick=False: small)
    rows = scale.kernel_rows(TINY.sampler)
    assert len(rows) == 6 and all(r["impl"] == "adcore gradient" and r["grad_obj"] > 0 for r in rows)
