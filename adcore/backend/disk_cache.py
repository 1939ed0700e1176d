"""Compiled gradients on disk, like Numba's ``cache=True``: a second process loads the
object code of a gradient without Numba's compile of the primal, the analyses or LLVM.

An entry is keyed on what identifies the program *before* compiling it: the kernel's
bytecode, constants and names, and transitively the code of the njit functions and the
values of the globals and closure cells it reads (Numba freezes those), the argument
types, activities and seed type, the registered custom rules, the source of adcore
itself, the versions of Python, numpy, Numba and llvmlite, and the CPU.  What cannot be
keyed soundly is not cached: a kernel reading a user object, a plain user function or a
class, foreign IR, or compiled code holding addresses of this process (ctypes
functions, Numba environments) or calling rule reverses compiled in it.  An object that
gives adcore its own kernel (``_adcore_capture``) is cached when it names what that
kernel depends on (``_adcore_cache_key()``: a staged program written as LLVM IR, its source).

One file per entry, ``<ADCORE_CACHE_DIR>/<2 hex>/<key>.adcore``: a line of JSON (what
rebuilds the :class:`CompiledGradient`) then the object code; the IR of the stages beside
it (``.ir.gz``, read only when asked for).  Files are written to a temporary name and
renamed, so a reader sees a whole entry or none; an entry that does not check (corrupt,
truncated, another format) is ignored with a warning and written anew.
"""
import builtins
import gzip
import hashlib
import importlib.util
import itertools
import json
import os
import re
import sys
import tempfile
import types
import warnings
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm
import numba
import numpy as np
from numba.core import types as nbtypes

from .. import numba_abi, plan
from . import native, vector_math
from ..calling import ctypes_entry
from ..calling.compiled import CompiledGradient
from .code_reads import global_reads, library
from ..rules import custom as custom_rules
from ..timings import compiling, stage

FORMAT = 2
_PROJECT = ("adcore", "layers", "optim")       # packages whose source is part of every key
_CACHED_SYMBOL = re.compile(r"adcore_(grad_\d+|fn)_[0-9a-f]{24}")   # pipeline.differentiate's
_state = {"environment": None, "rules": (-1, None), "unwritable": False}


class Uncacheable(Exception):
    """The program reads something the key cannot capture."""


def directory():
    """The cache directory (``ADCORE_CACHE_DIR``, else ``$XDG_CACHE_HOME/adcore``, else
    ``~/.cache/adcore``), or None when ``ADCORE_CACHE=0`` turns the cache off."""
    if os.environ.get("ADCORE_CACHE", "1") == "0":
        return None
    if os.environ.get("ADCORE_CACHE_DIR"):
        return Path(os.environ["ADCORE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "adcore"


# -- the key -------------------------------------------------------------------------------
def _code(code):
    """What identifies a code object's behaviour (not its file or line numbers)."""
    consts = tuple(_code(c) if isinstance(c, types.CodeType) else (type(c).__name__, _repr(c))
                   for c in code.co_consts)
    return (code.co_code.hex(), consts, code.co_names, code.co_varnames, code.co_freevars,
            code.co_cellvars, code.co_argcount, code.co_posonlyargcount,
            code.co_kwonlyargcount, code.co_flags)


def _repr(value):
    """``repr`` that does not depend on hash order (sets are sorted)."""
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(map(_repr, value))) + "}"
    if isinstance(value, tuple):
        return "(" + ", ".join(map(_repr, value)) + ")"
    return repr(value)


def _function(f, memo):
    """Key of a user or njit Python function: its code, the values of the globals and
    closure cells it reads, its defaults; transitively."""
    if id(f) in memo:
        return ("recursive", f.__qualname__)
    memo[id(f)] = f
    code = f.__code__
    reads = []
    for name, chains in sorted(global_reads(code).items()):
        if name in f.__globals__:
            value = f.__globals__[name]
        elif hasattr(builtins, name):
            value = getattr(builtins, name)
        else:
            raise Uncacheable(f"global {name!r} is not defined")
        for chain in sorted(chains):
            reads.append((name, chain, _value(_attribute(value, chain), memo)))
    cells = tuple(_value(c.cell_contents, memo) for c in f.__closure__ or ())
    defaults = _value(tuple(f.__defaults__ or ()), memo)
    return ("function", f.__qualname__, _code(code), tuple(reads), cells, defaults)


def _attribute(value, chain):
    """``value.a.b...`` as far as it goes through modules (later attributes are read off
    the object at run time, as methods are)."""
    for attr in chain:
        if not isinstance(value, types.ModuleType) or not hasattr(value, attr):
            break
        value = getattr(value, attr)
    return value


def _value(v, memo):
    """Key of a value a kernel reads (Numba freezes globals and closure cells as
    constants); :class:`Uncacheable` for what cannot be keyed by value or code."""
    if isinstance(v, (bool, int, float, complex, str, bytes, type(None))):
        return (type(v).__name__, repr(v))
    if isinstance(v, np.generic):
        return ("scalar", v.dtype.str, repr(v.item()))
    if isinstance(v, np.ndarray):
        data = hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()
        return ("array", v.dtype.str, v.shape, data)
    if isinstance(v, tuple):
        return ("tuple",) + tuple(_value(x, memo) for x in v)
    if numba_abi.is_dispatcher(v):
        options = _repr(tuple(sorted(v.targetoptions.items())))
        named = _library_name(v)
        if named is not None and named[0].partition(".")[0] in _PROJECT:   # its source is keyed
            return ("njit",) + named + (options,)
        return ("njit", _function(v.py_func, memo), options)
    if isinstance(v, CompiledGradient) and _CACHED_SYMBOL.fullmatch(v.symbol):
        return ("gradient", v.symbol)                  # its symbol names its key
    if isinstance(v, (np.dtype, nbtypes.Type)):
        return ("type", str(v))
    defn = numba_abi.intrinsic_definition(v)
    if defn is not None and library(defn):     # its code generator is library code
        return ("intrinsic", defn.__module__, defn.__qualname__)
    if isinstance(v, types.ModuleType) and library(v):     # a user module's code is not keyed
        return ("module", v.__name__)
    named = _library_name(v)
    if named is not None:
        return ("library",) + named
    raise Uncacheable(f"it reads {type(v).__name__} {getattr(v, '__qualname__', '')}")


def _library_name(v):
    """``(module, qualified name)`` of a function or class of a library that its name
    finds (so that the name identifies it), else None."""
    module = sys.modules.get(getattr(v, "__module__", None) or "")
    name = getattr(v, "__qualname__", None) or getattr(v, "__name__", None)
    if module is None or not isinstance(name, str) or not library(v):
        return None
    found = module
    for part in name.split("."):
        found = getattr(found, part, None)
    return (module.__name__, name) if found is v else None


def _environment():
    """The part of every key that names the compiler: the source of adcore (and of
    ``layers`` and ``optim``, whose njit functions are then keyed by name), the versions
    of what it builds on, the CPU."""
    if _state["environment"] is None:
        source = hashlib.sha256()
        for package in _PROJECT:
            spec = importlib.util.find_spec(package)
            for folder in (spec.submodule_search_locations or []) if spec else []:
                for relative, path in _sources(folder):
                    with open(path, "rb") as f:
                        source.update(relative.encode() + f.read())
        _state["environment"] = (FORMAT, source.hexdigest(), sys.version, np.__version__,
                                 numba.__version__, llvmlite.__version__, llvm.get_host_cpu_name(),
                                 llvm.get_host_cpu_features().flatten(), numba.config.OPT,
                                 numba.config.BOUNDSCHECK, vector_math.key())
    return _state["environment"]


def _sources(folder):
    """``(path relative to folder, path)`` of every ``.py`` file under ``folder``, sorted by
    relative path (``os.scandir``: a fifth of the time ``Path.rglob`` takes)."""
    found, stack = [], [("", folder)]
    while stack:
        prefix, directory_ = stack.pop()
        with os.scandir(directory_) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=True):
                    if entry.name != "__pycache__":
                        stack.append((prefix + entry.name + "/", entry.path))
                elif entry.name.endswith(".py") and entry.is_file():
                    found.append((prefix + entry.name, entry.path))
    return sorted(found)


def _rules():
    """Key of the registered custom rules (None: one cannot be keyed)."""
    count, key = _state["rules"]
    if count != len(custom_rules._RULES):
        try:
            memo = {}
            key = tuple((target if isinstance(target, str) else _value(target, memo),
                         _value(reverse, memo), outputs, _value(extents, memo), _value(forward, memo))
                        for target, reverse, outputs, extents, forward in custom_rules._RULES)
        except Uncacheable:
            key = None
        _state["rules"] = (len(custom_rules._RULES), key)
    return key


def key(dispatcher, argtypes, activities, ret_activity, distinct, seed_type, keep_primal=True):
    """The hex key of a gradient, or None when the cache is off or the program cannot be
    keyed soundly."""
    own_key = getattr(dispatcher, "_adcore_cache_key", None)
    if directory() is None or not (numba_abi.is_dispatcher(dispatcher) or own_key):
        return None
    if numba_abi.is_parallel(dispatcher):    # its reverse calls gradients compiled in this process
        return None
    rules = _rules()
    if rules is None:
        return None
    try:
        program = own_key() if own_key else _value(dispatcher, {})
    except Uncacheable:
        return None
    parts = (_environment(), rules, program, tuple(str(t) for t in argtypes),
             tuple(a.__name__ for a in activities), getattr(ret_activity, "__name__", None),
             distinct, str(seed_type)) + (() if keep_primal else ("no primal",)) + \
        tuple(sorted(plan.disabled()))
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def cached(dispatcher, argtypes, activities, ret_activity, distinct, seed_type, compile_, keep_primal=True):
    """The gradient from the disk cache, else ``compile_(name)`` (``name`` the key, for
    the symbol; "" when uncached) stored there."""
    digest = key(dispatcher, argtypes, activities, ret_activity, distinct, seed_type, keep_primal)
    if digest is not None and _path(digest, ".adcore").exists():
        with compiling(getattr(dispatcher, "__name__", str(dispatcher))):
            with stage("load from disk"):
                grad = load(digest, argtypes, seed_type)
        if grad is not None:
            return grad
    grad = compile_(digest or "")
    if digest is not None:
        store(digest, grad)
    return grad


# -- entries ---------------------------------------------------------------------------------
def _path(digest, suffix):
    return directory() / digest[:2] / (digest + suffix)


def _scalar_type(name):
    t = getattr(nbtypes, name, None)
    if not isinstance(t, (nbtypes.Number, nbtypes.Boolean)):
        raise ValueError(f"not a scalar type: {name}")
    return t


def _read(digest, check):
    """``(meta, object code)`` of entry ``digest``; None when there is none, or (with a
    warning) when it does not check or ``check(meta)`` raises ``ValueError``."""
    path = _path(digest, ".adcore")
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        header, _, obj = data.partition(b"\n")
        meta = json.loads(header)
        if meta["format"] != FORMAT or meta["key"] != digest or len(obj) != meta["bytes"] or \
                hashlib.sha256(obj).hexdigest() != meta["sha256"]:
            raise ValueError("it does not check")
        if not ctypes_entry.callable_from_python(meta["flat"], meta["fields"]) or \
                len(meta["kinds"]) != len(meta["flat"]):
            raise ValueError("its arguments do not match")
        check(meta)
    except (ValueError, KeyError, TypeError, IndexError) as err:
        warnings.warn(f"adcore: ignoring the cache entry {path} ({err}); it will be written anew",
                      stacklevel=5)
        return None
    return meta, obj


def load(digest, argtypes, seed_type):
    """The cached :class:`CompiledGradient` of key ``digest`` (for these argument and
    seed types), or None."""
    def check(meta):
        nonlocal result, stub_types, same_layout
        if meta["kind"] != "gradient":
            raise ValueError("it is not a gradient")
        result = nbtypes.Tuple(tuple(_scalar_type(t) for t in meta["result"]))
        seed = [seed_type] if seed_type is not None else []
        stub_types = list(argtypes) + [argtypes[k] for k in meta["shadowed"]] + seed
        same_layout = [tuple(s) for s in meta["same_layout"]]
        if len(meta["flat"]) != len(stub_types):
            raise ValueError("its arguments do not match")

    result = stub_types = same_layout = None
    entry = _read(digest, check)
    if entry is None:
        return None
    meta, obj = entry
    shadowed = meta["shadowed"]
    if native.load_object(obj, meta["symbol"], meta["externals"]) is None or \
            native.entry_address(meta["symbol"]) is None:
        return None
    call = ctypes_entry.EntryCall(native.entry_address(meta["symbol"]), meta["flat"], meta["fields"],
                                  meta["kinds"], same_layout, ctypes_entry.integer_ranges(stub_types))

    def irs():
        try:
            with gzip.open(_path(digest, ".ir.gz"), "rt") as f:
                return tuple(json.load(f))
        except (OSError, ValueError, EOFError):
            return (None, None, None)

    return CompiledGradient(
        meta["pyname"], meta["symbol"], meta["has_primal"], shadowed, meta["written"], meta["distinct"], irs, call,
        (stub_types, result, same_layout))


def _portable(parts):
    """Whether the object code can run in another process (it links only against
    symbols every process has, and holds no address of this one) and be called through
    ctypes (its arguments are arrays and scalars)."""
    return parts.compiled.object is not None and parts.kinds is not None and \
        _links_portably(parts.compiled)


def _links_portably(compiled):
    """Whether object code links only against symbols every process has, or gradients
    from the disk cache (their symbols name their key), and holds no address of this one."""
    return all(not name.startswith("adcore_") or _CACHED_SYMBOL.fullmatch(name)
               for name in compiled.externals) and not compiled.holds_process_addresses and \
        "numba.dynamic.globals" not in compiled.ir and "NumbaEnv" not in compiled.ir


def store(digest, grad):
    """Write ``grad`` (fresh from the pipeline) under key ``digest`` when it is portable.
    A directory that cannot be written turns writing off, with one warning."""
    parts = grad.native_parts
    if _state["unwritable"] or not _portable(parts):
        return
    try:
        result = [str(t) for t in parts.result.types]
        for name, t in zip(result, parts.result.types):
            if _scalar_type(name) != t:
                return
    except ValueError:
        return
    _write_entry(digest, parts.compiled, parts.symbol, parts.flat, parts.fields, parts.kinds,
                 dict(kind="gradient", result=result, same_layout=parts.same_layout, pyname=grad.pyname,
                      has_primal=grad.has_primal, shadowed=grad.shadowed, written=grad.written,
                      distinct=grad.distinct), grad.irs())


def _write_entry(digest, compiled, symbol, flat, fields, kinds, meta, irs):
    """Write entry ``digest``: ``compiled``'s object code and externals, the symbol, the
    LLVM types of the parameters and result, the arrays the entry from Python takes
    (``kinds``), ``meta``, and the IR texts ``irs``."""
    obj = compiled.object
    meta = dict(meta, format=FORMAT, key=digest, bytes=len(obj),
                sha256=hashlib.sha256(obj).hexdigest(), symbol=symbol,
                externals=compiled.externals, flat=flat, fields=fields, kinds=kinds)
    try:
        _write(_path(digest, ".ir.gz"), gzip.compress(json.dumps(irs).encode(), 1))
        _write(_path(digest, ".adcore"), json.dumps(meta).encode() + b"\n" + obj)
    except OSError as err:
        _state["unwritable"] = True
        warnings.warn(f"adcore: cannot write the gradient cache in {directory()} ({err}); "
                      f"compiled gradients are kept in memory only", stacklevel=5)


def _write(path, data):
    """Write ``data`` to ``path`` atomically (a temporary file renamed over it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


# -- native functions that call gradients (``train``'s loop) -------------------------------
_functions = itertools.count()


def _load_function(digest, nargs):
    def check(meta):
        if meta["kind"] != "function" or len(meta["flat"]) != nargs:
            raise ValueError("it is not this function")

    entry = _read(digest, check)
    if entry is None:
        return None
    meta, obj = entry
    if native.load_object(obj, meta["symbol"], meta["externals"]) is None or \
            native.entry_address(meta["symbol"]) is None:
        return None
    return ctypes_entry.EntryCall(native.entry_address(meta["symbol"]), meta["flat"], meta["fields"],
                                  meta["kinds"])


def key_of(value):
    """The key of a value generated code depends on (an njit kernel, say);
    :class:`Uncacheable` when it cannot be keyed."""
    return _value(value, {})


def native_function(parts, flat, fields, compile_, name):
    """The :class:`ctypes_entry.EntryCall` of a native function that ``compile_(symbol)``
    compiles (a :class:`native.Compiled`: Numba's calling convention, scalar parameters of
    the LLVM types ``flat`` (one list per parameter), a result struct of LLVM ``fields``),
    kept in the disk cache under the key of ``parts``: everything its code depends on
    beside adcore's source and the environment (None: not kept).  ``name`` names it in
    the compile report."""
    kinds = [None] * len(flat)
    digest = None
    if parts is not None and directory() is not None:
        digest = hashlib.sha256(repr((_environment(), "native function", parts)).encode()).hexdigest()
        if _path(digest, ".adcore").exists():
            with compiling(name), stage("load from disk"):
                loaded = _load_function(digest, len(flat))
            if loaded is not None:
                return loaded
    symbol = f"adcore_fn_{digest[:24]}" if digest is not None else f"adcore_fn_local_{next(_functions)}"
    if not native.is_defined(symbol):       # else compiled here before
        with compiling(name):
            compiled = compile_(symbol)
        if digest is not None and not _state["unwritable"] and compiled.object is not None and \
                _links_portably(compiled):
            _write_entry(digest, compiled, symbol, flat, fields, kinds, dict(kind="function"),
                         (None, None, compiled.ir))
    return ctypes_entry.EntryCall(native.entry_address(symbol), flat, fields, kinds)
