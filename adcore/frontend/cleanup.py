"""adcore's own cleanup pipeline: from Numba's unoptimised module to clean scalar SSA.

Every function but the kernel is internalised and marked ``alwaysinline``, except the
recursive ones (:mod:`adcore.frontend.callgraph`), which stay calls; then SROA, instcombine, GVN and CFG
simplification run with no vectorisation and no unrolling, and loops are put in
loop-simplify and LCSSA form (the differentiator relies on both).  Unnamed values
are given names so that the IR text can be copied and rewritten.
"""
import re

import llvmlite.binding as llvm

from . import callgraph
from ..numba_abi import UNRESOLVED_PREFIX, target_machine, unresolved_targets


def _pass_manager(*passes):
    pm = llvm.create_new_module_pass_manager()
    for name in passes:
        getattr(pm, f"add_{name}_pass")()
    return pm


def _run(module, *passes):
    tm = target_machine()
    pto = llvm.create_pipeline_tuning_options(speed_level=2)
    pb = llvm.create_pass_builder(tm, pto)
    _pass_manager(*passes).run(module, pb)


def resolve_recursive_references(module):
    """``module`` with each of Numba's unresolved references to a function it defines (made
    for mutual recursion, :data:`adcore.numba_abi.UNRESOLVED_PREFIX`) made a constant
    holding that function, so that the calls through it become direct calls (a new module
    when there are any)."""
    defined = {fn.name for fn in module.functions if not fn.is_declaration}
    targets = {t: t for t in unresolved_targets(module) if t in defined}
    if not targets:
        return module
    resolved = references_made_constants(module, targets)
    _run(resolved, "instruction_combine")     # loads of the constants: direct calls
    return resolved


def _attributes(fn):
    return {a for group in fn.attributes for a in group.split()}


def debug_calls_made_inlinable(module, kept):
    """``module``, or a new one in which Numba's functions compiled with ``debug=True``
    (marked ``noinline`` only to help a debugger) lose ``noinline``, so that they inline like
    any other; ``kept`` (functions that stay calls) and those marked ``optnone`` keep it."""
    debug = {fn.name for fn in module.functions
             if not fn.is_declaration and fn.name.startswith("_ZN") and fn.name not in kept
             and b"noinline" in _attributes(fn) and b"optnone" not in _attributes(fn)}
    if not debug:
        return module
    text = str(module)
    groups = dict(re.findall(r"^attributes #([0-9]+) = \{ ([^}]*) \}$", text, re.M))
    renumbered, extra = {}, []

    def inlinable(m):
        group = m.group(4)
        if m.group(2).strip('"') not in debug or group not in groups:
            return m.group(0)
        if group not in renumbered:
            words = [w for w in groups[group].split() if w != "noinline"]
            renumbered[group] = f"#{max(map(int, groups)) + 1 + len(extra)}" if words else ""
            if words:
                extra.append(f"attributes {renumbered[group]} = {{ {' '.join(words)} }}")
        return f"{m.group(1)}{m.group(3)}{renumbered[group]}{m.group(5)}"
    text = re.sub(r"^(define [^@]*@(\S+?)\(.*\))( .*?)#([0-9]+)((?: [^#]*)?\{)$", inlinable, text,
                  flags=re.M)
    return llvm.parse_assembly(text + "\n" + "\n".join(extra) + "\n")


def references_made_constants(module, targets):
    """A new module: ``module`` with Numba's unresolved reference to each function of
    ``targets`` (``{target: function}``) made a constant holding ``function``."""
    text = str(module)
    for target, function in targets.items():
        ref = re.escape(f'@"{UNRESOLVED_PREFIX}{target}"')
        text = re.sub(ref + r" = external [^\n]*global ptr[^\n]*",
                      lambda _: f'@"{UNRESOLVED_PREFIX}{target}" = internal constant ptr @{function}', text)
    return llvm.parse_assembly(text)


def clean(module, symbol, keep=()):
    """Reduce ``module`` to the cleaned function ``symbol`` (returned; ``module`` is modified
    in place unless Numba's references for recursion are resolved); functions named in
    ``keep`` (those with custom rules) and recursive functions stay calls."""
    tm = target_machine()
    module = resolve_recursive_references(module)
    recursive = callgraph.kept_as_calls(module)
    module = debug_calls_made_inlinable(module, set(keep) | recursive | {symbol})
    module.triple = tm.triple
    module.data_layout = str(tm.target_data)
    for fn in module.functions:
        if fn.is_declaration:
            continue
        if fn.name == symbol:
            fn.linkage = "external"
        else:
            fn.linkage = "internal"
            if fn.name in keep or fn.name in recursive:
                fn.add_function_attribute("noinline")
            elif not any(b"noinline" in a.split() for a in fn.attributes):
                fn.add_function_attribute("alwaysinline")
    for gv in module.global_variables:
        if not gv.is_declaration and gv.linkage != llvm.Linkage.internal:
            gv.linkage = "internal"
    _run(module, "always_inliner", "global_dead_code_eliminate", "strip_dead_prototype")
    _run(module, "sroa", "instruction_combine", "simplify_cfg", "sroa", "new_gvn",
         "instruction_combine", "simplify_cfg", "aggressive_dce",
         "global_dead_code_eliminate", "strip_dead_prototype")
    _run(module, "loop_simplify", "lcssa", "instruction_namer")
    module.verify()
    return module
