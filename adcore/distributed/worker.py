"""What runs on the workers: the checks a worker answers before work starts, and the
gradient of one shard of a sum."""
import sys

from .errors import WorkerError


def versions():
    """The versions that must agree between the client and its workers."""
    import llvmlite
    import numba
    import adcore
    return {"adcore": adcore.__version__, "numba": numba.__version__,
            "llvmlite": llvmlite.__version__, "python": "%d.%d" % sys.version_info[:2]}


def address():
    """This worker's address (``"the client"`` outside a worker)."""
    try:
        from distributed import get_worker
        return get_worker().address
    except ValueError:
        return "the client"


def check_versions(expected):
    """Raise ``WorkerError`` when this worker's versions differ from the client's."""
    got = versions()
    wrong = [f"{k} {got.get(k)} (the client has {v})" for k, v in expected.items() if got.get(k) != v]
    if wrong:
        raise WorkerError(address(), "runs " + ", ".join(wrong) +
                          "; install the same versions on the client and every worker")


def failed(what, err):
    """A ``WorkerError`` for ``err`` raised while doing ``what`` on this worker."""
    if isinstance(err, WorkerError):
        return err
    return WorkerError(address(), f"{what} failed with {type(err).__name__}: {err}")


def shard_gradient(kernel, params, shard, index, expected):
    """The gradient of ``kernel(*params, *shard)`` with respect to ``params`` (the shard is
    constant); ``kernel`` is a ``Payload``."""
    import adcore
    from adcore import Const, Reverse
    check_versions(expected)
    data = shard if isinstance(shard, tuple) else (shard,)
    try:
        f = kernel.load()
        grads = adcore.gradient(Reverse, f, *params, *(Const(d) for d in data))
    except Exception as err:
        raise failed(f"the gradient of the kernel on shard {index}", err) from None
    return tuple(grads[:len(params)])


def add(a, b):
    """``a + b`` for gradients: tuples and lists by entry, ``None`` + ``None`` is ``None``."""
    if isinstance(a, (tuple, list)):
        return type(a)(add(x, y) for x, y in zip(a, b))
    if a is None:
        return b
    if b is None:
        return a
    return a + b
