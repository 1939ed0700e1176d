"""Every use of Numba's internals, in one place.

adcore reads the LLVM modules Numba builds before optimising them, generates code that
follows Numba's calling convention and array layout, and links against Numba's runtime.
None of that is Numba's public API: each fact adcore relies on is named here, and the
module refuses a Numba version it was not tested with (``ADCORE_ALLOW_NUMBA=1`` overrides
at one's own risk).
"""
import os
import re
import threading
import weakref

import numba
from numba import _helperlib
from numba.core import cgutils, codegen as _codegen, types
from numba.core.registry import CPUDispatcher, cpu_target
from numba.core.runtime import rtsys

from .errors import ADError

TESTED_NUMBA = ("0.68.",)
if not numba.__version__.startswith(TESTED_NUMBA) and os.environ.get("ADCORE_ALLOW_NUMBA") != "1":
    raise ADError(f"adcore is tested with numba {' / '.join(v + 'x' for v in TESTED_NUMBA)}, "
                  f"found {numba.__version__}: it depends on Numba's internal IR layout "
                  f"(install numba==0.68.*, or set ADCORE_ALLOW_NUMBA=1 to try anyway)")

# -- Numba's array struct ----------------------------------------------------------------
# ``{meminfo, parent, nitems, itemsize, data, shape[ndim], strides[ndim]}``: an array
# argument is passed as these fields, flattened, in this order; in memory each is 8 bytes.
ARRAY_FIELDS = ("meminfo", "parent", "nitems", "itemsize", "data")
MEMINFO, NITEMS, DATA, SHAPE = 0, 2, 4, 5     # positions among the flattened fields
FIELD_BYTES = 8


def shape_field(axis):
    """Position of ``shape[axis]`` among the flattened fields of an array."""
    return SHAPE + axis


def stride_field(ndim, axis):
    """Position of ``strides[axis]`` among the flattened fields of an ``ndim`` array."""
    return SHAPE + ndim + axis


def field_offset(position):
    """Byte offset of flattened field ``position`` in an array struct in memory."""
    return FIELD_BYTES * position


# NRT's MemInfo: refcount, destructor, destructor info, data, size, external allocator
MEMINFO_TYPE = "{ i64, ptr, ptr, ptr, i64, ptr }"
MEMINFO_DATA = 3


def flat_types(context, numba_type):
    """LLVM parameter types (``ptr`` for pointers) of one argument of ``numba_type``."""
    return ["ptr" if str(t).endswith("*") else str(t)
            for t in context.get_arg_packer([numba_type]).argument_types]


def data_position(context, array_type):
    """Position of the data pointer among an array argument's flattened fields."""
    position = context.data_model_manager[array_type]._fields.index("data")
    assert position == DATA, "Numba's array layout changed"
    return position


def array_view(context, builder, array_type, address, n):
    """Code building a 1-D C array struct of ``n`` elements at int64 ``address``
    (no meminfo: a view of memory someone else owns)."""
    elem = context.get_value_type(array_type.dtype)
    ary = context.make_array(array_type)(context, builder)
    itemsize = context.get_constant(types.intp, context.get_abi_sizeof(elem))
    context.populate_array(ary, data=builder.inttoptr(address, elem.as_pointer()),
                           shape=cgutils.pack_array(builder, [n]),
                           strides=cgutils.pack_array(builder, [itemsize]),
                           itemsize=itemsize, meminfo=None)
    return ary._getvalue()


# -- symbol names ----------------------------------------------------------------------------
LOCALS_ESCAPED = "_3clocals_3e"      # Numba's escape of ``<locals>`` (``_`` itself is not escaped)


def python_name(symbol):
    """The dotted Python name of a Numba function symbol (``_ZN8__main__3fibB2v1...`` ->
    ``__main__.fib``: Itanium nested-name parts, ABI tags ``B<n>...`` skipped,
    ``<locals>`` unescaped); any other symbol unchanged."""
    if not symbol.startswith("_ZN"):
        return symbol
    parts, k = [], 3
    while k < len(symbol) and symbol[k] != "E":
        tag = symbol[k] == "B"
        m = re.match(r"[0-9]+", symbol[k + tag:])
        if m is None:
            return symbol
        start = k + tag + len(m.group(0))
        if not tag:
            parts.append(symbol[start:start + int(m.group(0))].replace(LOCALS_ESCAPED, "<locals>"))
        k = start + int(m.group(0))
    return ".".join(parts) if parts else symbol


# Numba calls a function of a recursive cycle not yet compiled through a global holding
# its address, ``@".numba.unresolved$<symbol>"``, filled in when the library is linked.
UNRESOLVED_PREFIX = ".numba.unresolved$"


# -- the target, the runtime, the BLAS helpers ---------------------------------------------
def target_context():
    return cpu_target.target_context


def target_machine():
    """Numba's own target machine (host CPU and features)."""
    return target_context().codegen()._tm


def start_runtime():
    """Register Numba's runtime (``NRT_*``) with LLVM; Numba does it on its first compile."""
    rtsys.initialize(target_context())


def runtime_library():
    return rtsys.library


def blas_helper(name):
    """Address of Numba's C helper ``name`` (``xxgemm``, ...)."""
    return _helperlib.c_helpers[name]


# -- dispatchers -------------------------------------------------------------------------
def is_dispatcher(f):
    return isinstance(f, CPUDispatcher)


def overload(dispatcher, argtypes):
    """The compile result of ``dispatcher`` for ``argtypes`` (compiled if needed)."""
    dispatcher.compile(tuple(argtypes))
    return dispatcher.overloads[tuple(argtypes)]


def recompiled(dispatcher, **options):
    """A new dispatcher of the same Python function with the same options (and ``options``)."""
    kept = {k: v for k, v in dispatcher.targetoptions.items() if k != "nopython"}
    return numba.njit(**{**kept, **options})(dispatcher.py_func)


def is_debug(dispatcher):
    return bool(dispatcher.targetoptions.get("debug"))


# -- the unoptimised modules of code libraries ---------------------------------------------
_hook_lock = threading.Lock()
_defining_library = weakref.WeakValueDictionary()     # function symbol -> code library


def library_defining(symbol, cres):
    """The code library that defines function ``symbol``: one finalised since the hook, or
    that of an overload of an njit function ``cres`` (a compile result) calls, directly or
    not (compiled before the hook, or dropped by Numba); None if neither."""
    library = _defining_library.get(symbol)
    if library is not None:
        return library
    seen, stack = set(), [cres]
    while stack:
        for t in list(getattr(stack.pop().fndesc, "typemap", {}).values()):
            if isinstance(t, types.Dispatcher) and id(t.dispatcher) not in seen:
                seen.add(id(t.dispatcher))
                for overload in list(t.dispatcher.overloads.values()):
                    if overload.fndesc.mangled_name == symbol:
                        return overload.library
                    stack.append(overload)
    return None


def unresolved_targets(module):
    """The functions ``module`` reaches through Numba's unresolved references (recursion)."""
    return [gv.name[len(UNRESOLVED_PREFIX):] for gv in module.global_variables
            if gv.is_declaration and gv.name.startswith(UNRESOLVED_PREFIX)]


def keep_unoptimised_modules():
    """From now on every code library Numba finalises keeps a clone of its module as it
    was before Numba's module optimisation, and the list of libraries it links."""
    cls = _codegen.CPUCodeLibrary
    with _hook_lock:
        if getattr(cls.finalize, "_adcore_hook", False):
            return
        original = cls.finalize

        def finalize(self):
            self._adcore_own = self._final_module.clone()
            self._adcore_links = list(self._linking_libraries)
            for fn in self._adcore_own.functions:
                if not fn.is_declaration:
                    _defining_library[fn.name] = self
            return original(self)

        finalize._adcore_hook = True
        cls.finalize = finalize


def has_unoptimised_module(library):
    return getattr(library, "_adcore_own", None) is not None


def unoptimised_module(library):
    """A clone of ``library``'s module before optimisation (or, for a library finalised
    before the hook, the module it links with)."""
    own = getattr(library, "_adcore_own", None)
    return own.clone() if own is not None else library._get_module_for_linking().clone()


def linked_libraries(library):
    return getattr(library, "_adcore_links", [])
