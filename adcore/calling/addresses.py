"""Arrays handed to native code as one int64 array of their data addresses: the part of
the call layer that the staged programs' drivers, the native train loop and the fused
optimiser update share.

Numba's dispatcher costs about a quarter of a microsecond per array argument, ctypes
about as much; a generated function that takes an int64 array of addresses rebuilds each
array with ``view(addresses[k], size, dtype)`` (njit) or reads it by address (LLVM IR).
:class:`AddressTable` calls such a function: it keeps the arrays alive and checks they are
the same objects: an array object keeps its data while referenced (``ndarray.resize``
refuses to move referenced data).
"""
import numba
import numpy as np
from numba.core import cgutils, types
from numba.extending import intrinsic

from .guard_builder import unless


@intrinsic
def _pointer(typingctx, address):
    if not isinstance(address, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], cgutils.voidptr_t)
    return types.voidptr(address), codegen


@numba.njit(cache=False, inline="always")
def view(address, shape, dtype):
    """The C-contiguous array of ``shape`` and ``dtype`` at ``address`` (njit only)."""
    return numba.carray(_pointer(address), shape, dtype)


def address(a):
    """The data address of array ``a`` (Python)."""
    return a.__array_interface__["data"][0]


class AddressTable:
    """Calls ``fn(*lead, table, *others)`` with gathered arguments: the arrays at ``fixed``
    positions as one int, the address of an int64 array of their addresses (the njit side
    reads it with ``view(table, (len(fixed),), np.int64)``), computed again only when one
    of them is another object than at the last call (an array keeps its data while
    referenced; ``refused(array)`` is raised for one that is not writeable and
    C-contiguous), the others in order.  ``call(*lead, *dargs)`` or ``run(*lead, dargs)``;
    ``lead`` names the leading arguments passed through.  ``run`` given the very tuple of
    its last call checks nothing again (a tuple holds the same objects)."""

    def __init__(self, fn, fixed, n, refused, lead=("zero",)):
        self.objects, self.addresses = [None] * len(fixed), np.zeros(len(fixed), np.int64)
        self.fixed, self.refused = fixed, refused
        names = "".join(f"a{k}, " for k in range(n))
        head = "".join(x + ", " for x in lead)
        others = "".join(f", a{k}" for k in range(n) if k not in fixed)
        again = "".join(f", dargs[{k}]" for k in range(n) if k not in fixed)
        same = [f"a{k} is F[{q}]" for q, k in enumerate(fixed)] or ["True"]
        scope = {"fn": fn, "F": self.objects, "TABLE": address(self.addresses), "LAST": [None],
                 "refresh": self._refresh}
        exec(f"def call({head}{names}):\n"
             f"    {unless(same, f'refresh(({names}))')}\n"
             f"    return fn({head}TABLE{others})\n"
             f"def run({head}dargs):\n"
             f"    if dargs is LAST[0]:\n"
             f"        return fn({head}TABLE{again})\n"
             f"    LAST[0] = None\n"
             f"    got = call({head}*dargs)\n"
             f"    if type(dargs) is tuple:\n"
             f"        LAST[0] = dargs\n"
             f"    return got\n", scope)
        self.call, self.run = scope["call"], scope["run"]

    def _refresh(self, dargs):
        for q, k in enumerate(self.fixed):
            a = dargs[k]
            if not (a.flags.c_contiguous and a.flags.writeable):
                raise self.refused(a)
            self.objects[q], self.addresses[q] = a, address(a)
