"""Results people can keep and compare: the --json file against its schema, --output writing
nowhere else, --compare on synthetic runs, sampling, and workloads added from outside."""
import contextlib
import copy
import io
import json
import os
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest

import bench
from bench import __main__ as cli
from bench import charts, compare, registry, results
from bench.rows import row
from bench.schema import SCHEMA
from bench.timing import Sampler, Timing

PACKAGE = Path(bench.__file__).resolve().parent


def _snapshot(folder):
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*") if "__pycache__" not in p.parts}


def _main(argv):
    """``(exit status, stdout)`` of ``python -m bench ARGV``."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli.main(argv)
    return status, out.getvalue()


@pytest.fixture(scope="module")
def gmm_run(tmp_path_factory):
    """One small run of the gmm workload with --json and --output, from an empty directory."""
    cwd, out = tmp_path_factory.mktemp("cwd"), tmp_path_factory.mktemp("out")
    before = _snapshot(PACKAGE)
    old = os.getcwd()
    os.chdir(cwd)
    try:
        status, stdout = _main(["gmm", "--quick", "--size", "0.01", "--repeat", "3",
                                "--json", str(out / "gmm.json"), "--output", str(out / "report")])
    finally:
        os.chdir(old)
    return SimpleNamespace(status=status, stdout=stdout, cwd=cwd, out=out, before=before,
                           after=_snapshot(PACKAGE), doc=results.read(out / "gmm.json"))


def test_run_passes_its_checks(gmm_run):
    assert gmm_run.status == 0
    assert "gmm: test instance" in gmm_run.stdout and "all checks passed" in gmm_run.stdout


def test_json_matches_the_schema(gmm_run):
    doc = gmm_run.doc
    jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker()).validate(doc)
    assert doc["settings"]["repeat"] == 3 and doc["settings"]["workloads"] == ["gmm"]
    timed = [r for r in doc["rows"] if r["stats"]]
    assert timed and all(len(r["samples"]) == r["stats"]["n"] == 3 for r in timed)
    for st in (r["stats"] for r in timed):
        assert st["min"] <= st["q1"] <= st["median"] <= st["q3"] <= st["max"]
    assert any(r["cached_bytes"] for r in timed) and any(r["first_call_s"] for r in timed)
    assert any(r["ok"] for r in doc["rows"])
    env = doc["environment"]
    assert env["cpu"]["flags"] and env["cpu"]["cores"] >= 1
    assert env["versions"]["numba"] and set(env["versions"]["peers"]) == {"torch", "jax", "autograd"}
    assert env["threads"]["variables"]["OPENBLAS_NUM_THREADS"] == "1"


def test_output_writes_nowhere_else(gmm_run):
    assert list(gmm_run.cwd.iterdir()) == []
    assert gmm_run.before == gmm_run.after, "the run wrote into the bench package"
    written = {p.relative_to(gmm_run.out).as_posix() for p in gmm_run.out.rglob("*")}
    charted = {"report/gmm.png"} if charts._pyplot() else set()
    assert written == {"gmm.json", "report", "report/RESULTS.md"} | charted
    text = (gmm_run.out / "report" / "RESULTS.md").read_text()
    assert "adcore gradient" in text and "Machine:" in text and "Threads:" in text


def test_without_matplotlib_charts_are_a_note(gmm_run, tmp_path, monkeypatch):
    monkeypatch.setattr(charts, "_pyplot", lambda: None)
    said = cli._write_outputs(gmm_run.doc, tmp_path)
    assert "matplotlib is not installed" in said
    assert [p.name for p in tmp_path.iterdir()] == ["RESULTS.md"]


def _timed(impl, samples, ok=True):
    return row("synthetic", "one case", impl, Timing(tuple(s * 1e-3 for s in samples)),
               err=0.0 if ok else 1.0, tol=0.5)


def test_compare_flags_a_real_change_and_not_noise(gmm_run, tmp_path):
    steady = [1.00, 1.02, 0.98, 1.01, 0.99]
    noisy_old, noisy_new = [1.0, 1.3, 0.8, 1.1, 0.9], [1.2, 0.9, 1.4, 1.0, 1.1]
    old, new = copy.deepcopy(gmm_run.doc), copy.deepcopy(gmm_run.doc)
    old["rows"] = [_timed("steady", steady), _timed("noisy", noisy_old), _timed("slower", steady),
                   _timed("faster", steady), _timed("one sample", [1.0]), _timed("broken", steady),
                   _timed("removed", steady)]
    new["rows"] = [_timed("steady", [s * 1.005 for s in steady[::-1]]), _timed("noisy", noisy_new),
                   _timed("slower", [s * 1.5 for s in steady]), _timed("faster", [s * 0.6 for s in steady]),
                   _timed("one sample", [2.0]), _timed("broken", steady, ok=False),
                   _timed("added", steady)]
    new["environment"]["versions"]["numba"] = "0.0.1"
    old["environment"]["load_average"] = {"start": 0.1, "end": 0.2}
    new["environment"]["load_average"] = {"start": 0.1, "end": 99.0}
    changes = {(c["new"] or c["old"])["impl"]: c["change"]
               for c in compare.compare_rows(old["rows"], new["rows"])}
    assert changes == {"steady": None, "noisy": None, "slower": "slower", "faster": "faster",
                       "one sample": None, "broken": None, "added": "only in new",
                       "removed": "only in old"}
    for doc, name in ((old, "old.json"), (new, "new.json")):
        results.write(doc, tmp_path / name)
    status, out = _main(["--compare", str(tmp_path / "old.json"), str(tmp_path / "new.json")])
    assert status == 0
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert "1.50x slower" in lines["slower"] and "*" in lines["slower"]
    assert "1.67x faster" in lines["faster"]
    for impl in ("steady", "noisy", "one"):
        assert "within the spread" in lines[impl] and "*" not in lines[impl]
    assert "check: err 0.0e+00 ok -> err 1.0e+00 FAIL" in lines["broken"]
    assert "environment differs: versions.numba" in out
    assert "new ran on a busy machine (load average up to 99.0" in out and "old ran" not in out


def test_compare_refuses_other_files(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"benchmarks": []}))
    with pytest.raises(SystemExit):
        cli.main(["--compare", str(tmp_path / "x.json"), str(tmp_path / "x.json")])


def test_timing_summary_and_sampling():
    st = Timing((5.0, 1.0, 4.0, 2.0, 3.0)).stats()
    assert (st["n"], st["min"], st["q1"], st["median"], st["q3"], st["max"], st["iqr"]) == (5, 1, 2, 3, 4, 5, 2)
    assert Timing((2.0,)).stats()["iqr"] == 0
    calls = []
    timing = Sampler(repeat=4, min_time=0.0, warmup=2).time(lambda: calls.append(1))
    # 2 warm-up calls, 2 to calibrate (the second timed), 4 samples of one call
    assert len(timing.samples) == 4 and timing.number == 1 and len(calls) == 2 + 2 + 4


PLUGIN = '''
from bench import workload, row

@workload("plugin_demo", "a workload from outside the runner")
def plugin_demo(config):
    return [row("plugin_demo", "sum of 100 ints", "python", config.sampler.time(lambda: sum(range(100))))]
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """The path of a workload module outside the package; only it is registered."""
    registry.load()   # the built-in workloads are registered once, before the registry is emptied
    monkeypatch.setattr(registry, "WORKLOADS", {})
    (tmp_path / "my_bench.py").write_text(PLUGIN)
    return str(tmp_path / "my_bench.py")


def test_a_workload_added_from_outside(plugin, tmp_path):
    status, out = _main(["--load", plugin, "--list"])
    assert status == 0 and "plugin_demo" in out and "a workload from outside the runner" in out
    status, _ = _main(["--load", plugin, "plugin_demo", "--repeat", "4", "--min-time", "0.001",
                       "--json", str(tmp_path / "r.json")])
    rows = results.read(tmp_path / "r.json")["rows"]
    assert status == 0 and [r["impl"] for r in rows] == ["python"] and len(rows[0]["samples"]) == 4


def test_a_full_run_writes_into_the_current_directory(plugin, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = _snapshot(PACKAGE)
    status, out = _main(["--load", plugin, "--repeat", "3"])
    assert status == 0 and "wrote RESULTS.md" in out
    assert (tmp_path / "RESULTS.md").exists() and _snapshot(PACKAGE) == before
    assert (tmp_path / "plugin_demo.png").exists() == bool(charts._pyplot())


def test_entry_points_are_loaded(monkeypatch):
    loaded = []
    entry = SimpleNamespace(load=lambda: loaded.append(True))
    monkeypatch.setattr(registry.importlib.metadata, "entry_points",
                        lambda group: [entry] if group == registry.ENTRY_POINT_GROUP else [])
    registry.load()
    assert loaded == [True]
