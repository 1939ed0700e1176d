"""The on-disk cache of compiled gradients (issue 14): a second process loads a gradient
without compiling the primal, a changed kernel or callee is compiled anew, broken entries
are ignored and rewritten, racing writers are safe, ``ADCORE_CACHE=0`` and an unwritable
directory fall back to memory; gradients from the cache equal a fresh compile's and
finite differences."""
import ctypes
import json
import os
import pathlib
import subprocess
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
import pytest

import adcore
from adcore import Active, Duplicated, Reverse, api, pipeline
from adcore.calling import compiled
from adcore.backend import disk_cache
from adcore.calling.arguments import annotate
from fdcheck import fd_gradient

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def cache_on():
    """The cache is on in these tests whatever the environment says (conftest.py points it
    at the session's temporary directory); module-scoped, so module fixtures see it too."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("ADCORE_CACHE", raising=False)
        yield


# -- in one process: the key -------------------------------------------------------------
def _defined(source, **env):
    """The njit function ``kern`` of ``source`` defined in a fresh namespace."""
    scope = {"np": np, "numba": numba, **env}
    exec(source, scope)
    return scope["kern"]


HELPER = """
@numba.njit
def helper(v):
    return {body}

@numba.njit
def kern(x):
    s = 0.0
    for i in range(x.size):
        s += helper(x[i]) * SCALE
    return s
"""


def _key(kern, x=np.ones(3)):
    return disk_cache.key(kern, (numba.typeof(x),), (Duplicated,), None, True, None)


def test_key_is_stable_and_follows_the_code_and_values_read():
    base = _key(_defined(HELPER.format(body="v * v"), SCALE=2.0))
    assert base is not None and base == _key(_defined(HELPER.format(body="v * v"), SCALE=2.0))
    assert base != _key(_defined(HELPER.format(body="v * v * v"), SCALE=2.0))   # the callee
    kernel_changed = HELPER.format(body="v * v").replace("* SCALE", "+ SCALE")
    assert base != _key(_defined(kernel_changed, SCALE=2.0))                    # the kernel
    assert base != _key(_defined(HELPER.format(body="v * v"), SCALE=3.0))       # a global's value
    assert base != _key(_defined(HELPER.format(body="v * v"), SCALE=2.0), np.ones((3, 1)))
    table = "@numba.njit\ndef kern(x):\n    return np.sum(x * TABLE)\n"
    assert _key(_defined(table, TABLE=np.arange(3.0))) != _key(_defined(table, TABLE=np.ones(3)))


def test_what_cannot_be_keyed_is_not_cached():
    libm = ctypes.CDLL(None)
    reads_ctypes = "@numba.njit\ndef kern(x):\n    return CF(x[0])\n"
    cf = libm.cos
    cf.restype, cf.argtypes = ctypes.c_double, [ctypes.c_double]
    assert _key(_defined(reads_ctypes, CF=cf)) is None       # an address of this process

    class Box:
        pass
    assert _key(_defined(reads_ctypes, CF=Box())) is None     # a user object


# -- in one process: entries -----------------------------------------------------------------
@numba.njit
def scaled_sines(x, a):
    s = 0.0
    for i in range(x.size):
        s += np.sin(a * x[i]) * x[i]
    return s


@pytest.fixture(scope="module")
def fresh():
    """``(key, argtypes, anns, gradient)`` of ``scaled_sines`` compiled once."""
    x = np.linspace(-1.0, 2.0, 7)
    anns = annotate([Duplicated(x, np.zeros_like(x)), Active(0.7)])
    argtypes = tuple(numba.typeof(a.val) for a in anns)
    digest = disk_cache.key(scaled_sines, argtypes, (Duplicated, Active), None, True, None)
    grad = pipeline.differentiate(scaled_sines, anns, argtypes, None, True, name=digest)
    return digest, argtypes, anns, grad


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ADCORE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setitem(disk_cache._state, "unwritable", False)
    return tmp_path / "cache"


def _run(grad, anns):
    dx = np.zeros_like(anns[0].val)
    derivs, _ = grad([Duplicated(anns[0].val, dx), anns[1]])
    return dx, derivs[1]


def test_loaded_gradient_equals_fresh_compile_and_finite_differences(fresh, cache_dir):
    digest, argtypes, anns, grad = fresh
    disk_cache.store(digest, grad)
    loaded = disk_cache.load(digest, argtypes, None)
    assert loaded is not None and loaded.from_disk and loaded.call is not grad.call
    dx, da = _run(loaded, anns)
    dx0, da0 = _run(grad, anns)
    np.testing.assert_array_equal(dx, dx0)
    assert da == da0
    fd_x, fd_a = fd_gradient(scaled_sines.py_func, [anns[0].val, anns[1].val], {})
    np.testing.assert_allclose(dx, fd_x, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(da, fd_a, rtol=1e-6)
    assert "define" in loaded.adjoint_ir and loaded.optimised_ir == grad.optimised_ir
    out = loaded.native(anns[0].val, 0.7, np.zeros(7))      # the njit stub, made on first use
    assert out[1] == da0


def test_loaded_gradient_moves_to_the_njit_stub_after_many_calls(fresh, cache_dir, monkeypatch):
    digest, argtypes, anns, grad = fresh
    disk_cache.store(digest, grad)
    loaded = disk_cache.load(digest, argtypes, None)
    monkeypatch.setattr(compiled, "PROMOTE_AFTER", 2)
    first = _run(loaded, anns)
    assert loaded.from_disk                                  # still the ctypes call
    second = _run(loaded, anns)
    assert not loaded.from_disk and loaded.call is loaded.native
    np.testing.assert_array_equal(first[0], second[0])
    assert first[1] == second[1] == _run(grad, anns)[1]


def _corrupt(path, how):
    data = path.read_bytes()
    header, _, obj = data.partition(b"\n")
    if how == "truncated":
        path.write_bytes(data[:len(data) - 40])
    elif how == "garbage":
        path.write_bytes(b"\x00garbage" * 10)
    elif how == "foreign format":
        meta = json.loads(header)
        meta["format"] = 999
        path.write_bytes(json.dumps(meta).encode() + b"\n" + obj)
    elif how == "flipped byte":
        path.write_bytes(header + b"\n" + obj[:-1] + bytes([obj[-1] ^ 1]))


@pytest.mark.parametrize("how", ["truncated", "garbage", "foreign format", "flipped byte"])
def test_a_broken_entry_is_ignored_with_a_warning_and_written_anew(fresh, cache_dir, how):
    digest, argtypes, anns, grad = fresh
    disk_cache.store(digest, grad)
    path = next(cache_dir.rglob("*.adcore"))
    _corrupt(path, how)
    with pytest.warns(UserWarning, match="ignoring the cache entry"):
        again = disk_cache.cached(scaled_sines, argtypes, (Duplicated, Active), None, True, None,
                                  lambda name: grad)
    assert again is grad                                     # compiled, not loaded
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = disk_cache.load(digest, argtypes, None)     # rewritten whole
    assert _run(loaded, anns)[1] == _run(grad, anns)[1]


def test_cache_off_writes_nothing(fresh, cache_dir, monkeypatch):
    digest, argtypes, anns, grad = fresh
    monkeypatch.setenv("ADCORE_CACHE", "0")
    assert disk_cache.key(scaled_sines, argtypes, (Duplicated, Active), None, True, None) is None
    got = disk_cache.cached(scaled_sines, argtypes, (Duplicated, Active), None, True, None,
                            lambda name: grad)
    assert got is grad and not cache_dir.exists()


def test_unwritable_directory_falls_back_to_memory_with_one_warning(fresh, tmp_path, monkeypatch):
    digest, argtypes, anns, grad = fresh
    blocker = tmp_path / "a file"
    blocker.write_text("")
    monkeypatch.setenv("ADCORE_CACHE_DIR", str(blocker / "cache"))   # cannot be created
    monkeypatch.setitem(disk_cache._state, "unwritable", False)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(3):
            got = disk_cache.cached(scaled_sines, argtypes, (Duplicated, Active), None, True, None,
                                    lambda name: grad)
            assert got is grad
    assert [str(w.message) for w in seen if "cannot write" in str(w.message)].__len__() == 1


@numba.njit
def squares_into_new(x):
    return x * x


def test_a_gradient_ctypes_cannot_call_is_not_written(cache_dir):
    """A kernel returning an array (Numba would have to box it) stays in memory."""
    x, dx = np.array([1.0, -2.0, 3.0]), np.zeros(3)
    adcore.autodiff(Reverse, squares_into_new, Duplicated(x, dx), dret=np.ones(3))
    np.testing.assert_array_equal(dx, 2 * x)
    assert not list(cache_dir.rglob("*.adcore"))


def test_evicted_from_memory_it_is_loaded_from_disk_not_recompiled(cache_dir, monkeypatch):
    monkeypatch.setattr(api._Bounded, "limit", 1)
    x = np.linspace(0.0, 1.0, 5)
    first = adcore.gradient(Reverse, scaled_sines, x, 1.5)
    assert "capture" in adcore.last_compile_report().seconds
    adcore.gradient(Reverse, scaled_sines, x.astype(np.float32), np.float32(1.5))   # evicts it
    again = adcore.gradient(Reverse, scaled_sines, x, 1.5)
    assert list(adcore.last_compile_report().seconds) == ["load from disk"]
    np.testing.assert_array_equal(again[0], first[0])
    assert again[1] == first[1]


# -- across processes -----------------------------------------------------------------------
KERNELS = """
import json, os, numba, numpy as np, adcore
from adcore import Reverse
SCALE = 1.0
""" + HELPER + """
@numba.njit
def product(A, x):
    return np.sum(np.tanh(A @ x))

x = np.linspace(0.1, 1.0, 5)
out = {{}}
g, = adcore.gradient(Reverse, kern, x)
out["kern"] = dict(grad=g.tolist(), stages=list(adcore.last_compile_report().seconds),
                   primal_compiled=len(kern.overloads))
if os.environ.get("WITH_PRODUCT"):
    A, y = np.linspace(-1, 1, 12).reshape(4, 3), np.array([0.5, -0.25, 1.0])
    dA, dy = adcore.gradient(Reverse, product, A, y)
    out["product"] = dict(dA=dA.tolist(), dy=dy.tolist(),
                          stages=list(adcore.last_compile_report().seconds),
                          primal_compiled=len(product.overloads))
    native = adcore.compile_gradient(Reverse, kern, adcore.Duplicated(x, np.zeros(5))).native
    out["native"] = native(x, np.zeros(5))[0]     # the njit stub of a loaded gradient
print(json.dumps(out))
"""

DUPLICATED = """
import json, numpy as np, layers, optim, adcore
from adcore import Duplicated
from adcore.tree import leaves

def model():
    return layers.Chain(layers.Dense(1, 5, layers.tanh, rng=0), layers.Dense(5, 1, rng=1))

x = np.linspace(-1, 1, 9, dtype=np.float32)[:, None]
y = (x ** 3).astype(np.float32)
loss = lambda m, x, y: layers.mse(m(x), y)
dup = Duplicated(model())
grads = layers.gradient(loss, dup, x, y)[0]
stages = list(adcore.last_compile_report().seconds)
tape = layers.gradient(loss, model(), x, y)[0]
data = [(x[k:k + 3], y[k:k + 3]) for k in range(0, 9, 3)]
trained = Duplicated(model())
losses = layers.train(loss, trained, data, optim.setup(optim.Descent(0.1), trained))
report = adcore.last_compile_report()
print(json.dumps(dict(grads=[a.tolist() for _, a in leaves(grads)],
                      tape=[a.tolist() for _, a in leaves(tape)], stages=stages,
                      train=[report.what, list(report.seconds)],
                      losses=losses.tolist(), params=[a.tolist() for _, a in leaves(trained.val)])))
"""


def _process(script, cache, **env):
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=600, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=str(ROOT), ADCORE_CACHE_DIR=str(cache),
                                  **env))
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def processes(tmp_path_factory):
    """Two processes racing to write the same entries, a third loading them, a fourth
    with the callee changed; all on one cache directory."""
    cache = tmp_path_factory.mktemp("shared-cache")
    squares = KERNELS.format(body="v * v")
    with ThreadPoolExecutor(2) as pool:
        racers = list(pool.map(lambda _: _process(squares, cache, WITH_PRODUCT="1"), range(2)))
    loader = _process(squares, cache, WITH_PRODUCT="1")
    changed = _process(KERNELS.format(body="v * v * v"), cache)
    return racers, loader, changed


def test_second_process_loads_without_compiling_the_primal(processes):
    racers, loader, _ = processes
    x = np.linspace(0.1, 1.0, 5)
    for name in ("kern", "product"):
        assert loader[name]["stages"] == ["load from disk"]
        assert loader[name]["primal_compiled"] == 0          # Numba never compiled the kernel
        for racer in racers:
            assert "capture" in racer[name]["stages"] or racer[name]["stages"] == ["load from disk"]
    np.testing.assert_allclose(loader["kern"]["grad"], 2 * x, rtol=1e-14)
    assert loader["native"] == pytest.approx(np.sum(x * x), rel=1e-14)
    A, y = np.linspace(-1, 1, 12).reshape(4, 3), np.array([0.5, -0.25, 1.0])
    d = 1 - np.tanh(A @ y) ** 2                              # closed form of sum(tanh(A y))
    np.testing.assert_allclose(loader["product"]["dA"], np.outer(d, y), rtol=1e-9)
    np.testing.assert_allclose(loader["product"]["dy"], A.T @ d, rtol=1e-9)
    for racer in racers:                                     # fresh compiles agree exactly
        assert racer["product"]["dA"] == loader["product"]["dA"]


def test_a_changed_callee_is_compiled_anew(processes):
    _, _, changed = processes
    x = np.linspace(0.1, 1.0, 5)
    assert "capture" in changed["kern"]["stages"]
    np.testing.assert_allclose(changed["kern"]["grad"], 3 * x * x, rtol=1e-14)


def test_duplicated_model_and_train_loop_from_the_cache(tmp_path):
    first = _process(DUPLICATED, tmp_path)
    second = _process(DUPLICATED, tmp_path)
    assert "capture" in first["stages"] and second["stages"] == ["load from disk"]
    for a, b, t in zip(first["grads"], second["grads"], second["tape"]):
        assert a == b
        np.testing.assert_allclose(b, t, rtol=2e-4, atol=1e-6)   # float32: the tape engine
    # The loop is LLVM IR adcore writes, with the optimiser's kernel written to LLVM IR
    # (direct_ir.kernel_ir) linked in, compiled once with its entry; its object code is stored
    assert first["train"] == ["train loop", ["translate", "generate", "compile"]]
    assert second["train"] == ["train loop", ["load from disk"]]   # the loop's object code
    assert first["losses"] == second["losses"] and first["params"] == second["params"]


HVP_AFTER_OTHER_RULES = """
import json, numba, numpy as np, adcore, os

@numba.njit
def layer(x, A):
    return np.sum(np.tanh(A @ x))

@numba.njit
def other(x, B):                 # compiled first here: the rules' reverses get other symbols
    return np.sum(np.sin(B @ x.reshape((2, 2)))) + np.dot(x, x)

x, v = np.array([0.5, -1.0, 2.0]), np.array([1.0, 2.0, -0.5])
A = np.array([[0.3, -0.2, 0.1], [0.5, 0.4, -0.6]])
if os.environ.get("OTHER_FIRST"):
    adcore.gradient(adcore.Reverse, other, np.ones(4), adcore.Const(np.ones((3, 2))))
g = adcore.gradient(adcore.Reverse, layer, x, adcore.Const(A))[0]
stages = list(adcore.last_compile_report().seconds)
print(json.dumps(dict(hv=adcore.hvp(layer, x, v, A).tolist(), stages=stages)))
"""


# the head of the scripts that count Numba's compiles: ``compiled`` names each dispatcher
# Numba compiles in the process
COUNTING = """
from numba.core import event
from adcore.rules import blas as blas_rules

compiled = []
class Compiles(event.Listener):
    def on_start(self, ev):
        compiled.append(ev.data["dispatcher"].py_func.__qualname__)
    def on_end(self, ev):
        pass
event.register("numba:compile", Compiles())
RULES = [n for n in dir(blas_rules) if n.startswith("xx") and hasattr(getattr(blas_rules, n), "overloads")]
"""

BLAS = COUNTING + """
import json, numba, numpy as np, adcore
from adcore import Reverse, Const

@numba.njit
def blas(A, B, x):               # gemm, gemv, dot and nrm2
    C = A @ B
    y = C @ x
    return np.sum(np.tanh(y)) + np.dot(x, x) * np.linalg.norm(C[0])

A, B = np.linspace(-1, 1, 12).reshape(4, 3), np.linspace(0.5, -0.5, 15).reshape(3, 5)
x = np.linspace(0.2, 1.0, 5)
dA, dB, dx = adcore.gradient(Reverse, blas, A, B, x)
print(json.dumps(dict(grads=[dA.tolist(), dB.tolist(), dx.tolist()],
                      stages=list(adcore.last_compile_report().seconds), compiled=compiled,
                      rule_overloads={n: len(getattr(blas_rules, n).overloads) for n in RULES})))
"""


def test_blas_kernel_from_the_cache_runs_no_numba_compile(tmp_path):
    # the rules' reverses and extents are compiled into the gradient's own object code: a
    # process loading it (here with an empty Numba cache, where any use of a rule's njit
    # function would be a compile) gets the same gradient without compiling anything
    first = _process(BLAS, tmp_path / "adcore")
    second = _process(BLAS, tmp_path / "adcore", NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    assert "capture" in first["stages"] and second["stages"] == ["load from disk"]
    assert any(first["rule_overloads"].values())          # the writer did use the rules
    assert second["compiled"] == [] and not any(second["rule_overloads"].values())
    assert second["grads"] == first["grads"]
    A, B = np.linspace(-1, 1, 12).reshape(4, 3), np.linspace(0.5, -0.5, 15).reshape(3, 5)
    x = np.linspace(0.2, 1.0, 5)
    f = lambda A, B, x: np.sum(np.tanh(A @ B @ x)) + np.dot(x, x) * np.linalg.norm((A @ B)[0])
    for k, want in enumerate(fd_gradient(f, (A, B, x), {})):
        np.testing.assert_allclose(second["grads"][k], want, rtol=1e-6, atol=1e-8)


DOCS_MLP = COUNTING + """
import json, numpy as np, layers, adcore
from adcore import Duplicated
from adcore.tree import leaves

model = layers.Chain(layers.Dense(784, 32, layers.tanh, rng=0), layers.Dense(32, 10, rng=1))
rng = np.random.default_rng(0)
x = rng.random((16, 784)).astype(np.float32)
y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 16)]
loss = lambda m, x, y: layers.logitcrossentropy(m(x), y)
grads = layers.gradient(loss, Duplicated(model), x, y)[0]
print(json.dumps(dict(grads=[a.tolist() for _, a in leaves(grads)], stages=list(adcore.last_compile_report().seconds),
                      compiled=compiled, rules=sum(len(getattr(blas_rules, n).overloads) for n in RULES))))
"""


def test_docs_mlp_from_the_cache_runs_no_numba_compile(tmp_path):
    # one thread: the whole batch's program (split across threads, the report is the last
    # part program's)
    first = _process(DOCS_MLP, tmp_path / "adcore", NUMBA_NUM_THREADS="1")
    second = _process(DOCS_MLP, tmp_path / "adcore", NUMBA_NUM_THREADS="1",
                      NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    assert "capture" in first["stages"] and second["stages"] == ["load from disk"]
    assert second["compiled"] == [] and second["rules"] == 0
    assert second["grads"] == first["grads"]


def test_hvp_of_a_cached_gradient_with_rules(tmp_path):
    # the cached IR names the rules' reverses by the writing process's symbols; hvp in a
    # process that numbered them otherwise must not follow those names
    first = _process(HVP_AFTER_OTHER_RULES, tmp_path)
    second = _process(HVP_AFTER_OTHER_RULES, tmp_path, OTHER_FIRST="1")
    assert second["stages"] == ["load from disk"]
    x, v = np.array([0.5, -1.0, 2.0]), np.array([1.0, 2.0, -0.5])
    A = np.array([[0.3, -0.2, 0.1], [0.5, 0.4, -0.6]])
    t = np.tanh(A @ x)
    Hv = A.T @ np.diag(-2 * t * (1 - t * t)) @ A @ v
    for run in (first, second):
        np.testing.assert_allclose(run["hv"], Hv, rtol=1e-12)
