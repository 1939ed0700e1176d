"""Measuring helpers shared by the workloads: timing, memory, errors and result rows."""
import resource
import statistics
import time
import tracemalloc

import numpy as np


def median_seconds(fn, repeats, warmup=1, number=None):
    """Median wall time of one ``fn()`` over ``repeats`` runs of ``number`` calls, after
    warm-up; ``number`` defaults to enough calls for about 2 ms per run."""
    for _ in range(warmup):
        fn()
    if number is None:
        t0 = time.perf_counter()
        fn()
        number = max(1, min(1000, int(2e-3 / max(time.perf_counter() - t0, 1e-7))))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return statistics.median(times)


def first_call(fn):
    """``(seconds, result)`` of one call: on a fresh compiled function, the compile latency."""
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


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


def row(workload, case, impl, ms=None, *, vs_ref=None, grad_obj=None, first_s=None,
        cached=None, alloc=None, err=None, tol=None, check=None, note="", text=None):
    """One line of the result table. ``err`` against ``tol`` gives the pass/fail check;
    ``check`` is a free-text check when there is no error number; ``text`` replaces the
    time shown (a time in another unit)."""
    ok = None if err is None or tol is None else bool(err <= tol)
    if check is None and err is not None:
        check = f"err {err:.1e}" + ("" if ok is None else (" ok" if ok else " FAIL"))
    return dict(workload=workload, case=case, impl=impl, ms=ms, vs_ref=vs_ref,
                grad_obj=grad_obj, first_s=first_s, cached=cached, alloc=alloc, err=err,
                ok=ok, check=check or "", note=note, text=text)


def skipped(workload, case, impl, why):
    """A row for an implementation that did not run (a missing peer, an unsupported engine)."""
    return row(workload, case, impl, note=f"skipped: {why}")


def failed(workload, case, impl, exc):
    """A row for an implementation that raised: reported as a failed check, never a crash."""
    msg = f"{type(exc).__name__}: {exc}".splitlines()[0][:110]
    r = row(workload, case, impl, check="FAIL", note=msg)
    r["ok"] = False
    return r


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
