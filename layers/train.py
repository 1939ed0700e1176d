"""``train``: Flux's ``train!`` — one gradient step per data item."""
import numpy as np

import optim
from adcore.annotations import Duplicated

from .grad import first_output, withgradient
from .staging.loop import compiled_train

__all__ = ["train", "NonFiniteLossError"]


class NonFiniteLossError(FloatingPointError):
    """The loss was NaN or infinite on a data item; ``index`` and ``item`` name it."""

    def __init__(self, loss, index, item):
        self.loss, self.index, self.item = loss, index, item
        text = repr(item)
        if len(text) > 200:
            text = text[:200] + "..."
        super().__init__(f"loss is {loss} on data item {index}: {text}; stopping training "
                         "(the update for this item was not applied)")


def train(loss, model, data, state, *, progress=False):
    """For each item of ``data``: compute ``loss(model, *item)`` (tuples are splatted, any
    other item is passed whole) and its gradient, then ``optim.update`` the model in place.

    ``model`` may be a ``Duplicated`` model: then adcore computes the gradients, and when
    the items all have the same shapes (and ``progress`` is off) the whole pass, gradients
    and optimiser steps, runs as one native loop.  Returns the list of losses.  A
    non-finite loss raises ``NonFiniteLossError`` before that item's update.
    ``progress=True`` shows a tqdm bar with the running loss.
    """
    optim.state.check_state(state, "train")
    if isinstance(model, Duplicated) and not progress:
        data = data if isinstance(data, (list, tuple)) else list(data)
        losses = compiled_train(loss, model, data, state, NonFiniteLossError)
        if losses is not None:
            return losses
    items = data
    if progress:
        from tqdm.auto import tqdm
        items = tqdm(data, total=len(data) if hasattr(data, "__len__") else None)
    losses = []
    for i, item in enumerate(items):
        args = item if isinstance(item, tuple) else (item,)
        val, grad = withgradient(loss, model, *args)
        l = float(first_output(val))
        if not np.isfinite(l):
            if progress:
                items.close()
            raise NonFiniteLossError(l, i, item)
        optim.update(state, model, grad[0])
        losses.append(l)
        if progress:
            items.set_postfix(loss=f"{l:.4g}", refresh=False)
    return losses
