"""Result rows: one implementation of one case of a workload, as stored in the JSON results."""


def row(workload, case, impl, timing=None, *, vs_ref=None, grad_obj=None, first_call_s=None,
        cached_bytes=None, alloc_bytes=None, err=None, tol=None, check=None, note=""):
    """One result row. ``timing`` (a ``timing.Timing``, seconds per what the case says) gives
    the samples and their summary; ``err`` against ``tol`` gives the pass/fail check; ``check``
    is a free-text check when there is no error number."""
    ok = None if err is None or tol is None else bool(err <= tol)
    if check is None and err is not None:
        check = f"err {err:.1e}" + ("" if ok is None else (" ok" if ok else " FAIL"))
    return dict(workload=workload, case=case, impl=impl,
                samples=None if timing is None else list(timing.samples),
                number=None if timing is None else timing.number,
                warmup=None if timing is None else timing.warmup,
                stats=None if timing is None else timing.stats(),
                vs_ref=vs_ref, grad_obj=grad_obj, first_call_s=first_call_s,
                cached_bytes=cached_bytes, alloc_bytes=alloc_bytes, err=err, tol=tol, ok=ok,
                check=check or "", note=note)


def median(r):
    """The row's median time in seconds, or None."""
    return None if r["stats"] is None else r["stats"]["median"]


def skipped(workload, case, impl, why):
    """A row for an implementation that did not run (a missing peer, an unsupported engine)."""
    return row(workload, case, impl, note=f"skipped: {why}")


def failed(workload, case, impl, exc):
    """A row for an implementation that raised: reported as a failed check, never a crash."""
    msg = f"{type(exc).__name__}: {exc}".splitlines()[0][:110]
    r = row(workload, case, impl, check="FAIL", note=msg)
    r["ok"] = False
    return r


def failures(rows):
    return [r for r in rows if r["ok"] is False]
