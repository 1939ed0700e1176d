"""The batches of a training run, each split by rows into parts held by the workers."""
import numpy as np

from .holdings import Holdings, live_workers


class ScatteredBatches:
    """Training data on a cluster: every batch split along its first axis into up to
    ``parts`` pieces (one per worker by default), piece ``j`` of every batch held by the
    same worker.  Sent once; pass it as ``layers.train``'s data (with ``cluster=client``)
    for any number of epochs and calls.  ``len`` and indexing give the client's batches."""

    def __init__(self, client, data, parts=None):
        self.client = client
        self.items = data if isinstance(data, (list, tuple)) else list(data)
        workers = live_workers(client)
        parts = len(workers) if parts is None else parts
        if type(parts) is not int or parts < 1:
            raise ValueError(f"parts must be a positive int, got {parts!r}")
        self.pieces = [split(item, parts, b) for b, item in enumerate(self.items)]
        self.holdings = Holdings(client)
        self.index = [[None] * len(p) for p in self.pieces]
        for j in range(parts):
            mine = [(b, p[j]) for b, p in enumerate(self.pieces) if j < len(p)]
            got = self.holdings.own([piece for _, piece in mine],
                                    [f"part {j} of batch {b}" for b, _ in mine],
                                    worker=workers[j % len(workers)])
            for (b, _), i in zip(mine, got):
                self.index[b][j] = i
        self._whole = {}

    def __len__(self):
        return len(self.items)

    def __getitem__(self, b):
        return self.items[b]

    def futures(self, b):
        """The futures of batch ``b``'s parts, in order."""
        return [self.holdings.futures[i] for i in self.index[b]]

    def rows(self, b):
        """The number of rows of each part of batch ``b``."""
        return [rows_of(p) for p in self.pieces[b]]

    def whole(self, b):
        """Batch ``b`` in one piece on a worker (sent on first use; kept)."""
        if b not in self._whole:
            self._whole[b] = self.holdings.own([self.items[b]], [f"batch {b}"])[0]
        return self.holdings.futures[self._whole[b]]

    def release(self):
        """Let the workers drop the data."""
        self.holdings.release()


def scatter_batches(client, data, parts=None):
    """``data`` (a list of batches, as ``layers.train`` takes) split and sent to the workers
    once: a :class:`ScatteredBatches` to train on for several calls."""
    return ScatteredBatches(client, data, parts)


def _arrays(item):
    if isinstance(item, np.ndarray):
        return [item]
    if isinstance(item, tuple):
        return [a for a in item if isinstance(a, np.ndarray)]
    if isinstance(item, dict):
        return [a for a in item.values() if isinstance(a, np.ndarray)]
    return []


def rows_of(item):
    """The number of rows of a batch (the first dimension of its arrays)."""
    return _arrays(item)[0].shape[0]


def split(item, parts, b):
    """Batch ``item`` split along the first axis of its arrays into ``min(parts, rows)``
    pieces of the same form (values other than arrays go whole into every piece)."""
    arrays = _arrays(item)
    if not arrays or any(a.ndim == 0 for a in arrays):
        raise ValueError(f"training on a cluster splits each batch along the first axis of its "
                         f"arrays; batch {b} is a {type(item).__name__} without such arrays")
    rows = {a.shape[0] for a in arrays}
    if len(rows) != 1:
        raise ValueError(f"training on a cluster splits each batch by rows; the arrays of batch "
                         f"{b} have different first dimensions {sorted(rows)}")
    n = rows.pop()
    bounds = np.linspace(0, n, min(parts, n) + 1).round().astype(int) if n else [0, 0]
    return [_cut(item, lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]


def _cut(item, lo, hi):
    def cut(v):
        return np.ascontiguousarray(v[lo:hi]) if isinstance(v, np.ndarray) else v
    if isinstance(item, tuple):
        return tuple(cut(v) for v in item)
    if isinstance(item, dict):
        return {k: cut(v) for k, v in item.items()}
    return cut(item)
