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


# What only adcore/ir/model.py reads from an instruction's text: the fields of its Instr.
_KEYWORDS = (r"icmp|fcmp|getelementptr|alloca|align|volatile|atomic|nsw|nuw|nusw|exact|"
             r"disjoint|nneg|samesign|inbounds|fast|nnan|ninf|nsz|arcp|contract|afn|reassoc|"
             r"eq|ne|[su](?:lt|le|gt|ge)|o(?:eq|ne|lt|le|gt|ge|rd)|u(?:eq|ne|lt|le|gt|ge|no)")
_TEXT_PARSERS = {
    # " volatile " in load.text, " nsw " not in instr.text, " slt " in test.text
    "a keyword looked up in the text": re.compile(
        rf"""["'][^"'\n]*\b(?:{_KEYWORDS})\b[^"'\n]*["']\s+(?:not\s+)?in\s+[\w.\[\]()]*(?:\.text|_text)\b"""),
    # text.split("icmp", 1), alloca_text.split("alloca", 1)
    "text split at an opcode": re.compile(r"""\.split\(\s*["'](?:icmp|fcmp|getelementptr|alloca|load|store)\b"""),
    # r"=\s*icmp\s+(?:samesign\s+)?(\w+)\s", r".*getelementptr\s+(?:inbounds\s+...)*([^,]+),"
    "a regex after an opcode": re.compile(r"""\b(?:icmp|fcmp|getelementptr|alloca|load|store)\\s"""),
    # r", align (\d+)", r",\s*align\s+([0-9]+)"
    "a regex reading the alignment": re.compile(r"""align(?:\s|\\s[+*]?)+\(\[?\\?[d0]"""),
}


def text_parsers(source):
    """``[(kind, line)]``: the lines of ``source`` reading an instruction attribute from text."""
    return [(kind, line.strip()) for line in source.splitlines()
            for kind, pattern in _TEXT_PARSERS.items() if pattern.search(line)]


def test_instruction_attributes_are_parsed_in_the_ir_model_only():
    """Predicates, flags, GEP element and alloca types, alignment, volatility and atomicity
    are fields of adcore.ir.model.Instr, parsed there once: no other module re-reads them
    from an instruction's ``.text`` (each its own way)."""
    offenders = []
    for path in sorted((ROOT / "adcore").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name == "adcore/ir/model.py":
            continue
        offenders += [(name, kind, line) for kind, line in text_parsers(path.read_text())]
    assert not offenders, offenders


def test_the_text_parser_check_finds_the_old_readers():
    """The check above finds each way the attributes used to be read."""
    old = ['ICMP_PREDICATE = re.compile(r"=\\s*icmp\\s+(?:samesign\\s+)?(\\w+)\\s")',
           'words = icmp.text.split("icmp", 1)[1].split()',
           'predicate = cond.text.split("fcmp", 1)[1].split()[0]',
           'return " nsw " in instr.text and all(map(self.holds, ops))',
           'if not (predicate == "sgt" or predicate == "ugt" and " samesign " in test.text):',
           '_GEP_TYPE = re.compile(r".*getelementptr\\s+(?:inbounds\\s+|nuw\\s+|nusw\\s+)*([^,]+),")',
           'element = gep.text.split("getelementptr", 1)[1].split(",", 1)[0].split()[-1]',
           '_ALIGN = re.compile(r", align (\\d+)")',
           'align = re.search(r",\\s*align\\s+([0-9]+)", instr.text)',
           'rest, depth = alloca_text.split("alloca", 1)[1].strip(), 0',
           'return " atomic " not in instr.text and " volatile " not in instr.text \\',
           'if " atomic " in load.text or " volatile " in load.text or bases == UNKNOWN:']
    assert [line for line in old if not text_parsers(line)] == []
    new = ['return "nsw" in instr.flags and all(map(self.holds, ops))',
           'predicate = None if cond.flags else cond.predicate',
           'return f", align {instr.align}" if instr.align is not None else ", align 1"',
           'if instr.align is not None and instr.align > 16:',
           'text = f"  {ref} = getelementptr inbounds {t}, ptr {p}, i32 0, i32 {j}"',
           'if instr.synthetic and "@ad.shadow." in instr.text:']
    assert [line for line in new if text_parsers(line)] == []


# -- Numba's ABI and the known external functions, each named in one module --------------
ABI_MODULES = {"adcore/numba_abi.py", "adcore/known_functions.py"}
# a status literal in IR text: returned (``ret i32 0``) or compared with (``icmp eq i32
# %status, -2``); in Python, a status constant defined as a number
_STATUS_IN_IR = re.compile(r"\bret i32 -?\d|\bicmp \w+ i32 [^,]*status[^,]*, -?\d")
_STATUS_DEFINED = re.compile(r"^\s*(?:[\w.]+\s*,\s*)*\w*(?:STATUS|RETCODE|_OK|REFUSED|WRONG)\w*"
                             r"\s*(?:,\s*[\w.]+\s*)*=\s*\(?-?\d", re.M)


def _string_literals(tree, text):
    """``(line, source text)`` of each string literal of a module (f-strings whole), its
    docstrings left out (they document, they name nothing the code uses)."""
    import ast
    lines = text.splitlines(keepends=True)

    def source(node):          # ast.get_source_segment, without splitting the text each time
        first, last = lines[node.lineno - 1:node.end_lineno], node.end_col_offset
        if len(first) == 1:
            return first[0].encode()[node.col_offset:last].decode()
        return (first[0].encode()[node.col_offset:].decode() + "".join(first[1:-1]) +
                first[-1].encode()[:last].decode())

    docstrings, inner = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body \
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            docstrings.add(id(node.body[0].value))
        if isinstance(node, ast.JoinedStr):
            inner |= {id(v) for v in ast.walk(node) if v is not node}
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and id(node) not in inner or \
                isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                id(node) not in docstrings and id(node) not in inner:
            yield node.lineno, source(node)


def _abi_literals(root=ROOT):
    """``path:line: text`` of each ``NRT_`` name or Numba status written as a literal
    outside the ABI modules (adcore, layers, optim)."""
    import ast
    found = []
    for package in ("adcore", "layers", "optim"):
        for path in sorted((root / package).rglob("*.py")):
            name = path.relative_to(root).as_posix()
            if name in ABI_MODULES:
                continue
            text = path.read_text()
            for line, literal in _string_literals(ast.parse(text), text):
                if "NRT_" in literal or _STATUS_IN_IR.search(literal):
                    found.append(f"{name}:{line}: {literal}")
            for m in _STATUS_DEFINED.finditer(text):
                found.append(f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0).strip()}")
    return found


def test_runtime_names_and_status_codes_are_written_in_the_abi_modules_only():
    """Numba's runtime symbols (``NRT_*``) are named in adcore/known_functions.py and
    Numba's status codes (``ret i32 0``, ``icmp eq i32 %status, -2``) defined in
    adcore/numba_abi.py; every other module uses their names."""
    found = _abi_literals()
    assert not found, "\n".join(found)


def test_the_abi_scan_finds_a_literal_put_back(tmp_path):
    """The scan above is not vacuous: copies of modules with one literal put back fail it."""
    import shutil
    for package in ("adcore", "layers", "optim"):
        shutil.copytree(ROOT / package, tmp_path / package)
    for relative, old, new in [
            ("adcore/reverse/chunk_tape.py", "ptr @{FREE})", "ptr @NRT_Free)"),
            ("layers/staging/loop_ir.py", "{numba_abi.STATUS_NONE}", "-2"),
            ("adcore/calling/fastcall.py", "REFUSED = abi.STATUS_WRONG_ARGUMENT", "REFUSED = -1000")]:
        path = tmp_path / relative
        text = path.read_text()
        assert old in text, (relative, old)
        path.write_text(text.replace(old, new, 1))
        assert any(f.startswith(relative) for f in _abi_literals(tmp_path)), relative
        path.write_text(text)
    assert not _abi_literals(tmp_path)


def test_the_known_functions_table_is_consistent():
    """Every name in adcore.known_functions' table is listed once, with a role; each NRT
    function is one of this Numba's runtime, each libm function has a derivative rule, the
    declarations adcore writes parse; and every NRT function the IR of adcore's gradients
    names (allocating kernels, reverse and forward mode) is in the table."""
    import llvmlite.binding as llvm
    import numba
    import numpy as np

    import adcore
    from adcore import known_functions as known, numba_abi
    from adcore.rules.scalar import RULES, math_name

    names = [f.name for f in known.TABLE]
    assert len(names) == len(set(names))
    roles = {v for k, v in vars(known.Role).items() if k.isupper()}
    assert {f.role for f in known.TABLE} <= roles
    numba_abi.start_runtime()
    library = numba_abi.runtime_library()
    for name in names:
        if known.is_runtime(name):
            assert llvm.address_of_symbol(name) or library.get_pointer_to_function(name), name
    for f32, f64 in known.LIBM.values():
        assert known.ROLE[f32] == known.ROLE[f64] == known.Role.PURE_MATH
        assert math_name(f32) == math_name(f64) == f64 and f64 in RULES, f64
    declared = [known.declaration(f.name) for f in known.TABLE if f.declaration]
    llvm.parse_assembly("\n".join(declared)).verify()

    @numba.njit
    def allocating(x):
        t = np.empty_like(x)            # an allocation, its data, its destructor
        for i in range(x.size):
            t[i] = x[i] * x[i]
        u = t.reshape((x.size, 1)) * 2.0  # a view, a temporary freed by decref
        return np.sum(u) + np.sum(np.zeros(3))

    x = np.arange(1.0, 5.0)
    from adcore.forward import api as forward_api
    tangent = forward_api._compiled(allocating, *forward_api._annotate((adcore.Duplicated(x, np.ones_like(x)),)))
    texts = [adcore.adjoint_ir(adcore.Reverse, allocating, adcore.Duplicated(x, np.zeros_like(x))),
             tangent.adjoint_ir]
    runtime = {n for text in texts for n in re.findall(r"@\"?(NRT_\w+)", text)}
    assert {known.ALLOCATE, known.FREE, known.CALL_DTOR, known.DECREF} <= runtime
    assert runtime <= set(names), sorted(runtime - set(names))


# Guards (generated Python checking a call before native code runs) are written by
# adcore/calling/guard_builder.py; native addresses are called through ctypes in
# adcore/calling/ (the call layer) only.
_GUARD_TEXT = re.compile(r"\bif not \(|\)\s*:\s*return (?:None|False)\b")
_NATIVE_CALL = re.compile(r"\bctypes\.(?:CFUNCTYPE|PYFUNCTYPE)\b|\bPyCFunction_NewEx\b")


def _call_layer_offenders(root=ROOT):
    """``path:line: text`` of guard source written outside the guard builder, and of
    ctypes calls of native addresses outside the call layer (adcore, layers, optim)."""
    import ast
    found = []
    for package in ("adcore", "layers", "optim"):
        for path in sorted((root / package).rglob("*.py")):
            name, text = path.relative_to(root).as_posix(), path.read_text()
            if name != "adcore/calling/guard_builder.py":
                found += [f"{name}:{n}: {literal}" for n, literal in _string_literals(ast.parse(text), text)
                          if _GUARD_TEXT.search(literal)]
            if not name.startswith("adcore/calling/"):
                found += [f"{name}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)
                          if _NATIVE_CALL.search(line.split("#")[0])]
    return found


def test_guards_are_written_by_the_guard_builder_and_native_calls_made_by_the_call_layer():
    """Repeat calls, staged programs and the fused update write their guards with
    adcore.calling.guard_builder (no ``if not (...): return None`` of their own), and only
    adcore/calling/ makes ctypes function pointers or builtins of native addresses."""
    found = _call_layer_offenders()
    assert not found, "\n".join(found)


def test_the_call_layer_scan_finds_an_old_generator_put_back(tmp_path):
    """The scan above is not vacuous: the old generators' guard text, or a ctypes call of
    an address, put back into a copy of the packages fails it."""
    import shutil
    for package in ("adcore", "layers", "optim"):
        shutil.copytree(ROOT / package, tmp_path / package)
    for relative, added in [
            ("optim/fused.py", '_IF, _FAIL = "    if not (", "): return False"'),
            ("layers/staging/guard.py", "_LINE = f\"    if not ({' and '.join(conds)}): return None\""),
            ("adcore/calling/repeat_guard.py", 'lines = [f"    if not ({checks}):\\n        return None"]'),
            ("layers/staging/program.py", "run = ctypes.CFUNCTYPE(None)(address)")]:
        path = tmp_path / relative
        text = path.read_text()
        path.write_text(text + "\n" + added + "\n")
        assert any(f.startswith(relative) for f in _call_layer_offenders(tmp_path)), relative
        path.write_text(text)
    assert not _call_layer_offenders(tmp_path)


# -- LLVM text: written by adcore.ir.writer (its Emitter, and the templates it fills) ------
# a function written out as text in place: ``define ... @name`` at the start of a literal
# or of one of its lines
_DEFINE_TEXT = re.compile(r"""(?:^[A-Za-z]*["']+|\\n|\n)\s*define\s[^\n]*@""")


def _fresh_name_counter(function):
    """Whether ``function`` hands out IR local names from a counter of its own: an
    f-string starting with ``%`` formats ``next(...)`` or what the function steps by 1."""
    import ast
    stepped = {ast.unparse(n.target) for n in ast.walk(function) if isinstance(n, ast.AugAssign)
               and isinstance(n.op, ast.Add) and isinstance(n.value, ast.Constant) and n.value.value == 1}
    for n in ast.walk(function):
        if isinstance(n, ast.JoinedStr) and n.values and isinstance(n.values[0], ast.Constant) \
                and str(n.values[0].value).startswith("%"):
            if any(isinstance(v, ast.FormattedValue) and (
                    ast.unparse(v.value) in stepped or isinstance(v.value, ast.Call) and
                    isinstance(v.value.func, ast.Name) and v.value.func.id == "next") for v in n.values):
                return True
    return False


def llvm_writers(source, name="<source>"):
    """``name:line: what`` of each LLVM writer of its own in ``source``: a ``define``
    written in place, or a counter handing out fresh local names."""
    import ast
    tree = ast.parse(source)
    found = [f"{name}:{line}: a define written in place" for line, literal in _string_literals(tree, source)
             if _DEFINE_TEXT.search(literal)]
    return found + [f"{name}:{node.lineno}: a counter of fresh names ({node.name})"
                    for node in ast.walk(tree)
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _fresh_name_counter(node)]


def test_llvm_text_is_written_by_the_one_writer():
    """Every code generator (adjoint, tangent, fast-call builtins, ctypes entry, value
    stack, chunk wrappers, the Python-subset translator, train's loop) writes LLVM text
    with adcore.ir.writer: its Emitter's fresh names, labels and declarations and its
    ``define``, or a template of adcore/ir/templates; no module keeps a writer of its own."""
    found = []
    for package in ("adcore", "layers", "optim"):
        for path in sorted((ROOT / package).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name != "adcore/ir/writer.py":
                found += llvm_writers(path.read_text(), name)
    assert not found, "\n".join(found)


def test_the_writer_scan_finds_the_old_writers():
    """The scan above finds each of the writers the generators used to have."""
    old = {
        "fastcall's and loop_ir's tmp": 'def tmp(self, prefix="t"):\n    self.n += 1\n    return f"%{prefix}{self.n}"\n',
        "direct_ir's fresh": 'def fresh(self, prefix="t"):\n    return f"%{prefix}{next(self.names)}"\n',
        "value_stack's helpers": 'out = [f"""define internal void @ad.stack.grow(ptr %s) {{\nentry:\n"""]\n',
        "the builtin module": 'lines = ["declare void @Py_IncRef(ptr)", f"define ptr @{name}.state() {{"]\n',
        "the wrappers": 'text = f"\\ndefine i32 @{symbol}({params}) {{\\nentry:\\n" + body\n',
        "direct_ir's text": 'head = f"define i32 @{self.symbol}({params}) {{\\nentry:\\n"\n'}
    assert [what for what, source in old.items() if not llvm_writers(source)] == []
    new = ['ok = e.fresh("ok")', 'return e.module(f\'i32 @"{entry_name(symbol)}"({", ".join(params)})\')',
           'header = line.startswith("define ")', 'name = f"adcore_fastcall_{next(_names)}"',
           'def fresh(self, prefix):\n    self.counter += 1\n    return f"{prefix}{self.counter}"\n']
    assert [source for source in new if llvm_writers(source)] == []


def test_the_ir_templates_are_shipped_used_and_parse_once_filled():
    """Each template of adcore/ir/templates is read at import, filled by its generator and
    shipped by setup.py; the text filled in parses and verifies, and names Numba's runtime
    and status codes only through placeholders (as the ABI modules spell them)."""
    import llvmlite.binding as llvm

    from adcore.backend import native
    from adcore.calling import fastcall
    from adcore.ir import writer
    from adcore.reverse import value_stack

    files = sorted((ROOT / "adcore" / "ir" / "templates").glob("*.ll"))
    assert sorted(writer.TEMPLATES) == [f.stem for f in files]
    assert '"adcore.ir": ["templates/*.ll"]' in (ROOT / "setup.py").read_text()
    sources = "".join(p.read_text() for package in ("adcore", "layers", "optim")
                      for p in (ROOT / package).rglob("*.py"))
    for f in files:
        assert f'fill("{f.stem}"' in sources, f"{f.name} is not filled anywhere"
        text = f.read_text()
        assert "NRT_" not in text and not _STATUS_IN_IR.search(text), f.name
    filled = [
        value_stack.helpers({"double", "float", "<4 x double>", "i64", "ptr"}, {"double", "float"})
        + "\n" + "\n".join(value_stack.DECLARATIONS.values()),
        fastcall._builtin_module("adcore_template_test", ["declare void @llvm.trap()"],
                                 ["  call void @llvm.trap()", "  ret ptr null"]),
        "".join(writer.fill("powi", name=n, type=t) for n, t in native._BUILTINS.items())]
    for text in filled:
        llvm.parse_assembly(text).verify()


# -- size: no class over 300 lines, no function over 60 (IR templates are .ll files) ---------
def oversized(source, name, class_lines=300, function_lines=60):
    """``["name:line: what (n lines)"]`` for the classes and functions of ``source`` longer
    than the limits."""
    import ast
    found = []
    for node in ast.walk(ast.parse(source)):
        limit = class_lines if isinstance(node, ast.ClassDef) else \
            function_lines if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
        if limit is not None and node.end_lineno - node.lineno + 1 > limit:
            found.append(f"{name}:{node.lineno}: {node.name} ({node.end_lineno - node.lineno + 1} lines)")
    return found


def test_no_class_over_300_lines_and_no_function_over_60():
    offenders = []
    for package in ("adcore", "layers", "optim"):
        for path in sorted((ROOT / package).rglob("*.py")):
            offenders += oversized(path.read_text(), path.relative_to(ROOT).as_posix())
    assert not offenders, offenders


def test_the_size_check_finds_a_long_function():
    body = "".join(f"    x{k} = {k}\n" for k in range(61))
    assert oversized(f"def f():\n{body}", "m.py") == ["m.py:1: f (62 lines)"]
    assert oversized("class C:\n" + "".join(f"    a{k} = {k}\n" for k in range(300)), "m.py") \
        == ["m.py:1: C (301 lines)"]
