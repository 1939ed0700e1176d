"""Parallel gradients run again and again, at 2 and 4 threads and on each threading layer
Numba ships, in fresh processes (``NUMBA_NUM_THREADS`` and ``NUMBA_THREADING_LAYER`` are read
at start-up): every run must give the serial gradient to rounding.  The kernels are those of
``tests/reverse/test_parallel.py``."""
import os
import pathlib
import subprocess
import sys

import pytest

RACE = """
import sys
sys.path[:0] = [{tests!r}, {tests!r} + '/reverse']
import numba, numpy as np
import adcore
from adcore import Reverse
import test_parallel as T

for name in ["independent", "gather", "lennard_jones", "rows", "array_expression", "stencil",
             "moving_range", "float32_sum", "cached_inner", "stencil_rows", "rows_overlap",
             "stencil_band", "wide_band", "wide_band_long", "pairwise", "overwritten_after",
             "overwritten_after_strided", "expression_2d", "read_in_row", "time_steps", "flat_stencil"]:
    args = T.ARGUMENTS[name]()
    expected = adcore.gradient(Reverse, T.SERIAL[name], *T._copied(args))
    for threads in {threads}:
        numba.set_num_threads(threads)
        for _ in range({repeat}):
            got = adcore.gradient(Reverse, T.PARALLEL[name], *T._copied(args))
            T._assert_same(got, expected, 1e-5 if name == "float32_sum" else 1e-12)
compiled = adcore.compile_gradient(Reverse, T.PARALLEL["gather"], *T._annotated(T.ARGUMENTS["gather"]()))
print("with tapes" if all("tape of its own" in line for line in compiled.parallel_loops) else "without tapes")
print("same every time on", numba.threading_layer())
"""


def _run(env, **fields):
    tests = str(pathlib.Path(__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-c", RACE.format(tests=tests, **fields)],
                          env=dict(os.environ, **env), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_accumulation_patterns_give_the_same_gradient_every_time_at_2_and_4_threads():
    out = _run({"NUMBA_NUM_THREADS": "4"}, threads=(2, 4), repeat=25)
    assert "same every time" in out and "with tapes" in out


def test_chunks_that_run_their_iterations_again_give_the_same_gradient():
    """ADCORE_CHUNK_TAPES=0: each chunk's reverse runs its iterations again, no tapes."""
    out = _run({"NUMBA_NUM_THREADS": "4", "ADCORE_CHUNK_TAPES": "0"}, threads=(2, 4), repeat=5)
    assert "same every time" in out and "without tapes" in out


@pytest.mark.parametrize("layer", ["workqueue", "omp", "tbb"])
def test_every_threading_layer_numba_ships(layer):
    out = _run({"NUMBA_NUM_THREADS": "2", "NUMBA_THREADING_LAYER": layer}, threads=(2,), repeat=3)
    assert f"same every time on {layer}" in out


ONE_THREAD = """
import sys
sys.path[:0] = [{tests!r}, {tests!r} + '/reverse']
import numpy as np
import adcore
from adcore import Duplicated, Reverse
import test_parallel as T

args = T.ARGUMENTS["gather"]()
T._assert_same(adcore.gradient(Reverse, T.PARALLEL["gather"], *T._copied(args)),
               adcore.gradient(Reverse, T.SERIAL["gather"], *T._copied(args)), 1e-12)
compiled = adcore.compile_gradient(Reverse, T.PARALLEL["gather"], *T._annotated(args))
print(compiled.parallel_loops)
"""


def test_with_one_thread_the_loops_are_differentiated_serially():
    tests = str(pathlib.Path(__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-c", ONE_THREAD.format(tests=tests)],
                          env=dict(os.environ, NUMBA_NUM_THREADS="1"), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Numba has one thread" in done.stdout
