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


def _holds(checks, loop, rows, columns, chunks, lo=16):
    scope = {f"a{k}": np.empty((rows, columns)) for k, t in enumerate(loop.call.argtypes)
             if isinstance(t, nbtypes.Array) and t.ndim == 2}
    scope.update(lo=lo, n=rows - lo, chunks=chunks)
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


@pytest.mark.parametrize("rows, chunks, disjoint", [
    (16 * 16, 16, True),      # only the first piece wraps, onto the last piece's rows: not run with it
    (16 * 17, 16, True),
    (15 * 17, 15, False),     # an odd number of pieces: the last piece runs with the first
    (16 * 15, 16, False),     # pieces of 15 rows: the band reaches two pieces
])
def test_a_loop_from_row_0_wraps_around_only_in_its_first_piece_past_the_pieces_run_with_it(rows, chunks,
                                                                                           disjoint):
    """From ``lo = 0``, ``u[i - 16]`` wraps around for ``i < 16`` to the last 16 rows: the
    reverse's even pieces run at once only when the wrapping iterations are all in the
    first piece and the rows they wrap to lie past the bands of the other even pieces."""
    assert _holds(LOOP.band_checks, LOOP, rows, 5, chunks, lo=0) is disjoint
