"""Structural promises: what loads what, and where Numba's internals are touched."""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run_fresh(code, timeout=300):
    """Run ``code`` in a new Python process at the repository root; fail with its stderr."""
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=timeout)
    assert run.returncode == 0, run.stderr


def test_the_tape_engine_loads_neither_numba_nor_llvmlite():
    code = ("import adcore.tape, sys, numpy as np\n"
            "assert adcore.tape.gradient(lambda x: np.sum(x * x), np.ones(2))[0].tolist() == [2.0, 2.0]\n"
            "loaded = [m for m in sys.modules if m.split('.')[0] in ('numba', 'llvmlite')]\n"
            "assert not loaded, loaded\n")
    run_fresh(code)


def test_numba_internals_are_touched_in_one_module():
    """Private attributes (``x._name``) that the project does not define itself (Numba's,
    then) and imports of Numba's private modules appear in adcore/numba_abi.py only."""
    files = list((ROOT / "adcore").rglob("*.py")) + list((ROOT / "layers").rglob("*.py")) + \
        list((ROOT / "optim").rglob("*.py"))
    sources = {path: path.read_text() for path in files}
    defined = set()
    for text in sources.values():
        defined |= set(re.findall(r"\b(?:def|class)\s+(_\w+)", text))
        defined |= set(re.findall(r"(?:self|cls)\.(_\w+)\s*(?:=|:)", text))
        defined |= set(re.findall(r"^\s*(_\w+)\s*(?:=|:)", text, re.M))
        defined |= set(re.findall(r"\.(_adcore_\w+)", text))
    private = re.compile(r"[\w\])]\.(_[a-z]\w*)")
    private_import = re.compile(r"from numba[\w.]* import .*\b_[a-z]|import numba\.\w*\._")
    offenders = []
    for path, text in sources.items():
        if path.name == "numba_abi.py":
            continue
        for n, line in enumerate(text.splitlines(), 1):
            code = line.split("#")[0]
            foreign = [name for name in private.findall(code) if name not in defined]
            if foreign or private_import.search(code):
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
    run_fresh(code)


def _module_imports():
    """``{module: modules of the project it imports at module level}`` (adcore, layers,
    optim; imports inside functions are left out: they run after both modules loaded)."""
    import ast
    modules = {}
    for package in ("adcore", "layers", "optim"):
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in modules.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom):
                base = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else node.module
                for alias in node.names:
                    found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
            elif isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def test_no_import_cycles():
    """No two of the project's modules import each other, directly or through others, at
    module level (a module that extends another registers itself; the package imports both)."""
    graph = _module_imports()
    cycles = []
    for start in graph:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    cycles.append(" -> ".join(path + [start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
    assert not cycles, cycles


STAGES = ["frontend", "ir", "analysis", "rules", "plan", "reverse", "forward", "backend",
          "calling", "tape", "distributed"]
TOP_LEVEL = {"__init__.py", "api.py", "pipeline.py", "annotations.py", "errors.py", "tree.py",
             "timings.py", "numba_abi.py", "known_functions.py"}


def test_adcore_is_its_stages_with_a_few_shared_modules_at_the_top():
    """The tree shows the pipeline: modules live in a stage's folder, and only the entry
    points and what every stage shares sit at the top (a new flat module fails here)."""
    top = {p.name for p in (ROOT / "adcore").iterdir() if p.suffix == ".py"}
    folders = {p.name for p in (ROOT / "adcore").iterdir() if (p / "__init__.py").exists()}
    assert top == TOP_LEVEL, sorted(top ^ TOP_LEVEL)
    assert folders == set(STAGES), sorted(folders ^ set(STAGES))


def test_the_tests_mirror_the_packages():
    """Each of adcore's stages, ``layers`` and ``optim`` has its folder of tests."""
    folders = {p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and any(p.glob("test_*.py"))}
    expected = (set(STAGES) - {"ir"}) | {"layers", "optim", "bench"}
    assert folders == expected, sorted(folders ^ expected)
