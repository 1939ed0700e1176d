"""JAX's gradients of ``bench.parallel``'s kernels, in a process of their own: XLA reads its
thread count once, at start-up (``XLA_FLAGS``), so each thread count needs a new process.

    python -m bench.parallel_jax ARGUMENTS.npz CASE THREADS REPEAT

loads the case's array arguments (``a0``, ``a1``, ... and the integers ``static``), jits JAX's gradient of the case's objective (the same
vectorised formulas as PyTorch's rows), and prints JSON: the gradient and the seconds of
each of ``REPEAT`` timed calls after warm-up.
"""
import json
import os
import sys
import time


def _flags(threads):
    """XLA's CPU flags for ``threads`` intra-op threads (one: its Eigen pool off)."""
    if threads == 1:
        return "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    return f"--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads={threads}"


def objectives(jnp, jax):
    """``{case: (objective, how many leading arguments are differentiated)}``."""
    def gmm(alphas, means, logq, x):
        z = jnp.exp(logq)[None] * (x[:, None, :] - means[None])
        terms = alphas[None] + logq.sum(1)[None] - 0.5 * (z * z).sum(2)
        return jax.scipy.special.logsumexp(terms, axis=1).sum()

    def lennard_jones(pos):
        i, j = jnp.triu_indices(pos.shape[0], 1)
        d2 = ((pos[i] - pos[j]) ** 2).sum(1)
        inv6 = 1.0 / (d2 * d2 * d2)
        return (4.0 * (inv6 * inv6 - inv6)).sum()

    def stencil(u, m, steps):
        cur = u.reshape(m, -1)
        for _ in range(steps):
            c = cur[1:-1, 1:-1]
            lap = cur[:-2, 1:-1] + cur[2:, 1:-1] + cur[1:-1, :-2] + cur[1:-1, 2:] - 4.0 * c
            cur = cur.at[1:-1, 1:-1].set(c + 0.1 * lap + 0.01 * jnp.sin(c))
        return (cur * cur).sum()

    return {"gmm": (gmm, 3), "lennard_jones": (lennard_jones, 1), "stencil": (stencil, 1)}


def main(path, case, threads, repeat):
    os.environ["XLA_FLAGS"] = _flags(threads)
    import jax
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpy as np
    f, wrt = objectives(jnp, jax)[case]
    loaded = np.load(path)
    arrays = [jnp.asarray(loaded[f"a{k}"]) for k in range(len(loaded.files) - 1)]
    static = [int(v) for v in loaded["static"]]
    grad = jax.jit(jax.grad(lambda *a: f(*a, *static), argnums=tuple(range(wrt))))
    out = jax.block_until_ready(grad(*arrays))
    jax.block_until_ready(grad(*arrays))
    seconds = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        jax.block_until_ready(grad(*arrays))
        seconds.append(time.perf_counter() - t0)
    print(json.dumps(dict(grads=[np.asarray(g).tolist() for g in out], seconds=seconds)))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
