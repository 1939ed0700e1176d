"""Arrays handed to njit code as one int64 array of their data addresses.

Numba's dispatcher costs about a quarter of a microsecond per array argument; a generated
njit function that takes ``addresses`` (made by ``address_array``) and rebuilds each array
with ``view(addresses[k], shape, dtype)`` is called with one.  The caller keeps the
arrays alive (``Addresses.arrays``) and refreshes the addresses only when another array
object comes (``Addresses.refresh``): an array object keeps its data while referenced
(``ndarray.resize`` refuses to move referenced data).
"""
import numba
import numpy as np
from numba.core import cgutils, types
from numba.extending import intrinsic


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


class Addresses:
    """The addresses of a tuple of C-contiguous arrays, kept with the arrays."""

    __slots__ = ("arrays", "values")

    def __init__(self, n):
        self.arrays = (None,) * n
        self.values = np.zeros(max(n, 1), np.int64)

    def refresh(self, arrays):
        """Point at ``arrays`` (same length as before): returns the int64 array."""
        if any(a is not b for a, b in zip(arrays, self.arrays)):
            self.values[:len(arrays)] = [a.__array_interface__["data"][0] for a in arrays]
            self.arrays = arrays
        return self.values
