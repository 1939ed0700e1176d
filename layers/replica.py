"""What a worker does in data-parallel training (``train(..., cluster=client)``): it keeps
a replica of the model, and each step sets the replica's parameters to the client's and
returns the gradient of the loss on its part of the batch."""
import hashlib

import numpy as np

from adcore.annotations import Duplicated
from adcore.distributed.shipping import pickled
from adcore.distributed.worker import check_versions, failed
from adcore.tree import fmap, leaves

from .grad import first_output, withgradient

_REPLICAS = {}          # token -> Replica, in this worker process
_KEEP = 4               # replicas kept: a new one replaces the oldest


class Replica:
    """A copy of the model (``Duplicated`` when the client's is) and the loss."""

    def __init__(self, loss, model, duplicated):
        self.loss, self.model = loss, model
        self.arg = Duplicated(model) if duplicated else model
        self.params = unique_arrays(model)

    def gradient(self, params, part, weight):
        """``(weight * loss, weight * gradient)`` at ``params`` on ``part`` of a batch;
        the gradient has one entry per float array of the model, in ``leaves`` order
        (``None`` where the loss gives none)."""
        for mine, given in zip(self.params, params):
            np.copyto(mine, given)
        args = part if isinstance(part, tuple) else (part,)
        val, grad = withgradient(self.loss, self.arg, *args)
        flat = [None if g is None else weight * np.asarray(g) for g in positions(self.model, grad[0])]
        return weight * float(first_output(val)), tuple(flat)


def unique_arrays(model):
    """The model's float arrays, each once (a tied array appears at several places)."""
    seen, out = set(), []
    for _, a in leaves(model):
        if id(a) not in seen:
            seen.add(id(a))
            out.append(a)
    return out


def positions(model, grad):
    """The entries of ``grad`` (mirroring ``model``) at the model's float arrays, in order."""
    from adcore.tree import mirror
    out = []
    mirror(lambda x, g: out.append(g), model, grad)
    return out


def token(loss, model, duplicated):
    """What names a replica on the workers: the loss (a ``Payload``) and everything of the
    model but the values of its trainable arrays, which each step sets.  Calls of ``train``
    with the same loss and model structure share the replica and its compiled program."""
    skeleton = pickled(fmap(lambda a: (a.shape, a.dtype.str), model), "the model")
    return hashlib.sha1(f"{loss.digest} {skeleton.digest} {duplicated}".encode()).hexdigest()


def _replica(token, payload):
    replica = _REPLICAS.get(token)
    if replica is None:
        loss, model, duplicated = payload
        replica = Replica(loss.load(), model.load(keep=False), duplicated)
        while len(_REPLICAS) >= _KEEP:
            _REPLICAS.pop(next(iter(_REPLICAS)))
        _REPLICAS[token] = replica
    return replica


def prepare(token, payload, example, expected):
    """Check this worker, build its replica and compile its gradient on ``example`` (a
    part of the first batch made of zeros); returns the worker's address."""
    from adcore.distributed.worker import address
    check_versions(expected)
    try:
        replica = _replica(token, payload)
        replica.gradient([np.array(p) for p in replica.params], zeros(example), 1.0)
    except Exception as err:
        raise failed("preparing the model for training", err) from None
    return address()


def part_gradient(token, payload, params, part, weight):
    """One worker's share of a training step (see ``Replica.gradient``)."""
    try:
        return _replica(token, payload).gradient(params, part, weight)
    except Exception as err:
        raise failed("the gradient of the loss on its part of the batch", err) from None


class Zeros:
    """An array of zeros to make on the worker (nothing sent but its shape and dtype)."""

    def __init__(self, a):
        self.shape, self.dtype = a.shape, a.dtype


def example_of(part):
    """``part`` with its arrays replaced by ``Zeros``."""
    return _map(part, lambda a: Zeros(a) if isinstance(a, np.ndarray) else a)


def zeros(example):
    return _map(example, lambda z: np.zeros(z.shape, z.dtype) if isinstance(z, Zeros) else z)


def _map(item, f):
    if isinstance(item, tuple):
        return tuple(f(v) for v in item)
    if isinstance(item, dict):
        return {k: f(v) for k, v in item.items()}
    return f(item)
