"""``gradient``: the gradient of a sum over data shards held by a cluster's workers."""
import numbers

import numpy as np

from ..annotations import Annotation, Const
from ..errors import ActivityError
from . import worker
from .holdings import Holdings, by_value_or_sent, recovering, tree_sum
from .shipping import name_of, pickled


def gradient(kernel, client, shards, *params):
    """The gradient of ``sum_k kernel(*params, shards[k])`` with respect to ``params``.

    ``client`` is a ``distributed.Client``.  ``shards`` is a list of numpy arrays (sent to
    the workers for this call), of futures (``client.scatter(arrays)`` or computed: they
    stay on the workers across calls), or a ``dask.array`` split into blocks along its first
    axis; a shard that is a tuple is passed as several trailing arguments.  Each worker
    differentiates its shards with ``adcore.gradient`` (compiled once per worker process),
    and the parts are summed in a fixed tree order: the result is the same from run to run
    and equals, to rounding, the gradient over the concatenated data.  Returns one entry per
    parameter, as ``adcore.gradient(Reverse, kernel, *params, data)`` does without the
    data's entry (``None`` for a ``Const``).  A worker that dies is replaced: its work runs
    again elsewhere.
    """
    _check_client(client)
    _check_params(params)
    name = name_of(kernel)
    payload = pickled(kernel, f"the kernel {name!r}")
    pickled(params, f"the parameters of {name!r}")
    holdings = Holdings(client)
    try:
        indices = _hold(holdings, shards)
        expected = worker.versions()

        def attempt():
            sent = by_value_or_sent(client, params)
            parts = [client.submit(worker.shard_gradient, payload, sent, holdings.futures[i], n,
                                   expected, pure=False) for n, i in enumerate(indices)]
            return tree_sum(client.gather(parts), worker.add)
        return recovering(holdings, attempt, f"the gradient of {name!r}")
    finally:
        holdings.release()


def _check_client(client):
    from distributed import Client
    if not isinstance(client, Client):
        raise TypeError(f"expected a distributed.Client as the client, got {type(client).__name__}")


def _check_params(params):
    for k, p in enumerate(params):
        if isinstance(p, Const):
            continue
        if isinstance(p, Annotation):
            raise ActivityError(f"parameter {k}: distributed.gradient returns the gradients of "
                                f"plain arrays and floats (or takes Const), not "
                                f"{type(p).__name__}: a shadow would be added once per shard")
        if not (isinstance(p, np.ndarray) or isinstance(p, numbers.Number)):
            raise TypeError(f"parameter {k}: expected a float, an array or a Const, "
                            f"got {type(p).__name__}")


def _hold(holdings, shards):
    """The indices in ``holdings`` of the shards, scattered when the client has them."""
    from distributed import Future
    if _is_dask_array(shards):
        return holdings.given(_blocks(holdings.client, shards), _names(shards.numblocks[0]))
    if not isinstance(shards, (list, tuple)) or not shards:
        raise TypeError("shards must be a non-empty list of arrays or futures, or a dask array")
    futures = [s for s in shards if isinstance(s, Future)]
    if futures and len(futures) != len(shards):
        raise TypeError("shards must be all futures or all arrays, not a mix")
    if futures:
        return holdings.given(futures, _names(len(shards)))
    for n, s in enumerate(shards):
        parts = s if isinstance(s, tuple) else (s,)
        if not all(isinstance(a, np.ndarray) for a in parts):
            raise TypeError(f"shard {n} is a {type(s).__name__}; expected a numpy array, a tuple "
                            "of arrays or a future")
    workers = sorted(holdings.client.scheduler_info(n_workers=-1)["workers"]) or [None]
    indices = []
    for w, worker_ in enumerate(workers):             # shard n on worker n mod W
        mine = list(range(w, len(shards), len(workers)))
        got = holdings.own([shards[n] for n in mine], _names(len(shards))[w::len(workers)],
                           worker=worker_)
        indices += list(zip(mine, got))
    return [i for _, i in sorted(indices)]


def _names(n):
    return [f"shard {k}" for k in range(n)]


def _is_dask_array(x):
    return type(x).__name__ == "Array" and type(x).__module__.startswith("dask.array")


def _blocks(client, array):
    """Futures of a dask array's blocks along its first axis."""
    if any(len(c) != 1 for c in array.chunks[1:]):
        raise ValueError(f"a dask array of shards must be split along its first axis only; "
                         f"its chunks are {array.chunks} (rechunk it: x.rechunk({{1: -1}}))")
    blocks = array.to_delayed().reshape(-1)
    return client.compute(list(blocks))
