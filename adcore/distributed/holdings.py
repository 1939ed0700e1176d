"""What the workers hold for the client, and how work goes on when a worker dies.

Values the client sent (``client.scatter``) have no lineage: when the worker holding one
dies, Dask cannot recompute it.  ``Holdings`` keeps the client's copy of each value it
scattered, so after a loss it sends the lost ones again to the live workers and the work
is retried; values the user gave as futures are Dask's to recompute (computed ones have
lineage) or, when scattered by the user, reported as lost.
"""
from concurrent.futures import CancelledError

from distributed.comm import CommClosedError
from distributed.scheduler import KilledWorker

from .errors import DistributedError

ATTEMPTS = 4          # tries of one piece of work, the first included
_GONE = ("cancelled", "lost", "error")


class NoWorkers(DistributedError):
    """The cluster has no workers (for now: a nanny may be starting one)."""


def live_workers(client):
    """The addresses of the client's workers, sorted; ``NoWorkers`` when there are none."""
    workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
    if not workers:
        raise NoWorkers("the cluster has no workers")
    return workers


class Holdings:
    """Futures of values on the workers: ``own`` ones the client can send again, and
    ``given`` ones (the user's futures)."""

    def __init__(self, client):
        self.client = client
        self.values = []       # the client's copy, or None for a given future
        self.futures = []
        self.names = []        # how an error names each value
        self.broadcast = []

    def own(self, values, names, worker=None, broadcast=False):
        """Scatter ``values`` (to ``worker``, or to every worker) and hold them; returns
        their indices."""
        if not values:
            return []
        workers = None if worker is None else [worker]
        futures = self.client.scatter(list(values), workers=workers, broadcast=broadcast,
                                      hash=False)
        return self._keep(values, futures, names, broadcast)

    def given(self, futures, names):
        """Hold the user's ``futures``; returns their indices."""
        return self._keep([None] * len(futures), futures, names, False)

    def _keep(self, values, futures, names, broadcast):
        start = len(self.futures)
        self.values += list(values)
        self.futures += list(futures)
        self.names += list(names)
        self.broadcast += [broadcast] * len(futures)
        return list(range(start, len(self.futures)))

    def recover(self):
        """Send again the values lost with their workers (spread over the live ones); a
        ``DistributedError`` when a lost value is not the client's to send."""
        lost = [k for k, f in enumerate(self.futures) if f.status in _GONE]
        if not lost:
            return
        workers = live_workers(self.client)
        for k in lost:
            if self.values[k] is None:
                raise DistributedError(f"{self.names[k]} was lost with the worker holding it "
                                       f"and Dask cannot compute it again (it was scattered); "
                                       f"scatter it again, or pass the client's arrays")
        for n, k in enumerate(lost):
            broadcast = self.broadcast[k]
            target = None if broadcast else [workers[n % len(workers)]]
            try:
                self.futures[k] = self.client.scatter([self.values[k]], workers=target,
                                                      broadcast=broadcast, hash=False)[0]
            except KeyError:                # the scheduler no longer knows that worker
                raise NoWorkers(f"the worker chosen for {self.names[k]} died") from None

    def release(self):
        """Let the workers drop the values the client sent (the user's futures stay)."""
        for value, f in zip(self.values, self.futures):
            if value is not None:
                f.release()
        self.values, self.futures, self.names, self.broadcast = [], [], [], []


def recovering(holdings, attempt, what):
    """``attempt()``, tried again after a worker dies (lost values sent again first); a
    ``DistributedError`` naming ``what`` when the cluster cannot finish it."""
    last = None
    for n in range(ATTEMPTS):
        try:
            if n:
                _wait_for_a_worker(holdings.client, what)
                holdings.recover()
            return attempt()
        except KilledWorker as err:
            raise DistributedError(f"{what} cannot finish: {err.allowed_failures + 1} workers died "
                                   f"while running its task {err.task!r} (the last was "
                                   f"{getattr(err.last_worker, 'address', err.last_worker)})") from None
        except (CancelledError, CommClosedError, OSError, NoWorkers) as err:
            last = err                      # a worker died: its values are sent again
    raise DistributedError(f"{what} cannot finish: the cluster lost its work {ATTEMPTS} times "
                           f"(last: {type(last).__name__}: {last})")


def _wait_for_a_worker(client, what, timeout=60):
    try:
        client.wait_for_workers(1, timeout=timeout)
    except TimeoutError:
        raise DistributedError(f"{what} cannot finish: the cluster has had no workers for "
                               f"{timeout} s") from None


BY_VALUE = 1 << 20      # bytes of parameters sent inside each task; more are scattered once


def by_value_or_sent(client, params):
    """``params`` to pass to the tasks of one step: as they are when small (they travel with
    each task), else a future of them sent to every worker (one transfer each)."""
    size = sum(getattr(p, "nbytes", 0) for p in params)
    if size <= BY_VALUE:
        return params
    return client.scatter([params], broadcast=True, hash=False)[0]


def tree_sum(items, add):
    """``items`` summed with ``add`` in a fixed tree (adjacent pairs, level by level), so
    the rounding does not depend on where or when each sum runs."""
    level = list(items)
    if not level:
        raise ValueError("nothing to sum")
    while len(level) > 1:
        pairs = [add(level[k], level[k + 1]) for k in range(0, len(level) - 1, 2)]
        level = pairs + level[len(level) - len(level) % 2:]
    return level[0]
