"""Central finite-difference checks of adcore.autodiff under Enzyme's semantics.

``L = r + sum_k <s_k, M_k after the call>``: ``r`` is the kernel's float return (if any),
``s_k`` the shadow each Duplicated array holds on entry.  On exit the shadow must hold
``dL/dM_k`` before the call, and each Active derivative ``dL/da``.
"""
import numpy as np

import adcore
from adcore import Active, Duplicated, Reverse


def _objective(f, values, seeds):
    copies = [v.copy() if isinstance(v, np.ndarray) else v for v in values]
    r = f(*copies)
    total = float(r) if isinstance(r, (float, np.floating)) else 0.0
    for k, s in seeds.items():
        total += float(np.sum(s.astype(np.float64) * copies[k].astype(np.float64)))
    return total


def fd_gradient(f, values, seeds, eps=1e-6):
    """Central differences of L w.r.t. every float scalar and float-array entry."""
    grads = []
    for k, v in enumerate(values):
        if isinstance(v, np.ndarray) and v.dtype.kind == "f":
            g = np.zeros(v.shape)
            for idx in np.ndindex(v.shape):
                plus = [x.copy() if isinstance(x, np.ndarray) else x for x in values]
                minus = [x.copy() if isinstance(x, np.ndarray) else x for x in values]
                plus[k][idx] += eps
                minus[k][idx] -= eps
                g[idx] = (_objective(f, plus, seeds) - _objective(f, minus, seeds)) / (2 * eps)
            grads.append(g)
        elif isinstance(v, (float, np.floating)):
            plus, minus = list(values), list(values)
            plus[k] = v + eps
            minus[k] = v - eps
            grads.append((_objective(f, plus, seeds) - _objective(f, minus, seeds)) / (2 * eps))
        else:
            grads.append(None)
    return grads


def check(f, *values, rtol=1e-5, atol=1e-6, eps=1e-6, seed=0, seeded=True, kernel=None, dret=None):
    """Differentiate ``f`` at ``values`` (floats Active, float arrays Duplicated with random
    seeds in their shadows) and compare with central differences.  Returns adcore's result.
    With ``kernel``, ``f`` is only the objective for the finite differences and ``kernel``
    (called with ``dret``) is what adcore differentiates."""
    rng = np.random.default_rng(seed)
    seeds = {k: (rng.standard_normal(v.shape).astype(v.dtype) if seeded else np.zeros_like(v))
             for k, v in enumerate(values) if isinstance(v, np.ndarray) and v.dtype.kind == "f"}
    expected = fd_gradient(f, values, seeds, eps)
    args = []
    for k, v in enumerate(values):
        if k in seeds:                       # the array itself: views keep their strides
            args.append(Duplicated(v, seeds[k].copy()))
        elif isinstance(v, (float, np.floating)):
            args.append(Active(v))
        else:
            args.append(v.copy() if isinstance(v, np.ndarray) else v)
    if kernel is None:
        got = adcore.autodiff(Reverse, f, *args)
    else:
        got = adcore.autodiff(Reverse, kernel, *args, dret=dret)
    for k, (a, g, e) in enumerate(zip(args, got, expected)):
        if isinstance(a, Duplicated):
            np.testing.assert_allclose(a.dval, e, rtol=rtol, atol=atol,
                                       err_msg=f"shadow of argument {k}")
        elif isinstance(a, Active):
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=f"Active argument {k}")
    return got, args


# -- forward mode -------------------------------------------------------------------------
def _outputs(f, values):
    """``f``'s float return (0 when none) and every float array after the call."""
    copies = [v.copy() if isinstance(v, np.ndarray) else v for v in values]
    r = f(*copies)
    r = float(r) if isinstance(r, (float, np.floating)) else 0.0
    return r, [c.astype(np.float64) for c in copies if isinstance(c, np.ndarray) and c.dtype.kind == "f"]


def fd_tangent(f, values, tangents, eps=1e-6):
    """Central differences of (return, arrays after) along ``tangents`` (None: constant)."""
    def moved(sign):
        return [v + sign * eps * t if t is not None else (v.copy() if isinstance(v, np.ndarray) else v)
                for v, t in zip(values, tangents)]
    (rp, ap), (rm, am) = _outputs(f, moved(1)), _outputs(f, moved(-1))
    return (rp - rm) / (2 * eps), [(p - m) / (2 * eps) for p, m in zip(ap, am)]


def check_forward(f, *values, rtol=1e-5, atol=1e-6, eps=1e-6, seed=0, lanes=1):
    """Forward mode of ``f`` at ``values`` along random tangents of every float scalar and
    float array (``lanes`` directions: BatchDuplicated when more than one), against central
    differences of the return and of the arrays after the call.  Returns the tangents."""
    rng = np.random.default_rng(seed)

    def direction(v):
        if isinstance(v, np.ndarray) and v.dtype.kind == "f":
            return rng.standard_normal(v.shape).astype(v.dtype)
        return float(rng.standard_normal()) if isinstance(v, (float, np.floating)) else None
    dirs = [[direction(v) for v in values] for _ in range(lanes)]
    args = []
    for k, v in enumerate(values):
        if dirs[0][k] is None:
            args.append(v.copy() if isinstance(v, np.ndarray) else v)
        elif lanes == 1:
            t = dirs[0][k]
            args.append(adcore.Duplicated(v.copy() if isinstance(v, np.ndarray) else v,
                                          t.copy() if isinstance(t, np.ndarray) else t))
        else:
            args.append(adcore.BatchDuplicated(v.copy() if isinstance(v, np.ndarray) else v,
                                               tuple(d[k].copy() if isinstance(d[k], np.ndarray) else d[k]
                                                     for d in dirs)))
    got = adcore.autodiff(adcore.Forward, f, *args)
    for j in range(lanes):
        dr, darrays = fd_tangent(f, values, dirs[j], eps)
        dy = got[j] if lanes > 1 else got
        if dy is not None:
            np.testing.assert_allclose(dy, dr, rtol=rtol, atol=atol, err_msg=f"return tangent, lane {j}")
        shadows = [(a.dval[j] if lanes > 1 else a.dval) if isinstance(a, (adcore.Duplicated, adcore.BatchDuplicated))
                   else np.zeros(a.shape) for a in args if isinstance(getattr(a, "val", a), np.ndarray)
                   and getattr(a, "val", a).dtype.kind == "f"]
        for k, (s, e) in enumerate(zip(shadows, darrays)):
            np.testing.assert_allclose(s, e, rtol=rtol, atol=atol, err_msg=f"array tangent {k}, lane {j}")
    return got
