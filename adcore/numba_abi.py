"""Every use of Numba's internals, in one place.

adcore reads the LLVM modules Numba builds before optimising them, generates code that
follows Numba's calling convention and array layout, and links against Numba's runtime.
None of that is Numba's public API: each fact adcore relies on is named here, and the
module refuses a Numba version it was not tested with (``ADCORE_ALLOW_NUMBA=1`` overrides
at one's own risk).
"""
import contextlib
import os
import re
import threading
import weakref

import llvmlite.binding as llvm
import numba
from numba.core import callconv, cgutils, codegen as _codegen, compiler, dispatcher as _dispatcher, ir as numba_ir, types
from numba.core.compiler_lock import global_compiler_lock
from numba.core.environment import lookup_environment
from numba.core.extending import _Intrinsic, intrinsic
from numba.np.ufunc.parallel import _iget_thread_id as thread_id   # njit: the running thread's number
from numba.np.ufunc.parallel import _launch_threads
from numba.core.registry import CPUDispatcher, cpu_target
from numba.core.runtime import _nrt_python as _nrt, rtsys

from .errors import ADError
from .known_functions import RUNTIME_PREFIX

TESTED_NUMBA = ("0.68.",)
if not numba.__version__.startswith(TESTED_NUMBA) and os.environ.get("ADCORE_ALLOW_NUMBA") != "1":
    raise ADError(f"adcore is tested with numba {' / '.join(v + 'x' for v in TESTED_NUMBA)}, "
                  f"found {numba.__version__}: it depends on Numba's internal IR layout "
                  f"(install numba==0.68.*, or set ADCORE_ALLOW_NUMBA=1 to try anyway)")

# -- Numba's array struct ----------------------------------------------------------------
# ``{meminfo, parent, nitems, itemsize, data, shape[ndim], strides[ndim]}``: an array
# argument is passed as these fields, flattened, in this order; in memory each is 8 bytes.
ARRAY_FIELDS = ("meminfo", "parent", "nitems", "itemsize", "data")
MEMINFO, NITEMS, ITEMSIZE, DATA, SHAPE = 0, 2, 3, 4, 5     # positions among the flattened fields
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

# -- Numba's calling convention: the status ----------------------------------------------
# A function ``i32 f(ptr retptr, ptr excinfo, <flattened arguments>)`` returns one of
# Numba's status codes (``numba.core.callconv.RETCODE_*``), or the number of a static
# exception (from ``FIRST_USER_EXCEPTION`` on); OK and NONE are the successes.
STATUS_OK = 0                      # returned, its result in the return slot
STATUS_PYTHON_EXCEPTION = -1       # a Python exception is set
STATUS_NONE = -2                   # returned None
STATUS_STOP_ITERATION = -3         # a generator is exhausted
FIRST_USER_EXCEPTION = 1           # a static exception, described by the excinfo struct
assert (STATUS_OK, STATUS_PYTHON_EXCEPTION, STATUS_NONE, STATUS_STOP_ITERATION, FIRST_USER_EXCEPTION) == \
    tuple(c.constant for c in (callconv.RETCODE_OK, callconv.RETCODE_EXC, callconv.RETCODE_NONE,
                               callconv.RETCODE_STOPIT, callconv.RETCODE_USEREXC)), "Numba's status codes changed"
# adcore's own statuses, far below Numba's, from the entries it compiles in front of such a
# function (:mod:`adcore.calling.ctypes_entry`, :mod:`adcore.calling.fastcall`): argument
# ``k`` is not what the function was compiled for (``STATUS_WRONG_ARGUMENT - k``), the
# arrays of pair ``q`` differ in shape or strides (``STATUS_WRONG_LAYOUT - q``).
STATUS_WRONG_ARGUMENT = -1000
STATUS_WRONG_LAYOUT = -2000
# Numba's excinfo struct of a static exception: byte offsets of the pointer to the pickled
# ``(class, arguments, location...)`` and of its i32 length
EXCINFO_PICKLED, EXCINFO_PICKLED_SIZE = 0, 8

# -- CPython's and numpy's objects (64-bit hosts; numpy 1.x and 2.x alike) ------------------
# byte offsets read by the code adcore compiles to take Python objects directly
PYOBJECT_TYPE = 8                              # PyObject's ob_type
PYOBJECT_VALUE = 16                            # the value of a float or numpy scalar object
PYTUPLE_SIZE, PYTUPLE_ITEMS = 16, 24           # PyTupleObject's ob_size and ob_item
# PyArrayObject's data, nd, dimensions, strides, descr and flags
NDARRAY_DATA, NDARRAY_NDIM, NDARRAY_DIMS, NDARRAY_STRIDES, NDARRAY_DESCR, NDARRAY_FLAGS = 16, 24, 32, 40, 56, 64
NDARRAY_DIM_BYTES = 8                          # an npy_intp of dimensions and strides
DESCR_BYTEORDER, DESCR_TYPE_NUM = 26, 28       # PyArray_Descr's byteorder and type_num
NPY_ARRAY_C_CONTIGUOUS, NPY_ARRAY_F_CONTIGUOUS = 0x1, 0x2
NPY_ARRAY_ALIGNED, NPY_ARRAY_WRITEABLE = 0x100, 0x400
METH_FASTCALL = 0x80                           # PyMethodDef's ml_flags of a fastcall builtin


def flat_types(context, numba_type):
    """LLVM parameter types (``ptr`` for pointers) of one argument of ``numba_type``."""
    return ["ptr" if str(t).endswith("*") else str(t)
            for t in context.get_arg_packer([numba_type]).argument_types]


def argument_starts(context, argtypes):
    """``(starts, end)``: the position of each argument's first flattened field among the
    parameters of a Numba-ABI function (after its return slot and excinfo), and the end."""
    starts, pos = [], 2
    for t in argtypes:
        starts.append(pos)
        pos += len(flat_types(context, t))
    return starts, pos


def data_position(context, array_type):
    """Position of the data pointer among an array argument's flattened fields."""
    position = context.data_model_manager[array_type]._fields.index("data")
    assert position == DATA, "Numba's array layout changed"
    return position


def array_view(context, builder, array_type, address, shape):
    """Code building a C-contiguous array struct of ``shape`` (intp values, one per axis)
    at int64 ``address`` (no meminfo: a view of memory someone else owns)."""
    elem = context.get_value_type(array_type.dtype)
    ary = context.make_array(array_type)(context, builder)
    itemsize = context.get_constant(types.intp, context.get_abi_sizeof(elem))
    strides = [itemsize]
    for n in reversed(shape[1:]):
        strides.insert(0, builder.mul(strides[0], n))
    context.populate_array(ary, data=builder.inttoptr(address, elem.as_pointer()),
                           shape=cgutils.pack_array(builder, list(shape)),
                           strides=cgutils.pack_array(builder, strides),
                           itemsize=itemsize, meminfo=None)
    return ary._getvalue()


# Numba's helpers that only build an error message and raise (a slice assignment's shape
# check): kept as calls, unoptimised, so the string code inside them never reaches the
# differentiator and costs no optimisation time.
RAISING_HELPERS = ("ol_raise_with_shape_context_cpu",)


def only_raises(symbol):
    """True for the compiled helper functions listed in ``RAISING_HELPERS``."""
    return symbol.startswith("_ZN5numba") and any(h in symbol for h in RAISING_HELPERS)




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


# -- the target and the runtime ---------------------------------------------
@contextlib.contextmanager
def untimed_llvm_calls():
    """llvmlite's calls without the callbacks on its lock (Numba times every call with an
    event, most of the cost of the tens of thousands of small calls reading a function
    makes).  The lock is held throughout, so no other thread's call loses its callbacks."""
    lock = getattr(llvm.ffi.lib, "_lock", None)
    if not hasattr(lock, "_cblist") or not hasattr(lock, "_lock"):     # another llvmlite
        yield
        return
    with lock._lock:
        callbacks, lock._cblist = lock._cblist, []
        try:
            yield
        finally:
            lock._cblist = callbacks


def start_threads():
    """Start Numba's threading layer (what its parallel lowering does first): code calling
    :data:`thread_id` compiled before it would not link."""
    _launch_threads()


def target_context():
    return cpu_target.target_context


def target_machine():
    """Numba's own target machine (host CPU and features)."""
    return target_context().codegen()._tm


def target_machine_at(opt):
    """A target machine like Numba's (host CPU, features, relocation model) at LLVM
    code-generation optimisation level ``opt``."""
    options = dict(opt=opt)
    target_context().codegen()._customize_tm_options(options)
    return llvm.Target.from_triple(target_machine().triple).create_target_machine(**options)


def run_function_passes(module):
    """Run on each function of ``module`` (llvmlite) the per-function passes Numba runs on
    the code it lowers (``CPUCodeLibrary._optimize_functions``): IR written in Numba's
    style then reaches adcore as a kernel Numba lowered it would."""
    codegen = target_context().codegen()
    module.data_layout = codegen._data_layout
    for fn in module.functions:
        if not fn.is_declaration:
            fpm, pb = codegen._function_pass_manager()
            fpm.run(fn, pb)


def start_runtime():
    """Register Numba's runtime (``NRT_*``) with LLVM; Numba does it on its first compile."""
    rtsys.initialize(target_context())


def register_runtime_symbols():
    """Register only the C functions of Numba's runtime (``NRT_Free``, ...) with LLVM, as
    :func:`start_runtime` does without compiling its IR-defined helpers (object code from
    the disk cache carries its own copies of those)."""
    if rtsys._init:
        return
    for name, address in _nrt.c_helpers.items():
        llvm.add_symbol(name if name.startswith("_") else RUNTIME_PREFIX + name, address)


def needs_runtime_library(names):
    """Whether code declaring the functions ``names`` links against a function of Numba's
    runtime defined in its IR (``NRT_incref``, ``nrt_atomic_add``...), which only
    :func:`start_runtime` compiles, rather than its C functions alone."""
    return any(name.startswith((RUNTIME_PREFIX, RUNTIME_PREFIX.lower())) and
               name[len(RUNTIME_PREFIX):] not in _nrt.c_helpers
               for name in names)


_WRAPPERS = ("_ZN7cpython", "cfunc.")     # Numba's Python and C wrappers of a function
_PROCESS_STATE = ("_ZN08NumbaEnv", "numba.dynamic.globals")


def uses_process_state(module):
    """Whether a function of ``module`` (other than Numba's wrappers) reads a Numba
    environment or an address of this process: compiled into other code, it would not
    find them."""
    return any(not fn.is_declaration and not fn.name.startswith(_WRAPPERS) and
               any(state in str(fn) for state in _PROCESS_STATE) for fn in module.functions)


def runtime_library():
    return rtsys.library


# -- dispatchers -------------------------------------------------------------------------
def is_dispatcher(f):
    return isinstance(f, CPUDispatcher)


def compiled_overload(dispatcher, argtypes):
    """The compile result ``dispatcher`` already has for ``argtypes``, or None."""
    return dispatcher.overloads.get(tuple(argtypes))


def native_function(dispatcher, argtypes):
    """``(address, return type)`` of the native code of ``dispatcher`` compiled for
    ``argtypes`` (compiling it when needed), which follows Numba's calling convention."""
    dispatcher.compile(tuple(argtypes))
    cres = dispatcher.overloads[tuple(argtypes)]
    return cres.library.get_pointer_to_function(cres.fndesc.mangled_name), cres.signature.return_type


def lowered(dispatcher, argtypes, parfors="loops"):
    """Numba's compile result of ``dispatcher``'s Python function for ``argtypes``, lowered
    to an LLVM module and taken no further: no Python or C wrapper, no module
    optimisation, no machine code, no overload added to ``dispatcher`` (its library is
    left unfinalised; the njit functions it calls are compiled as usual, except that Numba's
    own overloads get their machine code only when asked for it:
    :func:`machine_code_deferred`).  Kept on the dispatcher: a kernel is lowered once per
    argument types.  (Recursive calls type as in a compile.)  The parallel loops of a
    ``parallel=True`` kernel are lowered as loops (``parfors="loops"``,
    :func:`parfors_as_loops`) or as calls of their chunk functions (``"calls"``,
    :func:`parfors_as_calls`; :func:`chunk_calls` lists them)."""
    argtypes = tuple(argtypes)
    done = dispatcher.__dict__.setdefault("_adcore_lowered", {})
    parallel = is_parallel(dispatcher)
    key = (argtypes, parfors if parallel else "loops")
    if key not in done:
        function_compiler = dispatcher._compiler
        flags = compiler.Flags()
        function_compiler.targetdescr.options.parse_as_flags(flags, function_compiler.targetoptions)
        flags.no_compile = flags.no_cpython_wrapper = flags.no_cfunc_wrapper = True
        flags.dbg_directives_only = flags.debuginfo    # line info without debug's noinline
        found = []
        if not parallel:
            lowering = contextlib.nullcontext()
        elif parfors == "calls":
            lowering = parfors_as_calls(dispatcher.py_func, found)
        else:
            lowering = parfors_as_loops(dispatcher.py_func)
        with global_compiler_lock, dispatcher._compiling_counter, machine_code_deferred(), lowering:
            cres = compiler.compile_extra(
                dispatcher.typingctx, dispatcher.targetctx, dispatcher.py_func, args=argtypes,
                return_type=None, flags=flags, locals=dispatcher.locals,
                pipeline_class=function_compiler.pipeline_class)
        done[key] = cres
        dispatcher.__dict__.setdefault("_adcore_chunk_calls", {})[key] = found
    return done[key]


def chunk_calls(dispatcher, argtypes):
    """The :class:`ChunkCall` of each parallel loop of ``dispatcher`` lowered for
    ``argtypes`` with ``parfors="calls"`` (:func:`lowered`)."""
    return dispatcher.__dict__.get("_adcore_chunk_calls", {}).get((tuple(argtypes), "calls"), [])


def is_parallel(dispatcher):
    """True for a dispatcher compiled with ``parallel=True``."""
    return bool(getattr(dispatcher, "targetoptions", {}).get("parallel"))


@contextlib.contextmanager
def _patched(owner, name, replacement):
    original = getattr(owner, name)
    setattr(owner, name, replacement(original))
    try:
        yield
    finally:
        setattr(owner, name, original)


@contextlib.contextmanager
def parfors_as_loops(py_func):
    """While active (the global compiler lock held), Numba lowers the parallel loops
    (parfors) of ``py_func``'s ``parallel=True`` compile as ordinary loops in the function
    itself, after its parallel transformations (array expressions fused into loops,
    reductions recognised): the program Numba runs in parallel, as one serial function.
    It is the flag Numba sets while it lowers a parfor's body, set here only while
    ``py_func``'s own parfors are prepared for lowering, so that other functions Numba
    compiles meanwhile (the kernel's callees) keep their parallel loops."""
    from numba.parfors import parfor

    def replacement(run):
        def run_as_loops(self):
            if self.func_ir.func_id.func is not py_func:
                return run(self)
            before = parfor.sequential_parfor_lowering
            parfor.sequential_parfor_lowering = True
            try:
                return run(self)
            finally:
                parfor.sequential_parfor_lowering = before
        return run_as_loops

    with _patched(parfor.ParforPreLoweringPass, "run", replacement):
        yield


class ChunkCall:
    """One parallel loop of a kernel lowered as a call of its chunk function (the body Numba
    outlines for its threads, looping over ``sched``'s range): ``cres`` its compile result,
    ``symbol`` its LLVM name, ``argtypes`` its Numba argument types (``sched`` first, then
    the loop's inputs and outputs, then one array per reduction), ``reductions`` the
    positions of the reduction arrays and the operator of each (Numba's ``redop``, None
    for a reduction Numba lowers as a function), ``line`` the loop's source line."""

    def __init__(self, cres, reductions, line):
        self.cres, self.reductions, self.line = cres, reductions, line
        self.symbol = cres.fndesc.mangled_name
        self.argtypes = tuple(cres.signature.args)


@contextlib.contextmanager
def parfors_as_calls(py_func, found):
    """While active (the global compiler lock held), each parallel loop of ``py_func``'s
    ``parallel=True`` compile is lowered as one call of its chunk function over the whole
    iteration space, in the calling thread, instead of Numba's launch on its threading layer
    (the schedule, the thread pool and the packing of pointers into arrays that launch
    needs are not made).  Each call's :class:`ChunkCall` is appended to ``found``.  A loop
    with race variables (a scalar written by every iteration and read after the loop)
    raises :class:`NotImplementedError` (Numba's compile error): compile it with
    :func:`parfors_as_loops` instead."""
    from numba.parfors import parfor_lowering

    def replacement(launch):
        def call_chunk(lowerer, cres, gu_signature, outer_sig, expr_args, expr_arg_types,
                       loop_ranges, redvars, reddict, redarrdict, init_block, index_var_typ,
                       races, exp_name_to_tuple_var):
            if lowerer.func_ir.func_id.func is not py_func:
                return launch(lowerer, cres, gu_signature, outer_sig, expr_args, expr_arg_types,
                              loop_ranges, redvars, reddict, redarrdict, init_block, index_var_typ,
                              races, exp_name_to_tuple_var)
            if races:
                raise NotImplementedError("a parallel loop with race variables")
            found.append(_lower_chunk_call(lowerer, cres, expr_args, loop_ranges, redvars, reddict,
                                           redarrdict, index_var_typ, exp_name_to_tuple_var,
                                           init_block.loc))
        return call_chunk

    with _patched(parfor_lowering, "call_parallel_gufunc", replacement):
        yield


def chunk_runner(call):
    """An njit intrinsic ``run((sched, args...))`` calling the chunk function of ``call`` (a
    :class:`ChunkCall`) with Numba's calling convention (its status is not read: a chunk
    function compiled with ``error_model="numpy"`` raises nothing)."""
    cres, argtypes = call.cres, call.argtypes

    @intrinsic
    def run(typingctx, args):
        if not isinstance(args, types.BaseTuple) or len(args) != len(argtypes):
            return None

        def codegen(context, builder, sig, llargs):
            values = cgutils.unpack_tuple(builder, llargs[0], len(argtypes))
            fnty = context.call_conv.get_function_type(types.none, argtypes)
            fn = cgutils.get_or_insert_function(builder.module, fnty, cres.fndesc.llvm_func_name)
            context.call_conv.call_function(builder, fn, types.none, argtypes, values)
            context.active_code_library.add_linking_library(cres.library)
            return context.get_dummy_value()
        return types.none(args), codegen
    return run


def _lower_chunk_call(lowerer, cres, expr_args, loop_ranges, redvars, reddict, redarrdict,
                      index_var_typ, exp_name_to_tuple_var, loc):
    """Emit ``status = chunk(sched, args...)`` with ``sched`` the whole range (starts, then
    inclusive stops, as Numba's scheduler writes it), propagating an exception status."""
    context, builder = lowerer.context, lowerer.builder
    sched_type = cres.signature.args[0]
    index = context.get_value_type(sched_type.dtype)
    ndim = len(loop_ranges)
    bounds = cgutils.alloca_once(builder, index, size=2 * ndim, name="chunk_sched")

    def value(v):
        if isinstance(v, numba_ir.Var):
            v = lowerer.loadvar(v.name)
        else:
            v = context.get_constant(types.intp, v)
        return builder.sext(v, index) if v.type.width < index.width else v

    for d, (start, stop, _) in enumerate(loop_ranges):
        builder.store(value(start), builder.gep(bounds, [context.get_constant(types.intp, d)]))
        builder.store(builder.sub(value(stop), index(1)),
                      builder.gep(bounds, [context.get_constant(types.intp, ndim + d)]))
    sched = context.make_array(sched_type)(context, builder)
    size = context.get_constant(types.intp, 2 * ndim)
    itemsize = context.get_constant(types.intp, context.get_abi_sizeof(index))
    context.populate_array(sched, data=bounds, shape=cgutils.pack_array(builder, [size]),
                           strides=cgutils.pack_array(builder, [itemsize]), itemsize=itemsize,
                           meminfo=None)

    def load(name):
        if name in exp_name_to_tuple_var:
            tuple_name, offset = exp_name_to_tuple_var[name]
            return builder.extract_value(lowerer.loadvar(tuple_name), offset)
        return lowerer.loadvar(name)

    inputs = [load(name) for name in expr_args[1:len(expr_args) - len(redvars)]]
    reduction_arrays = [lowerer.loadvar(redarrdict[v].name) for v in redvars]
    args = [sched._getvalue()] + inputs + reduction_arrays
    fnty = context.call_conv.get_function_type(types.none, cres.signature.args)
    fn = cgutils.get_or_insert_function(builder.module, fnty, cres.fndesc.llvm_func_name)
    status, _ = context.call_conv.call_function(builder, fn, types.none, cres.signature.args, args)
    with cgutils.if_unlikely(builder, status.is_error):
        context.call_conv.return_status_propagate(builder, status)
    context.active_code_library.add_linking_library(cres.library)
    first = 1 + len(inputs)
    reductions = {first + k: getattr(reddict[v], "redop", None) for k, v in enumerate(redvars)}
    return ChunkCall(cres, reductions, getattr(loc, "line", None))


def declares_signatures(dispatcher):
    """True for a dispatcher given explicit signatures (``@njit("f8(f8[:])")``): Numba
    compiled them at decoration and compiles no other."""
    return is_dispatcher(dispatcher) and not dispatcher._can_compile


def declared_signatures(dispatcher):
    """The declared signatures, as ``(array(float64, 1d, A)) -> float64``."""
    return [f"({', '.join(map(str, s.args))}) -> {s.return_type}" for s in dispatcher.nopython_signatures]


def declared_argtypes(dispatcher, argtypes):
    """The argument types of the declared signature a call with ``argtypes`` runs, as
    Numba picks it (a C array fits a declared ``[:]``, an int a declared float), or None."""
    chosen = dispatcher.typingctx.resolve_overload(dispatcher.py_func, dispatcher.nopython_signatures,
                                                   tuple(argtypes), {}, unsafe_casting=True)
    return None if chosen is None else tuple(chosen.args)


def recompiled(dispatcher, **options):
    """A new dispatcher of the same Python function with the same options (and
    ``options``), compiling lazily (declared signatures are not carried over) and without
    Numba's disk cache (whose code libraries carry no unoptimised module)."""
    kept = {k: v for k, v in dispatcher.targetoptions.items() if k != "nopython"}
    return numba.njit(**{**kept, **options})(dispatcher.py_func)


def flat_matrix_view(context, builder, flat_type, flat, start, view_type, shape, strides):
    """In an intrinsic's code generation: an array of ``view_type`` viewing the memory of
    array ``flat`` (of ``flat_type``) from element ``start`` (an LLVM value) with constant
    ``shape`` and ``strides`` (bytes), sharing its owner (a new reference, as a view)."""
    from numba.core.imputils import impl_ret_borrowed
    from numba.np.arrayobj import make_array, populate_array
    src = make_array(flat_type)(context, builder, flat)
    view = make_array(view_type)(context, builder)
    intp = context.get_value_type(types.intp)
    itemsize = context.get_abi_sizeof(context.get_data_type(view_type.dtype))
    populate_array(view, data=builder.gep(src.data, [start]), shape=[intp(n) for n in shape],
                   strides=[intp(s) for s in strides], itemsize=intp(itemsize),
                   meminfo=src.meminfo, parent=src.parent)
    return impl_ret_borrowed(context, builder, view_type, view._getvalue())


def intrinsic_definition(value):
    """The Python function an ``@intrinsic`` was made from, or None for other values."""
    return value._defn if isinstance(value, _Intrinsic) else None


def typed_variables(cres, seen=None):
    """``(Numba type, (file, line))`` of each variable assigned in the compiled Python
    function and in the njit functions it calls (their own lines), from Numba's type
    annotations of compile result ``cres`` and of the callees' overloads."""
    seen = set() if seen is None else seen
    annotation = getattr(cres, "type_annotation", None)
    if not hasattr(annotation, "typemap") or id(cres) in seen:   # None, or a str from Numba's cache
        return []
    seen.add(id(cres))
    out = [(annotation.typemap[stmt.target.name], (os.path.basename(stmt.loc.filename), stmt.loc.line))
           for block in annotation.blocks.values() for stmt in block.body
           if isinstance(stmt, numba_ir.Assign) and stmt.target.name in annotation.typemap]
    for expr, sig in annotation.calltypes.items():
        func = getattr(expr, "func", None) if getattr(expr, "op", None) == "call" else None
        fnty = annotation.typemap.get(func.name) if func is not None else None
        if isinstance(fnty, types.Dispatcher) and sig is not None:
            callee = fnty.dispatcher.overloads.get(tuple(sig.args))
            if callee is not None:
                out += typed_variables(callee, seen)
    return out


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


def without_tags(mangled):
    """A Numba mangled name without its version and compile-flags tags (``B<n>v<k>B<m><tag>``):
    the same function and argument types, whichever compile of it."""
    tags = re.match(r"(.*?)B\d+v\d+B(\d+)", mangled)
    if tags is None:
        return mangled
    return tags.group(1) + mangled[tags.end() + int(tags.group(2)):]


def point_references_at_compiled(dispatcher, argtypes, targets):
    """Compile ``dispatcher`` for ``argtypes`` as Numba does and point Numba's unresolved
    references ``targets`` at it: they name the kernel by the uid of a lowering
    (:func:`lowered`) that defines nothing, so the njit callees that hold them (mutual
    recursion) would otherwise abort when the program runs."""
    dispatcher.compile(tuple(argtypes))
    cres = dispatcher.overloads[tuple(argtypes)]
    linker = dispatcher.targetctx.codegen()._rtlinker
    address = cres.library.get_pointer_to_function(cres.fndesc.mangled_name)
    for target in targets:
        slot = linker._unresolved.pop(target, None)
        if slot is not None:
            slot.value = address
            linker._resolved.append((target, slot))


def unresolved_targets(module):
    """The functions ``module`` reaches through Numba's unresolved references (recursion)."""
    return [gv.name[len(UNRESOLVED_PREFIX):] for gv in module.global_variables
            if gv.is_declaration and gv.name.startswith(UNRESOLVED_PREFIX)]


# -- machine code only when asked for -------------------------------------------------------
# Numba finalises the library of every overload it compiles (``np.dot``'s, ``np.zeros``'s)
# and of every subroutine its lowering compiles (broadcasting, array expressions): module
# optimisation, then machine code from MCJIT.  Called from compiled code only (no
# Python wrapper), such a library is only ever linked into its callers as IR, which
# optimise it again with themselves; its own optimisation and machine code are needed only
# if something asks for the address of a function it defines.
_deferring = threading.local()


@contextlib.contextmanager
def machine_code_deferred():
    """While active (the global compiler lock held), a library Numba finalises that has no
    Python wrapper and reads no process state is only linked: its module optimisation and
    machine code wait until the address of a function it defines is asked for (then they
    run as Numba would have run them), and its environment is set then.  Numba's own
    overloads get no C wrapper (used only by first-class function values, which Numba's
    overloads never are)."""
    before = getattr(_deferring, "on", False)
    _deferring.on = True
    try:
        yield
    finally:
        _deferring.on = before


def _deferrable(library):
    """Whether the library of a function Numba compiled may wait for its machine code."""
    module = library._final_module
    return not any(fn.name.startswith(_WRAPPERS[0]) and not fn.is_declaration for fn in module.functions) \
        and not uses_process_state(module)


def _link_only(library):
    """Numba's ``finalize`` up to its module optimisation: link the libraries it links."""
    seen = set()
    for linked in library._linking_libraries:
        if linked not in seen:
            library._reload_init.update(linked._reload_init)
            seen.add(linked)
            library._final_module.link_in(linked._get_module_for_linking(), preserve=True)


def _complete(library):
    """The rest of Numba's ``finalize`` for a deferred library, and its environments."""
    if not getattr(library, "_adcore_deferred", False):
        return
    with global_compiler_lock:
        if not getattr(library, "_adcore_deferred", False):
            return
        library._adcore_deferred = False
        library._finalized = False
        library._optimize_final_module()
        library._final_module.verify()
        library._finalize_final_module()
        for name, env in library.__dict__.pop("_adcore_environments", ()):
            library.codegen.set_env(name, env)


def _defines(library, name):
    try:
        return not library._final_module.get_function(name).is_declaration
    except NameError:
        return False


def keep_unoptimised_modules():
    """From now on every code library Numba finalises keeps a clone of its module as it
    was before Numba's module optimisation, and the list of libraries it links; and
    :func:`machine_code_deferred` takes effect."""
    with _hook_lock:
        if getattr(_codegen.CPUCodeLibrary.finalize, "_adcore_hook", False):
            return
        _hook_finalize()
        _hook_pointers()
        _hook_executables()
        _hook_linking()
        _hook_flags()


def _hook_finalize():
    """A finalised library keeps its unoptimised module and links; a deferred one is only linked."""
    cls = _codegen.CPUCodeLibrary
    original = cls.finalize

    def finalize(self):
        self._adcore_own = self._final_module.clone()
        self._adcore_links = list(self._linking_libraries)
        for fn in self._adcore_own.functions:
            if not fn.is_declaration:
                _defining_library[fn.name] = self
        if self.__dict__.pop("_adcore_defer", False):
            self._raise_if_finalized()
            _link_only(self)
            self._adcore_deferred = self._finalized = True
            return None
        return original(self)

    finalize._adcore_hook = True
    cls.finalize = finalize


def _hook_pointers():
    """Asking a deferred library for a function's address or its machine code completes it."""
    jit = _codegen.JITCodeLibrary
    pointer = jit.get_pointer_to_function

    def get_pointer_to_function(self, name):
        self._ensure_finalized()
        if getattr(self, "_adcore_deferred", False) and _defines(self, name):
            _complete(self)
        return pointer(self, name)

    jit.get_pointer_to_function = get_pointer_to_function
    for name in ("get_asm_str", "serialize_using_object_code", "get_disasm_cfg", "get_function_cfg"):
        method = getattr(jit, name, None)
        if method is not None:
            setattr(jit, name, _completing(method))


def _hook_executables():
    """A compiled function's library, finalised when its executable is made, may be deferred:
    its wrapper is then made by Numba's own steps with the environment kept for later."""
    context = type(target_context())
    executable = context.get_executable

    def get_executable(self, library, fndesc, env):
        if getattr(_deferring, "on", False) and not library._finalized and _deferrable(library):
            library._adcore_defer = True
        library._ensure_finalized()
        if not getattr(library, "_adcore_deferred", False):
            return executable(self, library, fndesc, env)
        from numba import _dynfunc
        library.__dict__.setdefault("_adcore_environments", []).append((self.get_env_name(fndesc), env))
        return _dynfunc.make_function(fndesc.lookup_module(), fndesc.qualname.split(".")[-1],
                                      f"compiled wrapper for {fndesc.qualname!r}",
                                      library.get_pointer_to_function(fndesc.llvm_cpython_wrapper_name),
                                      env, (library,))

    context.get_executable = get_executable


def _hook_linking():
    """A subroutine's library, finalised when it is linked into its caller's, may be deferred."""
    cls = _codegen.CPUCodeLibrary
    links = cls.add_linking_library

    def add_linking_library(self, library):
        if getattr(_deferring, "on", False) and not library._finalized and _deferrable(library):
            library._adcore_defer = True
        return links(self, library)

    cls.add_linking_library = add_linking_library


def _hook_flags():
    """While deferring, Numba's own overloads get no C wrapper (they have no Python one)."""
    function_compiler = _dispatcher._FunctionCompiler
    customised = function_compiler._customize_flags

    def _customize_flags(self, flags):
        flags = customised(self, flags)
        if getattr(_deferring, "on", False) and flags.no_cpython_wrapper and \
                getattr(self.py_func, "__module__", "").startswith("numba."):
            flags.no_cfunc_wrapper = True
        return flags

    function_compiler._customize_flags = _customize_flags


def _completing(method):
    def completed_first(self, *args, **kwargs):
        _complete(self)
        return method(self, *args, **kwargs)
    return completed_first


def has_unoptimised_module(library):
    return getattr(library, "_adcore_own", None) is not None


def unoptimised_module(library):
    """A clone of ``library``'s module before optimisation: its own module when it is not
    finalised (:func:`lowered`), the hook's clone, or, for a library finalised before the
    hook, the module it links with."""
    if not library._finalized:
        return library._final_module.clone()
    own = getattr(library, "_adcore_own", None)
    return own.clone() if own is not None else library._get_module_for_linking().clone()


def linkable_module(library):
    """A module of the code library of a function lowered without machine code
    (:func:`lowered`): its own module and the optimised modules of the libraries it
    links (the njit functions it calls), as Numba's finalisation links them."""
    module = library._final_module.clone()
    for linked in dict.fromkeys(library._linking_libraries):
        module.link_in(linked._get_module_for_linking(), preserve=True)
    return module


def linked_libraries(library):
    if not library._finalized:
        return list(library._linking_libraries)
    return getattr(library, "_adcore_links", [])


# -- environments ----------------------------------------------------------------------
# A kernel that talks to Python (print) loads its Environment object from a global
# ``@_ZN08NumbaEnv...`` that Numba fills in when it loads the code; the gradient's module
# gets the address as a constant instead, and the environments are kept alive here.
_ENV_GLOBAL = re.compile(r'^(@"?(_ZN08NumbaEnv[^"\s]*)"?) = internal (?:[a-z_]+ )*global ptr null', re.M)
_bound_environments = {}


def bind_environments(ir_text):
    """``ir_text`` with each Numba environment global it defines set to the live
    environment of that name (left null when there is none: the code then raises
    Numba's 'missing Environment' error)."""
    def bound(match):
        env = lookup_environment(match.group(2))
        if env is None:
            return match.group(0)
        _bound_environments[match.group(2)] = env
        return f"{match.group(1)} = internal constant ptr inttoptr (i64 {id(env)} to ptr)"
    return _ENV_GLOBAL.sub(bound, ir_text)
