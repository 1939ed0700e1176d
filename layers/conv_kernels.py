"""Numba kernels of the convolution and pooling layers, called through ``kernel_call``
(so adcore differentiates them on both engines; none has a written backward).

Arrays are row-major ``(batch, channels, height, width)``; a window position ``i`` along
an axis reads input rows ``i * stride - pad_lo + k * dilation`` for kernel offsets ``k``,
and offsets falling in the padding are skipped (zeros for a convolution).
"""
import numba
import numpy as np


def _njit(f):
    return numba.njit(cache=False, error_model="numpy")(f)


@_njit
def span(start, step, n, k):
    """The kernel offsets ``[lo, hi)`` with ``0 <= start + offset * step < n``, of ``k``."""
    lo = 0 if start >= 0 else (-start + step - 1) // step
    last = n - 1 - start
    hi = 0 if last < 0 else min(k, last // step + 1)
    return lo, max(lo, hi)


@_njit
def conv2d(out, x, w, sh, sw, ph, pw, dh, dw):
    """``out[b, o, i, j] = sum_{c,k,l} w[o, c, k, l] x[b, c, i sh - ph + k dh, j sw - pw + l dw]``:
    the input windows are unrolled into columns (im2col), then one BLAS product."""
    nb, nc, nh, nw = x.shape
    no, _, kh, kw = w.shape
    oh, ow = out.shape[2], out.shape[3]
    npix = oh * ow
    cols = np.zeros((nc * kh * kw, nb * npix), x.dtype)
    for b in range(nb):
        for i in range(oh):
            h0 = i * sh - ph
            klo, khi = span(h0, dh, nh, kh)
            for j in range(ow):
                w0 = j * sw - pw
                llo, lhi = span(w0, dw, nw, kw)
                q = b * npix + i * ow + j
                for c in range(nc):
                    for k in range(klo, khi):
                        for l in range(llo, lhi):
                            cols[(c * kh + k) * kw + l, q] = x[b, c, h0 + k * dh, w0 + l * dw]
    y = w.reshape(no, nc * kh * kw) @ cols
    for b in range(nb):
        for o in range(no):
            for i in range(oh):
                for j in range(ow):
                    out[b, o, i, j] = y[o, b * npix + i * ow + j]


@_njit
def pool2d(out, x, kh, kw, sh, sw, ph, pw, mean):
    """The maximum of each window (padding never wins), or with ``mean`` its mean with
    padding counted as zeros (NNlib's ``meanpool``)."""
    nb, nc, nh, nw = x.shape
    for b in range(nb):
        for c in range(nc):
            for i in range(out.shape[2]):
                h0 = i * sh - ph
                klo, khi = span(h0, 1, nh, kh)
                for j in range(out.shape[3]):
                    w0 = j * sw - pw
                    llo, lhi = span(w0, 1, nw, kw)
                    m = 0.0 if mean else x[b, c, h0 + klo, w0 + llo]
                    for k in range(klo, khi):
                        for l in range(llo, lhi):
                            v = x[b, c, h0 + k, w0 + l]
                            if mean:
                                m += v
                            elif v > m:
                                m = v
                    out[b, c, i, j] = m / (kh * kw) if mean else m
