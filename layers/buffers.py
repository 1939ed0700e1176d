"""Non-trainable arrays of a model: a layer names them in ``__state_fields__``
(``BatchNorm``'s running statistics).  They are saved and printed, but gradients and
optimisers never see them."""
from adcore.tree import children, is_float_array


def buffers(model):
    """The non-trainable float arrays of ``model`` with their paths, in order."""
    out = []

    def walk(x, path):
        for name in getattr(type(x), "__state_fields__", ()):
            v = getattr(x, name)
            if is_float_array(v):
                out.append((path + (name,), v))
        for k, c in children(x):
            walk(c, path + (k,))

    walk(model, ())
    return out
