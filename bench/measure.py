"""Measuring helpers shared by the workloads: memory and errors of answers."""
import resource
import tracemalloc

import numpy as np


def traced_bytes(fn):
    """Peak bytes allocated through Python's allocators (numpy included) during one call."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _status_kb(field):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def reset_peak_rss():
    """Reset the process's peak resident memory to the current one (Linux); returns the
    current resident bytes, or None where that cannot be done."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return None
    kb = _status_kb("VmRSS")
    return None if kb is None else kb * 1024


def peak_rss():
    """Peak resident bytes since the last ``reset_peak_rss`` (else since the process began)."""
    kb = _status_kb("VmHWM")
    if kb is None:
        kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb * 1024


def rel_err(got, ref):
    """max |got - ref| / max |ref| over arrays (or sequences of arrays)."""
    if isinstance(ref, (list, tuple)):
        num = max(float(np.max(np.abs(np.asarray(g, np.float64) - np.asarray(r, np.float64))))
                  for g, r in zip(got, ref))
        den = max(float(np.max(np.abs(np.asarray(r, np.float64)))) for r in ref)
    else:
        num = float(np.max(np.abs(np.asarray(got, np.float64) - np.asarray(ref, np.float64))))
        den = float(np.max(np.abs(np.asarray(ref, np.float64))))
    return num / max(den, 1e-300)


def central_fd(f, params, h=1e-6):
    """Central finite differences of the scalar ``f()`` with respect to each parameter array."""
    grads = []
    for p in params:
        g = np.zeros_like(p)
        for idx in np.ndindex(p.shape):
            old = p[idx]
            p[idx] = old + h
            up = f()
            p[idx] = old - h
            down = f()
            p[idx] = old
            g[idx] = (up - down) / (2 * h)
        grads.append(g)
    return grads
