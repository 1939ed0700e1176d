"""Rows of a ``Duplicated`` step or epoch at 1 thread and at every core, timed side by side
(interleaved samples, so a change of machine load hits both alike), with the speed-up and
what the staged program does with threads (``layers.threads``)."""
import numba

from .rows import row, skipped


def at_threads(threads, fn):
    """``fn`` run while Numba has ``threads`` threads."""
    def run():
        before = numba.get_num_threads()
        numba.set_num_threads(threads)
        try:
            return fn()
        finally:
            numba.set_num_threads(before)
    return run


def thread_rows(workload, case, impl, step, describe, sampler, number=None, check=None):
    """Rows of ``step()`` at 1 thread and at every core (``NUMBA_NUM_THREADS``);
    ``describe()`` says what the program does with threads (asked at every core);
    ``check``: ``(err, tol)`` of the threaded result against the serial one, or ``None``."""
    every = numba.config.NUMBA_NUM_THREADS
    if every < 2:
        return [skipped(workload, case, f"{impl}, every core", "Numba has one thread")]
    fns = [at_threads(1, step), at_threads(every, step)]
    for fn in fns:
        fn()                             # stages the program
    how = at_threads(every, describe)()  # stages the split
    one, all_ = sampler.interleaved(fns, number=number)
    err, tol = check if check is not None else (None, None)
    return [row(workload, case, f"{impl}, 1 thread", one, note="the whole batch's serial program"),
            row(workload, case, f"{impl}, {every} threads", all_, err=err, tol=tol,
                note=f"{one.median / all_.median:.2f}x the speed at 1 thread; {how}")]
