"""``train(..., cluster=client)``: data-parallel training on Dask distributed.

Every batch is split by rows across the workers (``adcore.distributed.ScatteredBatches``,
sent once); each step sends the parameters to the workers, each worker returns the
gradient of the loss on its part, the parts are summed in a fixed tree order, and the
client applies one optimiser step.  So the model after ``k`` steps equals training in one
process to rounding, and a step is applied whole or not at all.

Splitting a batch is right when the loss is a sum or a mean over the batch's rows.  The
first step checks which, against the gradient of the whole batch computed once on a
worker, and refuses a loss that is neither (a layer that mixes rows, say).
"""
import numpy as np

import optim
from adcore.annotations import Duplicated
from adcore.distributed import ScatteredBatches, DistributedError, scatter_batches
from adcore.distributed.holdings import (Holdings, by_value_or_sent, live_workers, recovering,
                                        tree_sum)
from adcore.distributed.shipping import name_of, pickled
from adcore.distributed.worker import add, versions
from adcore.tree import children, is_node, leaves

from . import replica


def train_on_cluster(loss, model, data, state, client, epochs, progress, nonfinite):
    """``train``'s loop with ``cluster=client`` (see ``layers.train``)."""
    from adcore.distributed.gradient import _check_client
    _check_client(client)
    duplicated = isinstance(model, Duplicated)
    value = model.val if duplicated else model
    _check_stateless(value)
    payload = (pickled(loss, f"the loss {name_of(loss)!r}"), pickled(value, "the model"),
               duplicated)
    own = not isinstance(data, ScatteredBatches)
    batches = scatter_batches(client, data) if own else data
    if batches.client is not client:
        raise ValueError("the ScatteredBatches were sent with another client than cluster=")
    run = _Run(client, loss, model, batches, payload)
    try:
        run.prepare()
        return run.epochs(state, epochs, progress, nonfinite)
    finally:
        run.holdings.release()
        if own:
            batches.release()


class _Run:
    """One call of ``train`` on a cluster."""

    def __init__(self, client, loss, model, batches, payload):
        self.client, self.loss, self.model, self.batches = client, loss, model, batches
        self.value = model.val if isinstance(model, Duplicated) else model
        self.params = replica.unique_arrays(self.value)
        self.token = replica.token(payload[0], self.value, payload[2])
        self.expected = versions()
        self.holdings = Holdings(client)
        self.payload = self.holdings.own([payload], ["the model"], broadcast=True)[0]
        self.weighting = None          # "sum" or "mean" once the first step has shown it

    def prepare(self):
        """Check every worker and compile its gradient, before any step."""
        if not len(self.batches):
            return
        example = replica.example_of(self.batches.pieces[0][0])
        tasks = [self.client.submit(replica.prepare, self.token, self.holdings.futures[self.payload],
                                    example, self.expected, workers=[w], allow_other_workers=False,
                                    pure=False)
                 for w in live_workers(self.client)]
        self.client.gather(tasks)

    def epochs(self, state, epochs, progress, nonfinite):
        losses = []
        bar = None
        if progress:
            from tqdm.auto import tqdm
            bar = tqdm(total=epochs * len(self.batches))
        try:
            for epoch in range(epochs):
                for b in range(len(self.batches)):
                    value, grad = recovering(self.batches.holdings,
                                             lambda: self._retrying_step(b),
                                             f"training step {len(losses)} (batch {b})")
                    if not np.isfinite(value):
                        raise nonfinite(value, b, self.batches[b], epoch)
                    self._apply(state, grad)
                    losses.append(value)
                    if bar is not None:
                        bar.update()
                        bar.set_postfix(loss=f"{value:.4g}", refresh=False)
        finally:
            if bar is not None:
                bar.close()
        return np.array(losses, dtype=np.float64)

    def _retrying_step(self, b):
        self.holdings.recover()         # the model's payload, when its workers died
        return self._step(b)

    def _step(self, b):
        """``(loss, gradient)`` of batch ``b`` at the current parameters."""
        client = self.client
        params = by_value_or_sent(client, tuple(self.params))
        rows = self.batches.rows(b)
        weights = [r / sum(rows) for r in rows] if self.weighting == "mean" and len(rows) > 1 \
            else [1.0] * len(rows)
        parts = [client.submit(replica.part_gradient, self.token, self.holdings.futures[self.payload],
                               params, f, w, pure=False)
                 for f, w in zip(self.batches.futures(b), weights)]
        if self.weighting is not None or len(rows) == 1:
            return tree_sum(client.gather(parts), add)
        whole = client.submit(replica.part_gradient, self.token, self.holdings.futures[self.payload],
                              params, self.batches.whole(b), 1.0, pure=False)
        return self._weigh(client.gather(parts), whole.result(), rows, b)

    def _weigh(self, parts, whole, rows, b):
        """The first steps: the combination of the parts that gives the whole batch's
        gradient (the same sums the workers do later, so the rounding is the same)."""
        fits = []
        for weighting in ("mean", "sum"):
            ws = [r / sum(rows) for r in rows] if weighting == "mean" else [1.0] * len(rows)
            scaled = [(w * l, tuple(None if g is None else w * g for g in gs))
                      for (l, gs), w in zip(parts, ws)]
            total = tree_sum(scaled, add)
            if _close(total[1], whole[1]):
                fits.append((weighting, total))
        if len(fits) == 2:             # the gradient does not tell them apart: use the whole
            return whole
        if not fits:
            raise DistributedError(
                f"the loss {name_of(self.loss)!r} is neither a sum nor a mean over the rows of "
                f"batch {b}: the gradient of the whole batch differs from the sum of its parts "
                f"({len(rows)} parts of {rows} rows); training on a cluster splits each batch "
                f"by rows, so train this loss in one process")
        self.weighting = fits[0][0]
        return fits[0][1]

    def _apply(self, state, grad):
        """One optimiser step with the summed gradient (one entry per float array)."""
        if isinstance(self.model, Duplicated):
            for (_, shadow), g in zip(leaves(self.model.dval), grad):
                if g is None:
                    shadow[...] = 0
                else:
                    np.copyto(shadow, g)
            optim.update(state, self.model)
        else:
            it = iter(grad)
            from adcore.tree import mirror
            optim.update(state, self.model, mirror(lambda x: next(it), self.value))


def _close(a, b):
    """Whether two gradients (tuples of arrays) agree to rounding."""
    for x, y in zip(a, b):
        if (x is None) != (y is None):
            return False
        if x is None:
            continue
        tol = 1e-4 if x.dtype == np.float32 else 1e-9
        scale = max(float(np.max(np.abs(y))) if y.size else 0.0, np.finfo(x.dtype).tiny)
        diff = float(np.max(np.abs(x - y))) if x.size else 0.0
        if diff > tol * scale:
            return False
    return True


def _check_stateless(model, path=()):
    """Refuse layers whose state changes with every batch in training mode (BatchNorm's
    running statistics, Dropout's random state): each worker would keep its own."""
    if is_node(model) and getattr(type(model), "__state_fields__", ()) \
            and getattr(model, "active", None) is not False:
        raise DistributedError(
            f"{type(model).__name__} at {'.'.join(map(str, path)) or 'the top'} of the model keeps state that changes with each batch in "
            f"training mode ({', '.join(type(model).__state_fields__)}); on a cluster each "
            f"worker would change its own copy.  Put it in test mode (layers.testmode) or "
            f"train in one process")
    for k, c in children(model):
        _check_stateless(c, path + (k,))
