"""Values sent to the workers once and kept there: a function or model is pickled on the
client (so a value that cannot be sent fails there, saying what), and each worker process
unpickles a payload once and keeps the object, so the gradients it compiles for it are
compiled once."""
import hashlib

import cloudpickle

from .errors import DistributedError

_UNPICKLED = {}          # (on a worker) digest -> the object, the last _KEEP ones
_KEEP = 8


class Payload:
    """A pickled value and the digest that names it on the workers."""

    __slots__ = ("digest", "data")

    def __init__(self, data):
        self.data = data
        self.digest = hashlib.sha1(data).hexdigest()

    def __reduce__(self):
        return Payload, (self.data,)

    def load(self, keep=True):
        """The object: one per worker process and digest, or with ``keep=False`` a new one
        (not kept)."""
        if not keep:
            return cloudpickle.loads(self.data)
        obj = _UNPICKLED.get(self.digest)
        if obj is None:
            obj = _UNPICKLED[self.digest] = cloudpickle.loads(self.data)
            while len(_UNPICKLED) > _KEEP:
                _UNPICKLED.pop(next(iter(_UNPICKLED)))
        return obj


def pickled(value, what):
    """``value`` as a :class:`Payload`; a ``DistributedError`` naming ``what`` when it
    cannot be pickled (a lock, an open file, a generator in a closure ...)."""
    try:
        return Payload(cloudpickle.dumps(value))
    except Exception as err:
        raise DistributedError(f"{what} cannot be sent to the workers: pickling it failed "
                               f"with {type(err).__name__}: {err}") from None


def name_of(f):
    """How messages name a function."""
    f = getattr(f, "py_func", f)
    return getattr(f, "__qualname__", None) or type(f).__name__
