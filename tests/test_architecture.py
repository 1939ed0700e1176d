"""Structural promises: what loads what, and where Numba's internals are touched."""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_tape_engine_loads_neither_numba_nor_llvmlite():
    code = ("import adcore.tape, sys, numpy as np\n"
            "assert adcore.tape.gradient(lambda x: np.sum(x * x), np.ones(2))[0].tolist() == [2.0, 2.0]\n"
            "loaded = [m for m in sys.modules if m.split('.')[0] in ('numba', 'llvmlite')]\n"
            "assert not loaded, loaded\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
