"""Data-parallel gradients and training on Dask distributed.

``gradient(kernel, client, shards, *params)`` differentiates a sum over data shards that
live on a cluster's workers; ``layers.train(..., cluster=client)`` splits each batch of a
training run across them.  Each worker differentiates its part with adcore's compiled
gradient (compiled once per worker process and kept), and the parts are summed in a fixed
tree order, so a result does not depend on which worker ran what.

Needs the ``distributed`` package: ``pip install "adcore[distributed]"``.
"""
try:
    import distributed as _distributed  # noqa: F401
except ImportError as err:               # pragma: no cover - depends on the installation
    raise ImportError("adcore.distributed runs on Dask distributed, which is not installed: "
                      "pip install \"adcore[distributed]\" (or pip install distributed)") from err

from .errors import DistributedError, WorkerError
from .gradient import gradient
from .batches import ScatteredBatches, scatter_batches

__all__ = ["gradient", "scatter_batches", "ScatteredBatches", "DistributedError", "WorkerError"]
