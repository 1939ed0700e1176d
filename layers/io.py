"""Saving and loading model parameters: ``state``/``loadmodel`` and ``save``/``load``
(``.npz`` files keyed by the arrays' paths such as ``layers.0.weight``; ``save`` also
keeps the non-trainable arrays such as ``layers.1.running_mean``)."""
import numpy as np

from adcore.tree import leaves, mirror, path_string

from .buffers import buffers

__all__ = ["state", "loadmodel", "save", "load"]


def state(model):
    """The model's arrays as a plain tree (dicts for layers, tuples for ``Chain.layers``,
    ``None`` elsewhere), copied."""
    return mirror(np.copy, model)


def _assign(model, get, source, arrays=leaves):
    """Copy ``get(path)`` into each float array of ``arrays(model)`` in place, checking shapes."""
    for path, a in arrays(model):
        v = np.asarray(get(path))
        if v.shape != a.shape:
            raise ValueError(f"{source}: {path_string(path)} has shape {v.shape}, "
                             f"the model needs {a.shape}")
        a[...] = v
    return model


def loadmodel(model, tree):
    """Copy the arrays of ``tree`` (from ``state``) into ``model`` in place; returns it."""
    def get(path):
        t = tree
        for k in path:
            try:
                t = t[k]
            except (KeyError, IndexError, TypeError):
                raise ValueError(f"loadmodel: the state has no {path_string(path)}") from None
        return t

    return _assign(model, get, "loadmodel")


def _all_arrays(model):
    return leaves(model) + buffers(model)


def save(path, model):
    """Write the model's arrays, trainable and not, to the ``.npz`` file ``path``."""
    np.savez(path, **{path_string(p): a for p, a in _all_arrays(model)})


def load(path, model):
    """Read arrays saved by ``save`` into ``model`` in place (keys and shapes must
    match); returns the model."""
    with np.load(path) as f:
        names = {path_string(p) for p, _ in _all_arrays(model)}
        if set(f.files) != names:
            raise ValueError(f"load: {path} holds {sorted(f.files)}, the model needs {sorted(names)}")
        return _assign(model, lambda p: f[path_string(p)], f"load {path}", _all_arrays)
