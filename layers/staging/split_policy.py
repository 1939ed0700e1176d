"""How many parts a row-independent batch is split into, or why it runs serially.

The threads are Numba's (``numba.set_num_threads``, ``NUMBA_NUM_THREADS``: every core by
default, as PyTorch's intra-op threads).  A batch is cut into the most equal parts of at
least ``MIN_ROWS`` rows, at most one per thread, when its forward pass does at least
``MIN_WORK`` operations (fewer take less time than waking the threads).  A program whose matrix products are
large enough for the BLAS library to run them on its own threads (``BLAS_PRODUCT``
multiply-adds or more, with more than one BLAS thread: ``OPENBLAS_NUM_THREADS``,
``threadpoolctl``) is left to BLAS's threads: splitting its rows too would put two
pools on the same cores.
"""
import numba
import numpy as np
import threadpoolctl

from .. import conv_kernels

MIN_ROWS = 4                # rows per part below which a batch is not split
BLAS_PRODUCT = 1 << 22      # multiply-adds of a product that BLAS's threads take over
MIN_WORK = 1 << 17          # operations of a batch's forward pass below which threads do not pay


def thread_count():
    """The threads a split uses: Numba's (``numba.set_num_threads``, ``NUMBA_NUM_THREADS``)."""
    return numba.get_num_threads()


def part_count(batch, threads):
    """The most parts, at most ``threads``, that cut ``batch`` rows evenly into parts of at
    least ``MIN_ROWS``; 1 when none does."""
    for parts in range(min(threads, batch // MIN_ROWS), 1, -1):
        if batch % parts == 0:
            return parts
    return 1


def blas_threads():
    """The threads of the BLAS libraries loaded in the process (the most of any)."""
    info = threadpoolctl.threadpool_info()
    return max([i["num_threads"] for i in info if i.get("user_api") == "blas"], default=1)


def _products(records):
    """The multiply-adds of each matrix product and convolution of the recording."""
    for rec in records:
        if rec.op == "matmul":
            a = np.shape(rec.args[0])
            yield np.size(rec.value) * (a[-1] if a else 1)
        elif rec.op == "njit_kernel" and rec.attrs["kernel"] is conv_kernels.conv2d:
            yield np.size(rec.value) * int(np.prod(np.shape(rec.args[1])[1:], dtype=np.int64))


def work(records):
    """About the operations of the recording's forward pass: its products' multiply-adds
    and one per element of every other result."""
    return sum(_products(records)) + sum(np.size(r.value) for r in records if r.op != "input")


def largest_product(records):
    """The multiply-adds of the recording's largest product or convolution."""
    return max(_products(records), default=0)


def parts_for(batch, ops, product):
    """``(parts, None)``, or ``(1, why the batch runs serially)``, for a batch of ``batch``
    rows whose forward pass does ``ops`` operations, its largest product ``product``
    multiply-adds."""
    threads = thread_count()
    parts = part_count(batch, threads)
    if parts < 2:
        return 1, (f"{threads} Numba thread(s) for a batch of {batch} rows (parts of at "
                   f"least {MIN_ROWS} rows)")
    if ops < MIN_WORK:
        return 1, (f"too little work per batch for threads to pay (about {ops} operations; "
                   f"from {MIN_WORK})")
    blas = blas_threads()
    if product >= BLAS_PRODUCT and blas > 1:
        return 1, (f"its matrix products (up to {product} multiply-adds) run on BLAS's "
                   f"{blas} threads")
    return parts, None
