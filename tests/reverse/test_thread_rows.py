"""The threads' private shadows of a parallel loop's reverse: one zeroed row per thread,
each on pages of its own (threads adding into one page slow each other down)."""
import numpy as np
from hypothesis import given, settings, strategies as st

from adcore.reverse.parallel_loops import PAGE_BYTES, add_private_rows, thread_rows


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
