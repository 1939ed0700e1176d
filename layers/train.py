"""``train``: Flux's ``train!`` — one gradient step per data item."""
import math

import numpy as np

import optim
from adcore.annotations import Annotation, Const, Duplicated

from .grad import first_output, withgradient
from .staging.loop import compiled_train

__all__ = ["train", "NonFiniteLossError"]


class NonFiniteLossError(FloatingPointError):
    """The loss was NaN or infinite on a data item; ``index`` and ``item`` name it,
    ``epoch`` the pass over the data (from 0)."""

    def __init__(self, loss, index, item, epoch=0):
        self.loss, self.index, self.item, self.epoch = loss, index, item, epoch
        text = repr(item)
        if len(text) > 200:
            text = text[:200] + "..."
        where = f" in epoch {epoch}" if epoch else ""
        super().__init__(f"loss is {loss} on data item {index}{where}: {text}; stopping "
                         "training (the update for this item was not applied)")


def train(loss, model, data, state, *, epochs=1, progress=False, cluster=None):
    """For each item of ``data``, ``epochs`` times over: compute ``loss(model, *item)``
    (tuples are splatted, any other item is passed whole) and its gradient, then
    ``optim.update`` the model in place.

    ``model`` may be a ``Duplicated`` model: then adcore computes the gradients, and when
    the items all have the same shapes (and ``progress`` is off) every epoch, gradients
    and optimiser steps, runs as one native loop.  Returns the losses, one per step
    (``epochs * len(data)``), as a float64 numpy array.  A non-finite loss raises ``NonFiniteLossError``
    before that item's update.  ``progress=True`` shows a tqdm bar with the running loss.

    ``cluster=client`` (a ``distributed.Client``) trains data-parallel on its workers:
    each batch is split by rows across them, the gradients of the parts are summed in a
    fixed order and one step is applied, so the result equals training in one process to
    rounding (the loss must be a sum or a mean over rows; the first step checks it).
    ``data`` may then be ``adcore.distributed.scatter_batches(client, data)``, sent once
    for several calls.  See ``layers.data_parallel``.
    """
    optim.state.check_state(state, "train")
    if type(epochs) is not int or epochs < 1:
        raise ValueError(f"train: epochs must be a positive int, got {epochs!r}")
    if cluster is not None:
        from .data_parallel import train_on_cluster
        return train_on_cluster(loss, model, data, state, cluster, epochs, progress,
                                NonFiniteLossError)
    if epochs > 1 or (isinstance(model, Duplicated) and not progress):
        data = data if isinstance(data, (list, tuple)) else list(data)
    if isinstance(model, Duplicated) and not progress:
        losses = compiled_train(loss, model, data, state, NonFiniteLossError, epochs)
        if losses is not None:
            return losses
    losses = []
    for epoch in range(epochs):
        losses += _epoch(loss, model, data, state, progress, epoch)
    return np.array(losses, dtype=np.float64)


def _epoch(loss, model, data, state, progress, epoch):
    """One pass of ``train`` over ``data`` in Python; returns its losses."""
    items = data
    if progress:
        from tqdm.auto import tqdm
        items = tqdm(data, total=len(data) if hasattr(data, "__len__") else None)
    losses = []
    constants = not isinstance(model, Duplicated)
    for i, item in enumerate(items):
        args = item if isinstance(item, tuple) else (item,)
        if constants:  # the step needs the model's gradient only (Flux's too): data are constants
            args = [a if isinstance(a, Annotation) else Const(a) for a in args]
        val, grad = withgradient(loss, model, *args)
        l = float(first_output(val))
        if not math.isfinite(l):
            if progress:
                items.close()
            raise NonFiniteLossError(l, i, item, epoch)
        optim.update(state, model, grad[0])
        losses.append(l)
        if progress:
            items.set_postfix(loss=f"{l:.4g}", refresh=False)
    return losses
