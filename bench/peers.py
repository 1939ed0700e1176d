"""The peer AD systems (PyTorch CPU, JAX CPU jitted, HIPS autograd), when installed.

``get(name)`` returns the module or None; ``why(name)`` says why a peer is missing;
``engines(f, params, consts)`` runs one numpy-style function on every installed peer.
Install them with ``pip install -e ".[peers]"``. PyTorch and JAX run on one thread, like
the Numba kernels (on a shared 2-core machine PyTorch's spinning thread pool made timings
erratic, and XLA's Eigen pool otherwise spreads a product over both cores).
"""
import importlib
import os

import numpy as np

NAMES = ("torch", "jax", "autograd")
_loaded = {}
_errors = {}


def get(name):
    """The peer's module (``jax`` comes configured for CPU and float64), or None."""
    if name not in _loaded:
        try:
            if name == "jax":
                _one_thread_xla()
                jax = importlib.import_module("jax")
                jax.config.update("jax_platforms", "cpu")
                jax.config.update("jax_enable_x64", True)
                importlib.import_module("jax.numpy")
                _loaded[name] = jax
            elif name == "torch":
                torch = _loaded[name] = importlib.import_module("torch")
                torch.set_num_threads(1)
            else:
                _loaded[name] = importlib.import_module(name)
                if name == "autograd":
                    importlib.import_module("autograd.numpy")
        except Exception as exc:  # ImportError, or a broken install: a note, never an error
            _loaded[name] = None
            _errors[name] = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return _loaded[name]


def _one_thread_xla():
    """XLA's CPU backend runs on one thread, like the others (by default its Eigen pool
    spreads a product over every core); set before JAX is imported."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_multi_thread_eigen" not in flags:
        os.environ["XLA_FLAGS"] = (flags + " --xla_cpu_multi_thread_eigen=false "
                                   "intra_op_parallelism_threads=1").strip()


def why(name):
    """The note for a missing peer."""
    if name in _errors and not _errors[name].startswith(("ImportError", "ModuleNotFoundError")):
        return f"{name} failed to import ({_errors[name]})"
    return f'{name} not installed (pip install -e ".[peers]")'


def version(name):
    """The installed version of a peer that imports, else None."""
    if get(name) is None:
        return None
    from importlib.metadata import version as dist_version
    return dist_version(name)


def engines(f, params, consts=()):
    """``{label: (objective(), withgradient() -> (float, tuple of numpy arrays))}`` for each
    peer, or ``{label: note}`` for a missing one. ``f(xp, *params, *consts)`` is a scalar
    written with the numpy-like module ``xp``; the gradient is with respect to ``params``."""
    out = {}
    n = len(params)
    torch = get("torch")
    if torch is None:
        out["PyTorch"] = why("torch")
    else:
        tp = [torch.tensor(p, requires_grad=True) for p in params]
        tc = [torch.from_numpy(np.ascontiguousarray(c)) for c in consts]

        def torch_obj():
            with torch.no_grad():
                return float(f(torch, *tp, *tc))

        def torch_grad():
            for p in tp:
                p.grad = None
            val = f(torch, *tp, *tc)
            val.backward()
            return float(val.detach()), tuple(p.grad.numpy() for p in tp)
        out["PyTorch"] = (torch_obj, torch_grad)

    jax = get("jax")
    if jax is None:
        out["JAX (jit)"] = why("jax")
    else:
        jnp = jax.numpy
        jp = [jnp.asarray(p) for p in params]
        jc = [jnp.asarray(c) for c in consts]
        jf = jax.jit(lambda *a: f(jnp, *a))
        jg = jax.jit(jax.value_and_grad(lambda *a: f(jnp, *a), argnums=tuple(range(n))))

        def jax_grad():
            val, g = jax.block_until_ready(jg(*jp, *jc))
            return float(val), tuple(np.asarray(v) for v in g)
        out["JAX (jit)"] = (lambda: float(jf(*jp, *jc)), jax_grad)

    autograd = get("autograd")
    if autograd is None:
        out["autograd"] = why("autograd")
    else:
        anp = autograd.numpy
        vg = autograd.value_and_grad(lambda p: f(anp, *p, *consts))

        def ag_grad():
            val, g = vg(tuple(params))
            return float(val), tuple(g)
        out["autograd"] = (lambda: float(f(anp, *params, *consts)), ag_grad)
    return out
