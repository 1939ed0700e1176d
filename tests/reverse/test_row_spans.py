"""The checks of :mod:`adcore.reverse.row_spans`, evaluated as the loop's launchers evaluate
them at a call: pieces of a loop reading a band of rows run every other piece at once only
when pieces two apart read disjoint rows."""
import numba
import numpy as np
import pytest
from numba import prange
from numba.core import types as nbtypes

from adcore import pipeline
from adcore.reverse import parallel_loops


@numba.njit(parallel=True)
def far_band(u, v):
    for i in prange(16, u.shape[0]):
        for j in range(u.shape[1]):
            v[i, j] = u[i - 16, j] * u[i, j]
    return v.sum()


def _plan(kernel, *args):
    kernel(*args)
    argtypes = tuple(numba.typeof(a) for a in args)
    call = pipeline.primal(kernel, argtypes, parfors="calls").kernel.chunk_calls[0]
    chunk = parallel_loops.ChunkKernel(call, kernel.__name__)
    return parallel_loops.plan(pipeline.primal(chunk, call.argtypes), chunk)


def _holds(checks, loop, rows, columns, chunks):
    scope = {f"a{k}": np.empty((rows, columns)) for k, t in enumerate(loop.call.argtypes)
             if isinstance(t, nbtypes.Array) and t.ndim == 2}
    scope.update(lo=16, n=rows - 16, chunks=chunks)
    return all(eval(check, scope) for check in checks)


LOOP = _plan(far_band, np.ones((20, 3)), np.zeros((20, 3)))


def test_the_band_is_found_and_the_written_rows_too():
    assert LOOP.parallel and len(LOOP.bands) == 1 and len(LOOP.rows) == 1 and not LOOP.private


@pytest.mark.parametrize("rows, chunks, disjoint", [
    (16 + 16 * 16, 16, True),      # pieces of 16 rows: a 17-row band reaches one piece along
    (16 + 15 * 16, 16, False),     # pieces of 15 rows: it reaches two
    (16 + 32 * 17, 32, True),
    (48, 16, False),
])
def test_pieces_two_apart_read_disjoint_rows_only_when_pieces_are_wide_enough(rows, chunks, disjoint):
    assert _holds(LOOP.checks, LOOP, rows, 5, chunks)
    assert _holds(LOOP.band_checks, LOOP, rows, 5, chunks) is disjoint


def test_a_loop_starting_before_its_band_fits_is_refused_the_band():
    """``u[i - 16]`` wraps around for ``i < 16``: the band holds only from ``lo >= 16``."""
    scope_lo = [c for c in LOOP.band_checks if "lo" in c]
    assert scope_lo and not all(eval(c, {"lo": 15}) for c in scope_lo)
