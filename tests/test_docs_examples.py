"""The documentation's examples run, and the API reference names the whole public API.

Every ```python block of README.md and of docs/**/*.md is run: a page's blocks in order,
as one script, in a fresh Python process (``sys.executable``), so later blocks see what
earlier ones defined, exactly as a reader pasting them in turn would. Blocks that are
not Python to run are fenced as what they are: ```console for shell commands, ```text
for output, ```c for C, ```llvm for IR. A fence spelled ``py``, ``python3``, ``pycon`` or
``ipython`` is refused, so that no example escapes the check by its spelling.
"""
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted([ROOT / "README.md", *(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)])
FENCE = re.compile(r"^(?P<indent> *)(?P<ticks>```+|~~~+)(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)(?P=ticks) *$",
                   re.S | re.M)
DISGUISED = {"py", "python3", "pycon", "ipython", "ipython3", "py3"}


def blocks(text, language="python"):
    """The bodies of the fenced blocks of ``language`` in a Markdown text, in order."""
    found = []
    for m in FENCE.finditer(text):
        info = m.group("info").strip()
        if info.split(" ")[0].strip("{}") == language:
            body = m.group("body")
            indent = len(m.group("indent"))
            found.append("".join(line[indent:] if line[:indent].isspace() else line
                                 for line in body.splitlines(keepends=True)))
    return found


def _name(page):
    return str(page.relative_to(ROOT))


def test_pages_found():
    names = {_name(p) for p in PAGES}
    assert "README.md" in names and len(names) > 10, names


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_no_disguised_python_fences(page):
    infos = {m.group("info").strip().split(" ")[0] for m in FENCE.finditer(page.read_text())}
    assert not infos & DISGUISED, f"{_name(page)}: fence {infos & DISGUISED}: write ```python"


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p.read_text())], ids=_name)
def test_page_examples_run(page, tmp_path):
    code = blocks(page.read_text())
    script = tmp_path / (page.stem.replace("-", "_") + "_examples.py")
    script.write_text("\n\n".join(f"# --- block {k + 1} of {_name(page)} ---\n{body}"
                                  for k, body in enumerate(code)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env.setdefault("ADCORE_CACHE_DIR", str(tmp_path / "cache"))
    # Run as `python -c` executing the file: the same as `python script.py`, except that
    # Dask's worker processes (started by multiprocessing's spawn) do not run the whole
    # page again when they start, as they would import a main script.
    run = f"path = {str(script)!r}; exec(compile(open(path).read(), path, 'exec'))"
    proc = subprocess.run([sys.executable, "-c", run], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (f"{_name(page)}'s examples failed:\n{proc.stdout[-2000:]}\n"
                                  f"{proc.stderr[-4000:]}")


# -- the API reference covers the public API ------------------------------------------------

# Every name /work/shared/API.md (the API contract) names, by module.
CONTRACT = {
    "adcore": ["autodiff", "gradient", "Reverse", "ReverseWithPrimal", "Forward", "ForwardWithPrimal",
               "Active", "Duplicated", "Const", "BatchDuplicated", "make_zero", "primal_ir",
               "adjoint_ir", "ADError", "UnsupportedError", "ActivityError", "jacobian", "hvp",
               "hessian", "compile_gradient"],
    "adcore.tape": ["gradient", "withgradient"],
    "adcore.distributed": ["gradient", "scatter_batches"],
    "layers": ["Chain", "Dense", "Embedding", "only", "tanh", "relu", "sigmoid", "softmax", "mse",
               "gradient", "withgradient", "train", "Conv", "MaxPool", "MeanPool", "GlobalMeanPool",
               "flatten", "LayerNorm", "BatchNorm", "Dropout", "RNN", "LSTM", "GRU",
               "SkipConnection", "Parallel", "trainmode", "testmode"],
    "optim": ["Descent", "Momentum", "Nesterov", "RMSProp", "Adam", "AdamW", "AdaGrad", "ClipGrad",
              "ClipNorm", "WeightDecay", "OptimiserChain", "setup", "update", "adjust", "freeze",
              "thaw"],
}
REFERENCE = {"adcore": "adcore.rst", "adcore.tape": "tape.rst", "adcore.distributed": "distributed.rst",
             "layers": "layers.rst", "optim": "optim.rst"}
DOCUMENTED = re.compile(r"^\.\. (?:auto)?(?:function|class|exception|data|method)::\s+(\S+?)(?:\(|$)", re.M)


def _public(module):
    import importlib
    return list(importlib.import_module(module).__all__)


@pytest.mark.parametrize("module", sorted(REFERENCE))
def test_api_reference_documents_every_public_name(module):
    text = (DOCS / "api" / REFERENCE[module]).read_text()
    assert f".. module:: {module}\n" in text
    documented = {name.rsplit(".", 1)[-1] for name in DOCUMENTED.findall(text)}
    missing = [n for n in dict.fromkeys(CONTRACT[module] + _public(module)) if n not in documented]
    assert not missing, f"docs/api/{REFERENCE[module]} does not document {missing}"


def test_contract_names_are_public():
    """The list above is the contract's: each name exists where the contract says."""
    import importlib
    for module, names in CONTRACT.items():
        mod = importlib.import_module(module)
        for name in names:
            assert hasattr(mod, name), f"{module}.{name}"


def test_every_environment_variable_is_documented():
    """Each ``ADCORE_*`` variable the code or the tests read has its entry in the docs."""
    used = set()
    for folder in ("adcore", "layers", "optim", "bench", "tests"):
        for path in (ROOT / folder).rglob("*.py"):
            used |= set(re.findall(r"\bADCORE_[A-Z0-9_]+", path.read_text()))
    page = (DOCS / "guide" / "environment.md").read_text()
    missing = sorted(v for v in used if f"`{v}`" not in page)
    assert used and not missing, f"docs/guide/environment.md does not document {missing}"
