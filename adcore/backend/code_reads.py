"""What Python code reads besides its arguments: the globals its bytecode names (with the
attribute chains read off them), and whether a module, function or class is library code.
Shared by the staging guard of ``Duplicated`` programs (``layers.staging.reads``) and the
key of the on-disk gradient cache (``adcore.backend.disk_cache``)."""
import dis
import sys
import types

LIBRARIES = frozenset(sys.stdlib_module_names) | {
    "numpy", "numba", "llvmlite", "scipy", "adcore", "layers", "optim", "hypothesis", "pytest"}


def library(obj):
    """Whether ``obj`` (a module, function or class) belongs to a library, not user code."""
    name = obj.__name__ if isinstance(obj, types.ModuleType) else \
        getattr(obj, "__module__", None)
    return isinstance(name, str) and name.partition(".")[0] in LIBRARIES


def global_reads(code):
    """``{name: {attribute chains}}`` for the globals ``code`` (and the code nested in it)
    loads, each with the chains of attributes read right after loading it."""
    out = {}
    ins = list(dis.get_instructions(code))
    for k, i in enumerate(ins):
        if i.opname == "LOAD_GLOBAL":
            chain = []
            for j in ins[k + 1:]:
                if j.opname not in ("LOAD_ATTR", "LOAD_METHOD"):
                    break
                chain.append(j.argval)
            out.setdefault(i.argval, set()).add(tuple(chain))
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            for name, chains in global_reads(c).items():
                out.setdefault(name, set()).update(chains)
    return out
