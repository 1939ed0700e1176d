"""Numba's overloads compiled while adcore lowers a kernel get machine code only on demand
(:func:`adcore.numba_abi.machine_code_deferred`).

The script runs in a fresh process, so that ``np.dot``'s, ``np.zeros``' and ``np.sum``'s
overloads are first compiled by adcore's capture: the gradient must match its closed form,
the primal and another kernel using the same overloads (linked from the deferred
libraries) must compute what numpy does, the libraries left waiting must have no C wrapper
and no machine code, and asking one for a function's address must complete it.
"""
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

SCRIPT = r"""
import gc
import numba
import numpy as np
from numba.core import codegen
import adcore

@numba.njit
def f(A, x):
    return np.sum(np.tanh(A @ x)) + np.zeros(3).sum() + np.dot(x, x)

rng = np.random.default_rng(0)
A, x = rng.standard_normal((7, 5)), rng.standard_normal(5)
gA, gx = adcore.gradient(adcore.Reverse, f, A, x)
s = 1 - np.tanh(A @ x) ** 2
np.testing.assert_allclose(gA, np.outer(s, x), rtol=1e-12)
np.testing.assert_allclose(gx, A.T @ s + 2 * x, rtol=1e-12)

waiting = [lib for lib in gc.get_objects()
           if isinstance(lib, codegen.JITCodeLibrary) and getattr(lib, "_adcore_deferred", False)]
assert waiting, "no library was left without machine code"
engine = waiting[0].codegen._engine
def own(lib):             # the functions the library itself compiled (not those it links)
    return [fn.name for fn in lib._adcore_own.functions if not fn.is_declaration and fn.name.startswith("_ZN")]

for lib in waiting:
    assert own(lib) and not any(fn.name.startswith("cfunc.") for fn in lib._final_module.functions)
# (a function another library compiled too, in the rules' reverses, may be in the engine)
unique = [lib for lib in waiting if not any(engine.is_symbol_defined(n) for n in own(lib))]
assert unique, "every library left waiting has machine code"

np.testing.assert_allclose(f(A, x), np.sum(np.tanh(A @ x)) + x @ x, rtol=1e-12)

@numba.njit
def h(A, x):
    return np.sum(A @ x) + np.zeros(2).sum()

np.testing.assert_allclose(h(A, x), np.sum(A @ x), rtol=1e-12)

lib = next(lib for lib in unique if lib._adcore_deferred)
name = own(lib)[0]
assert lib.get_pointer_to_function(name) != 0
assert not lib._adcore_deferred and engine.is_symbol_defined(name)
print("ok", len(waiting))
"""


def test_overloads_compiled_by_a_capture_get_machine_code_on_demand():
    env = dict(os.environ, ADCORE_CACHE="0",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.startswith("ok")
