"""Custom derivative rules (the EnzymeRules analogue).

A rule replaces differentiating *through* a callee: the forward pass calls the callee
as it is, and the reverse pass calls the rule's ``reverse`` function, an njit function
that adds the callee's vector-Jacobian product into the shadows.

* For an **njit function** ``g(a, b, ...)`` the reverse is called as
  ``reverse(a, b, ..., da, db, ..., dret)``: the arguments as they were at the call, then
  one shadow per array argument (an empty array of the same type when the argument has
  none), then ``dret``, the adjoint of ``g``'s float return (only when ``g`` returns a
  float).  It returns a tuple with the adjoint of each float scalar argument, in order,
  or ``None`` when there is none.
* For an **external symbol** (a C function the kernel calls, such as Numba's BLAS
  helpers) the reverse is called as ``reverse(*args, *shadow_addresses)``: the C
  arguments (pointers as int64 addresses), then for each pointer argument the address of
  its shadow (0 when it has none); :func:`carray` views an address as an array.  It
  returns ``None``.

The values the reverse reads through pointers must be unchanged between the call and the
reverse pass; adcore refuses a kernel that overwrites them after the call.

The optional ``forward`` (forward mode) is an njit function called just *before* the call,
with the same arguments, and writes tangents:

* for an **njit function** ``forward(a, b, ..., ta, tb, ...)`` gets the arguments, then
  the tangent of each array argument (its shadow, an empty array when it has none) and of
  each float scalar argument (0 when it has none), in order; it returns the tangent of
  ``g``'s float return (``None`` when ``g`` returns no float) and writes the tangents of
  the arrays ``g`` writes into their shadows;
* for an **external symbol** ``forward(*args, *shadow_addresses)`` as its reverse, and
  writes the tangents of the memory the call writes into the shadows.

A kernel that calls a rule's target without a ``forward`` is refused in forward mode.

The optional ``reverse_tangent`` of an external symbol's rule (for :func:`adcore.hvp`,
forward mode over a gradient) is the tangent of its reverse: an njit function called just
before the reverse, as ``reverse_tangent(*args, *shadow_addresses, *tangent_addresses,
*shadow_tangent_addresses)``, the reverse's arguments then, for each pointer argument and
then each shadow, the address of its tangent (0 when it has none); it adds the tangents
of what the reverse adds into the shadows into their tangents.
"""
import itertools

import llvmlite.binding as llvm
from numba.core import cgutils, types
from numba.core.registry import CPUDispatcher
from numba.extending import intrinsic

from ..errors import ADError
from ..frontend.capture import unoptimised_module
from ..numba_abi import array_view, uses_process_state
from ..timings import stage

_RULES = []                    # (target, reverse, outputs, extents, forward)
_reverse_tangents = {}         # reverse of an external symbol's rule -> (target, its tangent)
_bound = {}                    # (reverse, argtypes) -> symbol
_libraries = {}                # symbol -> (code library, name of the function in it)
_functions = {}                # symbol -> the njit function it was compiled from
_counter = itertools.count()
_parallel_loops = {}           # chunk function symbol -> (LoopPlan, outputs)
LLVM_TO_NUMBA = {"i8": types.int8, "i16": types.int16, "i32": types.int32, "i64": types.int64,
                 "float": types.float32, "double": types.float64, "ptr": types.int64}


def register_rule(target, reverse, outputs=(), extents=None, forward=None, reverse_tangent=None):
    """Differentiate calls to ``target`` (an njit function or the name of an external
    symbol) with the njit function ``reverse`` (see the module docstring).  ``outputs``
    lists the positions of pointer arguments the callee only writes: the reverse does not
    read them, so later code may overwrite them.  For an external symbol, ``extents`` (an
    njit function of the C arguments returning one byte count per pointer argument) lets
    adcore copy an operand the kernel overwrites after the call, for the reverse to read.
    ``forward`` is the optional forward-mode rule and ``reverse_tangent`` (external
    symbols only) the tangent of the reverse, for ``hvp`` (module docstring)."""
    if not isinstance(reverse, CPUDispatcher):
        raise ADError(f"the reverse of a rule must be a numba.njit function, got {reverse!r}")
    if not isinstance(target, (str, CPUDispatcher)):
        raise ADError(f"a rule's target must be an njit function or a symbol name, got {target!r}")
    for what, f in (("extents", extents), ("forward", forward), ("reverse_tangent", reverse_tangent)):
        if f is not None and not isinstance(f, CPUDispatcher):
            raise ADError(f"the {what} of a rule must be a numba.njit function, got {f!r}")
    if reverse_tangent is not None and not isinstance(target, str):
        raise ADError("a reverse_tangent is for the rule of an external symbol; an njit function's "
                      "rule has none")
    _RULES.append((target, reverse, tuple(outputs), extents, forward))
    if reverse_tangent is not None:
        _reverse_tangents[reverse] = (target, reverse_tangent)
    return reverse


def rule(target, outputs=(), extents=None, forward=None, reverse_tangent=None):
    """Decorator form: ``@adcore.rule(g)`` above ``@numba.njit def g_reverse(...)``."""
    return lambda reverse: register_rule(target, reverse, outputs, extents, forward, reverse_tangent)


class BoundRule:
    """A rule matched to one callee symbol: ``argtypes`` are the callee's Numba argument
    types (``None`` for an external symbol), ``restype`` its return type."""

    loop = None                  # a parallel loop's chunk function (bind_parallel_loop)
    float_writes = ()            # operand positions of the arrays the callee writes floats to

    def __init__(self, symbol, reverse, outputs, argtypes=None, restype=None, extents=None,
                 forward=None):
        self.symbol, self.reverse, self.outputs = symbol, reverse, outputs
        self.argtypes, self.restype, self.extents = argtypes, restype, extents
        self.forward = forward

    @property
    def is_external(self):
        return self.argtypes is None


def native_symbol(function, types_):
    """``(symbol, return type)`` of njit ``function`` compiled for ``types_``, registered
    with LLVM so that generated IR can call it with Numba's calling convention."""
    key = (function, tuple(types_))
    if key not in _bound:
        with stage("rule reverses (Numba)"):
            function.compile(tuple(types_))
        cres = function.overloads[tuple(types_)]
        name = f"adcore_rule_{next(_counter)}"
        llvm.add_symbol(name, cres.library.get_pointer_to_function(cres.fndesc.mangled_name))
        _bound[key] = (name, cres.signature.return_type)
        _libraries[name] = (cres.library, cres.fndesc.mangled_name)
        _functions[name] = function
    return _bound[key]


def reverse_tangent(symbol):
    """``(target symbol, tangent of the reverse)`` when ``symbol`` (from
    :func:`native_symbol`) is the reverse of an external symbol's rule that has a
    ``reverse_tangent``; else None (also when the reverse serves several targets: the
    call cannot tell which)."""
    function = _functions.get(symbol)
    if len({target for target, reverse, *_ in _RULES if reverse is function}) != 1:
        return None
    return _reverse_tangents.get(function)


def njit_rule_reverse(symbol):
    """Whether ``symbol`` (from :func:`native_symbol`) is the reverse of an njit function's
    rule: code on arrays that forward mode can differentiate (``hvp``)."""
    function = _functions.get(symbol)
    return any(reverse is function and not isinstance(target, str) for target, reverse, *_ in _RULES)


def linkable(symbol):
    """The unoptimised LLVM module of the function ``symbol`` names (a rule's reverse or
    extents, from :func:`native_symbol`) with that function renamed ``symbol``, for
    compiling it into a gradient's own object code; None for other symbols and for
    functions that use state of this process (they stay separate, and the gradient is
    not cached on disk)."""
    if symbol not in _libraries:
        return None
    library, name = _libraries[symbol]
    module = unoptimised_module(library)
    if uses_process_state(module):
        return None
    module.get_function(name).name = symbol
    return module


def bind_parallel_loop(loop, outputs, float_writes):
    """Differentiate calls of ``loop``'s chunk function (an :class:`adcore.reverse.parallel_loops.LoopPlan`)
    with the reverse that runs it on Numba's threads; ``outputs``: the operand positions
    its reverse does not read, ``float_writes`` those of the arrays it writes."""
    _parallel_loops[loop.call.symbol] = (loop, tuple(outputs), tuple(float_writes))


def find(callee):
    """The rule for LLVM function ``callee``, or None."""
    if not callee:
        return None
    if callee in _parallel_loops:
        loop, outputs, float_writes = _parallel_loops[callee]
        bound = BoundRule(callee, None, outputs, list(loop.call.argtypes), types.none)
        bound.loop, bound.float_writes = loop, float_writes
        return bound
    for target, reverse, outputs, extents, forward in reversed(_RULES):
        if isinstance(target, str):
            if target == callee:
                return BoundRule(callee, reverse, outputs, extents=extents, forward=forward)
            continue
        for sig, cres in list(target.overloads.items()):
            if cres.fndesc.mangled_name == callee:
                return BoundRule(callee, reverse, (0, 1), list(sig), cres.signature.return_type,
                                 forward=forward)
    return None


def lookup():
    """A cached ``rule_of(instr)``: the rule bound to a call's callee, or None."""
    found = {}

    def rule_of(instr):
        if instr.opcode != "call":
            return None
        if instr.callee not in found:
            found[instr.callee] = find(instr.callee)
        return found[instr.callee]
    return rule_of


@intrinsic
def carray(typingctx, address, shape, dtype):
    """``carray(address, n, np.float64)``: a 1-D array view of ``n`` elements at an int64
    address (the pointers and shadow addresses external-symbol rules receive); a tuple
    ``shape`` gives a C-contiguous array of that shape.  The element type is given as a
    dtype, a scalar type, or a sample scalar value."""
    if isinstance(dtype, types.DType):
        elem = dtype.dtype
    elif isinstance(dtype, types.NumberClass):
        elem = dtype.instance_type
    elif isinstance(dtype, types.Number):
        elem = dtype                     # a sample value of the element type
    else:
        return None
    is_tuple = isinstance(shape, types.BaseTuple)
    dims = list(shape) if is_tuple else [shape]
    if not isinstance(address, types.Integer) or not dims or \
            not all(isinstance(d, types.Integer) for d in dims):
        return None
    arrty = types.Array(elem, len(dims), "C")

    def codegen(context, builder, sig, args):
        addr, given, _ = args
        values = cgutils.unpack_tuple(builder, given, len(dims)) if is_tuple else [given]
        sizes = [context.cast(builder, v, t, types.intp) for v, t in zip(values, dims)]
        return array_view(context, builder, arrty, addr, sizes)

    return arrty(address, shape, dtype), codegen
