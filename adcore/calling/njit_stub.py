"""The njit stub through which Numba code calls a compiled native function.

The gradient function follows Numba's calling convention, so a Numba ``@intrinsic``
can call it like any compiled function: the stub's own exception handling re-raises a
kernel's Python exception, and the call costs a native call plus argument unboxing.
Making a stub costs a Numba compile, so it is made when njit code first needs it (Python
calls through the ctypes entry of :mod:`adcore.calling.ctypes_entry` until then).
"""
import numba
from numba.core import cgutils
from numba.extending import intrinsic

from ..errors import ActivityError

# How the stub and the ctypes entry (adcore.calling.ctypes_entry) refuse a shadow whose
# shape or strides differ from its array's: "<what> " + WRONG_LAYOUT, an ActivityError.
WRONG_LAYOUT = "must have the shape and strides of its array"


def stub_call(symbol, argtypes, restype, same_layout=()):
    """An intrinsic ``call(*args)`` for njit code: it calls the native ``symbol`` with
    Numba's calling convention for arguments of ``argtypes`` (those given are converted
    to them; arguments that cannot be are a typing error) and returns ``restype``,
    re-raising the kernel's exception; for each ``(i, j, what)`` in ``same_layout`` it
    raises :class:`ActivityError` unless arrays ``i`` and ``j`` have the same shape and
    strides: wrong arguments never reach the native code."""
    sig = restype(*argtypes)

    def codegen(context, builder, signature, args):
        for i, j, what in same_layout:
            _check_same_layout(context, builder, (signature.args[i], args[i]),
                               (signature.args[j], args[j]), f"{what} {WRONG_LAYOUT}")
        fnty = context.call_conv.get_function_type(signature.return_type, signature.args)
        fn = cgutils.get_or_insert_function(builder.module, fnty, symbol)
        status, out = context.call_conv.call_function(
            builder, fn, signature.return_type, signature.args, args)
        with builder.if_then(status.is_error, likely=False):
            context.call_conv.return_status_propagate(builder, status)
        return out

    def typer(typingctx, *given):
        if len(given) == len(argtypes) and all(
                typingctx.can_convert(g, t) is not None for g, t in zip(given, argtypes)):
            return sig, codegen
        return None

    names = ", ".join(f"a{i}" for i in range(len(argtypes)))
    scope = {"typer": typer}
    exec(f"def call_typer(typingctx, {names}):\n    return typer(typingctx, {names})\n", scope)
    return intrinsic(scope["call_typer"])


def make_stub(symbol, argtypes, restype, same_layout=()):
    """An njit function ``stub(*args)`` doing what :func:`stub_call` does, compiled for
    exactly ``argtypes`` (other types are a ``TypeError``) and without a C wrapper."""
    names = ", ".join(f"a{i}" for i in range(len(argtypes)))
    scope = {"call": stub_call(symbol, argtypes, restype, same_layout)}
    exec(f"def stub({names}):\n    return call({names})\n", scope)
    return numba.njit(restype(*argtypes), no_cfunc_wrapper=True)(scope["stub"])


def _check_same_layout(context, builder, first, second, message):
    """Code raising ActivityError(``message``) unless arrays ``first`` and ``second``
    (each ``(Numba type, value)``) have the same shape and strides."""
    (ty_a, a), (ty_b, b) = first, second
    a, b = context.make_array(ty_a)(context, builder, a), context.make_array(ty_b)(context, builder, b)
    fields_a = cgutils.unpack_tuple(builder, a.shape) + cgutils.unpack_tuple(builder, a.strides)
    fields_b = cgutils.unpack_tuple(builder, b.shape) + cgutils.unpack_tuple(builder, b.strides)
    differ = cgutils.false_bit
    for x, y in zip(fields_a, fields_b):
        differ = builder.or_(differ, builder.icmp_signed("!=", x, y))
    with builder.if_then(differ, likely=False):
        context.call_conv.return_user_exc(builder, ActivityError, (message,))
