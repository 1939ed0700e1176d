"""The compile stage's choices (adcore.backend.loop_hints, adcore.backend.native): which loops LLVM may
loop-vectorise, and that hinted code still computes the same numbers."""
import ctypes

import llvmlite.binding as llvm
import numpy as np
import pytest

from adcore import numba_abi
from adcore.backend import loop_hints, native


def _loop(name, accesses):
    """``void @name(ptr %x, ptr %y, i64 %n)``: y[i] += x[i] * k for k in 1..accesses/3,
    in one loop of ``accesses`` loads and stores over i < n."""
    body = []
    for k in range(accesses // 3):
        body += [f"  %x{k} = load double, ptr %px", f"  %y{k} = load double, ptr %py",
                 f"  %m{k} = fmul double %x{k}, {k + 1}.0", f"  %s{k} = fadd double %y{k}, %m{k}",
                 f"  store double %s{k}, ptr %py"]
    return "\n".join([
        f"define void @{name}(ptr noalias %x, ptr noalias %y, i64 %n) {{",
        "entry:", "  %empty = icmp sle i64 %n, 0", "  br i1 %empty, label %exit, label %body",
        "body:", "  %i = phi i64 [ 0, %entry ], [ %i1, %body ]",
        "  %px = getelementptr double, ptr %x, i64 %i", "  %py = getelementptr double, ptr %y, i64 %i",
        *body,
        "  %i1 = add i64 %i, 1", "  %more = icmp slt i64 %i1, %n",
        "  br i1 %more, label %body, label %exit",
        "exit:", "  ret void", "}", ""])


SMALL, LARGE = _loop("small", 6), _loop("large", 3 * (loop_hints.MAX_VECTORISED_ACCESSES // 3 + 1))


def test_only_loops_over_the_limit_are_marked():
    assert loop_hints.large_loop_latches(SMALL) == []
    assert loop_hints.without_vectorising_large_loops(SMALL) == SMALL
    text = SMALL + LARGE
    [latch] = loop_hints.large_loop_latches(text)
    assert "br i1 %more" in text.split("\n")[latch] and latch > len(SMALL.split("\n"))
    hinted = loop_hints.without_vectorising_large_loops(text)
    assert hinted.count("!llvm.loop") == 1 and '"llvm.loop.vectorize.enable", i1 false' in hinted
    llvm.parse_assembly(hinted).verify()


def test_marks_get_fresh_metadata_ids_and_skip_loops_already_marked():
    text = LARGE + '!0 = !{!"existing"}\n'
    hinted = loop_hints.without_vectorising_large_loops(text)
    assert "!llvm.loop !2" in hinted and "!2 = distinct !{!2, !1}" in hinted
    llvm.parse_assembly(hinted).verify()
    assert loop_hints.large_loop_latches(hinted) == []
    assert loop_hints.without_vectorising_large_loops(hinted) == hinted


def test_a_small_loop_is_still_vectorised_and_a_large_one_is_not():
    module = llvm.parse_assembly(loop_hints.without_vectorising_large_loops(SMALL + LARGE))
    module.triple = numba_abi.target_machine().triple
    native.optimise(module)
    vectorised = {fn.name: "vector.body" in str(fn) for fn in module.functions}
    assert vectorised == {"small": True, "large": False}


@pytest.mark.parametrize("name, optimised", [("small", False), ("large", False), ("small", True)])
def test_hinted_code_computes_the_same_numbers(name, optimised):
    """As does code compiled without optimisation (``optimised``: IR Numba optimised)."""
    text = SMALL if name == "small" else LARGE
    symbol = f"adcore_test_hinted_{name}_{optimised}"
    compiled = native.compile_ir(text, symbol, entry=name, optimised=optimised)
    assert ("vector.body" in compiled.ir) == (name == "small" and not optimised)
    run = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        native._defined[symbol])
    x, y = np.arange(1.0, 38.0), np.full(37, 0.5)
    expected = y + x * sum(range(1, text.count("fmul") + 1))
    run(x.ctypes.data, y.ctypes.data, x.size)
    np.testing.assert_allclose(y, expected, rtol=1e-14)
