"""The errors of distributed work."""
from ..errors import ADError


class DistributedError(ADError):
    """Distributed work cannot go on: the cluster lost what it needs, a value cannot be
    sent to the workers, or the work is not a sum over its parts."""


class WorkerError(DistributedError):
    """A worker cannot do its part; ``worker`` is its address."""

    def __init__(self, worker, message):
        self.worker = worker
        super().__init__(f"worker {worker}: {message}")

    def __reduce__(self):                 # sent back from the worker to the client
        return _worker_error, (self.worker, str(self))


def _worker_error(worker, text):
    err = WorkerError.__new__(WorkerError)
    err.worker = worker
    DistributedError.__init__(err, text)
    return err
