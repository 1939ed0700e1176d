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


def test_numba_internals_are_touched_in_one_module():
    """Private attributes (``x._name``) of Numba objects and literal offsets into Numba's
    array struct appear in adcore/numba_abi.py only."""
    private = re.compile(r"(\w+|[\])])\._(?!adcore_)[a-z]\w*")
    private_import = re.compile(r"from numba[\w.]* import .*\b_[a-z]|import numba\.\w*\._")
    offenders = []
    for path in list((ROOT / "adcore").glob("*.py")) + list((ROOT / "layers").rglob("*.py")):
        if path.name == "numba_abi.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            owners = [m.group(1) for m in private.finditer(code)]
            if any(o not in ("self", "cls", "v") for o in owners) or private_import.search(code):
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_importing_layers_patches_nothing_in_the_tape():
    """``layers`` traces through ``adcore.tape.observe``: importing it leaves the tape's
    ``Tracked`` class and numpy dispatch exactly as they were."""
    code = ("from adcore.tape import numpy_api, tracked\n"
            "tables = {'Tracked': vars(tracked.Tracked), 'tracked': vars(tracked),\n"
            "          'numpy_api': vars(numpy_api), 'FUNCTIONS': numpy_api.FUNCTIONS,\n"
            "          'UFUNC_OPS': numpy_api.UFUNC_OPS}\n"
            "before = {t: dict(d) for t, d in tables.items()}\n"
            "import layers, layers.staging.program, layers.staging.loop\n"
            "changed = [f'{t}.{k}' for t, d in tables.items() for k in set(d) | set(before[t])\n"
            "           if d.get(k) is not before[t].get(k)]\n"
            "assert not changed, changed\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
