"""The disk-cached helpers of the launchers of a parallel loop's pieces: the threads' private
shadows (one zeroed row per thread, each on pages of its own: threads adding into one page
slow each other down), their sum, a piece's schedule."""
import numpy as np
from hypothesis import given, settings, strategies as st

from adcore.reverse.parallel_loops import (PAGE_BYTES, add_private_rows, piece_schedule, thread_rows,
                                          thread_shadow)


@settings(max_examples=25, deadline=None)
@given(workers=st.integers(1, 6), size=st.integers(1, 3000),
       dtype=st.sampled_from([np.float64, np.float32, np.complex128]))
def test_rows_are_zeroed_and_start_pages_of_their_own(workers, size, dtype):
    d = np.ones(size, dtype)
    rows = thread_rows(workers, d)
    assert rows.shape[0] == workers and rows.shape[1] >= size and rows.dtype == d.dtype
    assert not rows.any()
    starts = [rows[t].ctypes.data for t in range(workers)]
    assert all(s % PAGE_BYTES == 0 for s in starts)
    ends = [s + size * d.itemsize for s in starts]
    # no page holds elements of two threads' rows
    pages = [set(range(s // PAGE_BYTES, (e - 1) // PAGE_BYTES + 1)) for s, e in zip(starts, ends)]
    assert sum(len(p) for p in pages) == len(set().union(*pages))


@settings(max_examples=25, deadline=None)
@given(workers=st.integers(1, 4), shape=st.lists(st.integers(1, 5), min_size=1, max_size=3),
       order=st.sampled_from(["C", "F"]), seed=st.integers(0, 99))
def test_private_rows_are_added_in_c_order(workers, shape, order, seed):
    """The rows' sum goes into the shadow element by element in C order (the order in which
    each thread's row holds the shadow: ``row[:d.size].reshape(d.shape)``), whatever the
    shadow's own layout, the rows added in thread order."""
    rng = np.random.default_rng(seed)
    d = np.asarray(rng.standard_normal(shape), order=order)
    rows = thread_rows(workers, d)
    rows[:, :d.size] = rng.standard_normal((workers, d.size))
    expected = d.copy()
    total = rows[0, :d.size].copy()
    for t in range(1, workers):
        total += rows[t, :d.size]
    expected += total.reshape(d.shape)
    add_private_rows(d, rows)
    np.testing.assert_array_equal(d, expected)


@settings(max_examples=25, deadline=None)
@given(m=st.sampled_from([2, 4, 6]), first=st.integers(-5, 50), span=st.integers(0, 50),
       slot=st.integers(0, 7))
def test_a_piece_schedule_is_the_loop_schedule_on_its_range(m, first, span, slot):
    """A piece's schedule: the loop's schedule with its outermost range replaced by the
    piece's, the reduction slot after it; the loop's schedule is left as it was."""
    a0 = np.arange(100, 100 + m, dtype=np.int64)
    before = a0.copy()
    got = piece_schedule(a0, first, first + span, slot)
    expected = before.copy()
    expected[0], expected[m // 2] = first, first + span
    np.testing.assert_array_equal(got[:m], expected)
    assert got[m] == slot and got.dtype == a0.dtype
    np.testing.assert_array_equal(a0, before)


def test_a_thread_shadow_is_its_row_shaped_as_the_shadow():
    d = np.zeros((3, 4))
    rows = thread_rows(2, d)
    view = thread_shadow(rows, d, 1)
    view[2, 1] = 5.0                     # a view: the row holds it, in C order
    assert view.shape == d.shape and rows[1, 2 * 4 + 1] == 5.0 and not rows[0].any()
