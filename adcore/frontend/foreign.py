"""Differentiable functions from foreign LLVM IR (clang, rustc, hand-written).

``from_llvm(ir_text, name)`` parses the module (typed pointers are rewritten to opaque
``ptr`` first) and returns a :class:`ForeignFunction`.  For each combination of argument
types it generates a wrapper with Numba's calling convention,
``i32 @adcore_foreign_<name>_<n>(ptr %retptr, ptr %excinfo, <flattened arguments>)``,
that passes array data pointers and converted scalars to ``name`` and stores its result
in ``retptr``.  The wrapper is JIT-compiled for direct calls and handed to the
differentiator through ``_adcore_capture`` like a captured Numba kernel.
"""
import itertools
import re
import threading

import llvmlite.binding as llvm
import numba
from numba.core import types as nbtypes
from numba.np.numpy_support import as_dtype

from .. import numba_abi
from ..backend import native
from ..calling.njit_stub import make_stub
from .capture import Kernel
from .cleanup import clean
from ..errors import ADError
from ..ir.writer import Emitter
from ..numba_abi import flat_types, target_machine

_counter = itertools.count()

# -- typed pointers -> opaque pointers ---------------------------------------------------
# Outside strings and comments, ``*`` only ends a pointer type in LLVM assembly.
_LITERAL = re.compile(r'"[^"]*"|;[^\n]*')                 # strings and comments
_TOKEN = re.compile(r"\x00\d+\x00|[-\w.$%@!#]+|\s+|.", re.S)
_OPENER = {")": "(", "]": "[", "}": "{", ">": "<"}
_NOINLINE = re.compile(r'(?<![-\w.$%@!#"])\b(?:noinline|optnone)\b')
_EMPTY_GROUP = re.compile(r"^(attributes\s+#\d+\s*=\s*)\{\s*\}", re.M)   # LLVM refuses `{ }`


def _skip_space(out, k):
    while k >= 0 and out[k].isspace():
        k -= 1
    return k


def _group_start(out, k):
    """Index of the bracket that opens the group closed at ``out[k]``."""
    depth = 0
    while True:
        if out[k] in _OPENER:
            depth += 1
        elif out[k] in _OPENER.values():
            depth -= 1
            if depth == 0:
                return k
        k -= 1


def _type_start(out, k):
    """Index of the first token of the type whose last token is ``out[k]``."""
    k = _skip_space(out, k)
    if out[k] not in _OPENER:
        return k - 1 if out[k].startswith("\x00") and out[k - 1] == "%" else k
    k = _group_start(out, k)
    return _type_start(out, k - 1) if out[k] == "(" else k   # a function type: return type first


def _pointer(out):
    """Replace the pointee type at the end of ``out`` (before a ``*``) by ``ptr``."""
    k = _skip_space(out, len(out) - 1)
    space = ""
    if out[k] == ")":
        open_ = _group_start(out, k)
        before = _skip_space(out, open_ - 1)
        if out[before] == "addrspace":
            space = " " + "".join(out[before:k + 1])
            k = before - 1
    del out[_type_start(out, k):]
    out.append("ptr" + space)


def opaque_pointers(text):
    """``text`` with every typed pointer type spelled ``ptr`` (and ``noinline`` and
    ``optnone`` dropped, so that the wrapper can inline the function)."""
    literals = []

    def hide(m):
        literals.append(m.group(0))
        return f"\x00{len(literals) - 1}\x00"

    out = []
    for token in _TOKEN.findall(_LITERAL.sub(hide, text)):
        if token == "*":
            _pointer(out)
        else:
            out.append(token)
    code = _EMPTY_GROUP.sub(r'\1{ "adcore-inlinable" }', _NOINLINE.sub("", "".join(out)))
    return re.sub(r"\x00(\d+)\x00", lambda m: literals[int(m.group(1))], code)


# -- the foreign function's signature ------------------------------------------------------
_GLOBAL = re.compile(r"^[-a-zA-Z$._][-a-zA-Z$._0-9]*$")
_CALLING_CONV = re.compile(r"\b(fastcc|coldcc|tailcc|swiftcc|swifttailcc|ghccc|cc\s+\d+|"
                           r"x86_\w+cc|preserve_\w+cc|intel_ocl_bicc|win64cc|anyregcc)\b")
_ELEMENT = {"double": ("f", 8), "float": ("f", 4), "half": ("f", 2), "i1": ("b", 1),
            "i8": ("iub", 1), "i16": ("iu", 2), "i32": ("iu", 4), "i64": ("iu", 8)}


def _global_ref(name):
    if _GLOBAL.match(name):
        return "@" + name
    return '@"' + name.replace("\\", "\\5C").replace('"', "\\22") + '"'


class Param:
    """One parameter: its LLVM type, kind (``ptr``, ``int`` or ``float``), a label for
    messages and, for pointers, the one scalar type the function reads or writes
    through it (``element``, None when unknown)."""

    def __init__(self, index, arg):
        self.index, self.type = index, str(arg.type)
        self.label = f"argument {index} (%{arg.name}: {self.type})" if arg.name else \
            f"argument {index} ({self.type})"
        if self.type == "ptr":
            self.kind = "ptr"
        elif re.fullmatch(r"i\d+", self.type):
            self.kind = "int"
        elif self.type in ("double", "float"):
            self.kind = "float"
        else:
            raise ADError(f"{self.label}: unsupported parameter type {self.type} "
                          f"(only pointers, integers, float and double)")
        self.element = None

    def __repr__(self):
        return self.label


def _derived_pointers(fn, arg):
    """``arg`` and every pointer ``fn`` computes from it by GEPs, casts, phis and selects."""
    derived, grown = {arg}, True
    while grown:
        grown = False
        for block in fn.blocks:
            for ins in block.instructions:
                if ins in derived or ins.opcode not in ("getelementptr", "bitcast", "phi",
                                                        "select", "addrspacecast"):
                    continue
                ops = list(ins.operands)
                ops = ops if ins.opcode in ("phi", "select") else ops[:1]
                if any(o in derived for o in ops):
                    derived.add(ins)
                    grown = True
    return derived


def _element_type(fn, arg):
    """The scalar type of every load and store through ``arg``, if there is exactly one."""
    derived = _derived_pointers(fn, arg)
    seen = set()
    for block in fn.blocks:
        for ins in block.instructions:
            ops = list(ins.operands)
            if ins.opcode == "load" and ops[0] in derived:
                seen.add(str(ins.type))
            elif ins.opcode == "store" and ops[1] in derived:
                seen.add(str(ops[0].type))
    seen = {re.sub(r"^<\d+ x (.*)>$", r"\1", t) for t in seen}
    return seen.pop() if len(seen) == 1 else None


_ATTACHMENT = re.compile(r",\s*!(?!dbg\b)[-a-zA-Z_.0-9]+\s+!(?:[0-9]+|\{[^}]*\})")


def _parse(text):
    """The module of ``text`` with its instructions' metadata attachments other than
    source locations (``!dbg``) dropped: the aliasing and range facts they state are
    hints adcore's generated code must not inherit from a renumbered copy."""
    try:
        module = llvm.parse_assembly(_ATTACHMENT.sub("", text))
        module.verify()
    except RuntimeError as e:
        raise ADError(f"from_llvm: the LLVM IR is invalid: {str(e).strip()}") from None
    return module


def _lookup(module, name):
    defined = sorted(f.name for f in module.functions if not f.is_declaration)
    try:
        fn = module.get_function(name)
    except NameError:
        fn = None
    if fn is None or fn.is_declaration:
        what = "is only declared" if fn is not None else "is not in the module"
        raise ADError(f"from_llvm: function {name!r} {what}; defined functions: "
                      f"{', '.join(defined) or 'none'}")
    if fn.global_value_type.is_function_vararg:
        raise ADError(f"from_llvm: {name!r} is variadic; only fixed arguments are supported")
    return fn


# -- argument types -> wrapper ---------------------------------------------------------------
def _convert(e, value, src, param, signed):
    """``value`` of LLVM type ``src`` turned into ``param``'s type (written by Emitter ``e``)."""
    dst = param.type
    if src == dst:
        return value
    if param.kind == "int":
        op = "trunc" if int(src[1:]) > int(dst[1:]) else ("sext" if signed else "zext")
    elif src.startswith("i"):
        op = "sitofp" if signed else "uitofp"
    else:
        op = "fptrunc" if src == "double" else "fpext"
    return e(f"{op} {src} {value} to {dst}", "c")


class ForeignFunction:
    """A function of a foreign LLVM module: callable on numpy arrays and Python numbers,
    and differentiable with ``adcore.autodiff`` / ``adcore.gradient``."""

    def __init__(self, ir_text, name):
        if not isinstance(ir_text, str) or not isinstance(name, str):
            raise ADError("from_llvm(ir_text, name) takes two strings")
        self.name = name
        self.ir = opaque_pointers(ir_text)
        module = _parse(self.ir)
        fn = _lookup(module, name)
        self.params = [Param(k, a) for k, a in enumerate(fn.arguments)]
        self.ret = str(fn.global_value_type.get_function_return())
        if self.ret not in ("void", "double", "float") and not re.fullmatch(r"i\d+", self.ret):
            raise ADError(f"from_llvm: {name!r} returns {self.ret}; only void, float, double "
                          f"and integers are supported")
        header = str(fn).split("@", 1)[0]
        cc = _CALLING_CONV.search(header[header.rfind("define"):])
        self.calling_conv = cc.group(1) + " " if cc else ""
        cleaned = clean(module, name).get_function(name)      # callees inlined, no allocas
        for p, a in zip(self.params, cleaned.arguments):
            if p.kind == "ptr":
                p.element = _element_type(cleaned, a)
        self._context = numba_abi.target_context()
        self._stubs = {}
        self._lock = threading.Lock()

    def __repr__(self):
        return f"<adcore foreign function {self.name}({', '.join(p.type for p in self.params)})" \
               f" -> {self.ret}>"

    @property
    def restype(self):
        """The Numba type of the result."""
        return {"void": nbtypes.none, "double": nbtypes.float64,
                "float": nbtypes.float32}.get(self.ret, nbtypes.int64)

    # -- checking --------------------------------------------------------------------------
    def _check(self, argtypes):
        if len(argtypes) != len(self.params):
            raise ADError(f"{self.name} takes {len(self.params)} arguments "
                          f"({', '.join(p.type for p in self.params)}), got {len(argtypes)}")
        for p, t in zip(self.params, argtypes):
            self._check_one(p, t)

    def _check_one(self, p, t):
        where = f"{self.name}: {p.label}"
        if p.kind == "ptr":
            if not isinstance(t, nbtypes.Array):
                raise ADError(f"{where} is a pointer and takes a numpy array, got {t}")
            if t.layout not in ("C", "F"):
                raise ADError(f"{where}: the array is not contiguous; pass a contiguous copy "
                              f"(numpy.ascontiguousarray)")
            dtype = as_dtype(t.dtype)
            kinds, size = _ELEMENT.get(p.element, (None, None))
            if kinds and (dtype.kind not in kinds or dtype.itemsize != size):
                raise ADError(f"{where}: the function accesses {p.element} through it, "
                              f"but the array is {dtype}")
        elif isinstance(t, nbtypes.Array):
            raise ADError(f"{where} is a scalar and takes a Python {p.kind}, got an array {t}")
        elif p.kind == "int" and not isinstance(t, (nbtypes.Integer, nbtypes.Boolean)):
            raise ADError(f"{where} takes an integer, got {t}")
        elif p.kind == "float" and not isinstance(t, (nbtypes.Float, nbtypes.Integer)):
            raise ADError(f"{where} takes a float, got {t}")

    # -- code generation -----------------------------------------------------------------
    def _wrapper(self, argtypes, symbol):
        """IR text of the Numba-ABI wrapper ``symbol`` calling the foreign function."""
        e, params, args = Emitter(), ["ptr %retptr", "ptr %excinfo"], []
        for p, t in zip(self.params, argtypes):
            flat = flat_types(self._context, t)
            names = [f"%a{p.index}.{j}" for j in range(len(flat))]
            params += [f"{ty} {n}" for ty, n in zip(flat, names)]
            if p.kind == "ptr":
                data = numba_abi.data_position(self._context, t)
                args.append(f"ptr {names[data]}")
                continue
            signed = isinstance(t, nbtypes.Integer) and t.signed
            args.append(f"{p.type} {_convert(e, names[0], flat[0], p, signed)}")
        call = f"{self.calling_conv}{self.ret} {_global_ref(self.name)}({', '.join(args)})"
        if self.ret == "void":
            e.line(f"call {call}")
        else:
            value, rt = e(f"call {call}", "r"), str(self._context.get_value_type(self.restype))
            if self.ret.startswith("i") and self.ret != "i64":
                width = int(self.ret[1:])
                op = "zext" if width == 1 else ("trunc" if width > 64 else "sext")
                value = e(f"{op} {self.ret} {value} to i64", "r64")
            e.line(f"store {rt} {value}, ptr %retptr")
        e.line(f"ret i32 {numba_abi.STATUS_OK}")
        return "\n" + e.define(f"i32 @{symbol}({', '.join(params)})")

    def _module(self, argtypes):
        """A fresh module: the foreign IR plus a wrapper for ``argtypes``; and its symbol."""
        self._check(argtypes)
        tag = re.sub(r"[^A-Za-z0-9_]", "_", self.name)
        symbol = f"adcore_foreign_{tag}_{next(_counter)}"
        module = _parse(self.ir + self._wrapper(argtypes, symbol))
        tm = target_machine()
        module.triple, module.data_layout = tm.triple, str(tm.target_data)
        return module, symbol

    def _adcore_capture(self, argtypes):
        """The wrapped function as a :class:`adcore.frontend.capture.Kernel` for the differentiator."""
        module, symbol = self._module(tuple(argtypes))
        return Kernel(tuple(argtypes), self.restype, symbol, module, self.name, self._context)

    # -- direct calls ----------------------------------------------------------------------
    def _stub(self, argtypes):
        stub = self._stubs.get(argtypes)
        if stub is None:
            with self._lock:
                stub = self._stubs.get(argtypes)
                if stub is None:
                    stub = self._stubs[argtypes] = self._compile(argtypes)
        return stub

    def _compile(self, argtypes):
        """JIT-compile the wrapper for ``argtypes`` (everything else internal); its stub."""
        module, symbol = self._module(argtypes)
        for g in itertools.chain(module.functions, module.global_variables):
            if not g.is_declaration and g.name != symbol:
                g.linkage = "internal"
        native.compile_ir(str(module), symbol, self.name)
        return make_stub(symbol, argtypes, self.restype)

    def __call__(self, *values):
        """Run the function: arrays are passed by data pointer (and modified in place)."""
        argtypes = []
        for k, v in enumerate(values):
            try:
                argtypes.append(numba.typeof(v))
            except ValueError:
                raise ADError(f"{self.name}: argument {k} of type {type(v).__name__} is "
                              f"neither a numpy array nor a number") from None
        return self._stub(tuple(argtypes))(*values)


def from_llvm(ir_text, name):
    """A differentiable function object for the function ``name`` defined in the LLVM IR
    ``ir_text`` (typed or opaque pointers).  Pointer parameters take numpy arrays,
    integer parameters Python ints, float and double parameters Python floats."""
    return ForeignFunction(ir_text, name)
