"""adcore.from_llvm: foreign LLVM IR from hand-written .ll files (tests/ll), clang and rustc,
checked against central finite differences under Enzyme's semantics."""
import functools
import os
import shutil
import subprocess

import numba
import numpy as np
import pytest

import adcore
from adcore import ADError, Active, Const, Duplicated, Reverse, ReverseWithPrimal
from adcore.frontend.foreign import opaque_pointers
from c_ir import COMPILERS, DEFAULT, c_to_llvm
from fdcheck import check

LL = os.path.join(os.path.dirname(os.path.dirname(__file__)), "ll")
F32 = dict(eps=1e-3, rtol=2e-2, atol=1e-3)      # finite differences in single precision


@functools.cache
def fn(file, name):
    with open(os.path.join(LL, file)) as f:
        return adcore.from_llvm(f.read(), name)


def rand(*shape, dtype=np.float64, lo=0.2, hi=0.9, seed=1):
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(dtype)


IDX = np.array([0, 2, 2, 1, 0, 2], np.int32)

# (file, function, arguments, fdcheck options); the files mix typed and opaque pointers
CASES = [
    ("arith.ll", "chain", lambda: (2.7, 0.8, 1.3), {}),
    ("arith.ll", "ops", lambda: (np.array([2.7, 0.8, 1.3]), np.zeros(8)), {}),
    ("casts.ll", "casts", lambda: (rand(6, dtype=np.float32), 2.3, 6), F32),
    ("casts.ll", "scalef", lambda: (np.float32(0.7), 1.9), F32),
    ("control.ll", "piecewise", lambda: (0.8, 0), {}),
    ("control.ll", "piecewise", lambda: (0.8, 1), {}),
    ("control.ll", "piecewise", lambda: (1.3, 1), {}),
    ("control.ll", "piecewise", lambda: (-0.8, 7), {}),
    ("control.ll", "piecewise", lambda: (0.8, 7), {}),
    ("control.ll", "clip", lambda: (rand(8, lo=-1, hi=1), np.zeros(8), 8, -0.5, 0.6), {}),
    ("loops.ll", "dot", lambda: (rand(5), rand(5, seed=2), 5), {}),
    ("loops.ll", "matvec", lambda: (rand(3, 4), rand(4, seed=2), np.zeros(3), 3, 4), {}),
    ("loops.ll", "newton_sqrt", lambda: (2.3,), {}),
    ("math.ll", "mathfns", lambda: (rand(39), rand(39, seed=2), np.zeros(39)), {}),
    ("math.ll", "mathf", lambda: (0.6, np.array([0.3], np.float32)), F32),
    ("memory.ll", "smooth", lambda: (rand(7), 7, 3), {}),
    ("memory.ll", "scatter", lambda: (rand(6), rand(6, seed=2), IDX.copy(), rand(3), 6), {}),
    ("memory.ll", "lengths", lambda: (rand(4, 2), 4), {}),
    ("memory.ll", "cubic", lambda: (rand(4), 0.7), {}),
    ("memory.ll", "apply", lambda: (rand(4), np.zeros(4), 4), {}),
]


@pytest.mark.parametrize("file,name,args,opts", CASES,
                         ids=[f"{c[0][:-3]}-{c[1]}-{k}" for k, c in enumerate(CASES)])
def test_finite_differences(file, name, args, opts):
    check(fn(file, name), *args(), **opts)


def test_a_vector_store_reaching_the_next_iterations_element_keeps_the_reverse_counting_down():
    """Each iteration stores two lanes at its counter, the second overwritten by the next
    iteration's store: the iterations do not commute (adcore.plan.loop_order)."""
    check(fn("vector.ll", "voverlap"), rand(5), np.zeros(6), 5)


def test_a_wide_load_reaching_the_next_iterations_element_keeps_the_reverse_counting_down():
    """Each iteration reads its element and the next in one load before the next iteration
    stores to it: the iterations do not commute (adcore.plan.loop_order)."""
    check(fn("vector.ll", "vwideload"), rand(5), rand(6, seed=3), 5)


def test_vector_ir():
    check(fn("vector.ll", "vscale"), rand(2), 0.7)


def test_lanes_extracted_from_a_vector_add_to_their_own_lanes():
    """extractelement's adjoint goes to its lane (a lane extracted twice gets both, one
    never extracted none), with a variable and a constant index type."""
    check(fn("vector.ll", "vlanes"), rand(4), np.zeros(3), 0.7)


@pytest.mark.parametrize("offset", range(4))
def test_unaligned_wide_vectors_and_a_vector_math_call(offset):
    """256-bit loads and stores at every 4-byte offset from a 16-byte boundary, through
    ``llvm.tanh.v8f32`` (libmvec's ``_ZGVdN8v_tanhf`` where vector math is on): once a
    segmentation fault, as the shadows' accesses lost their ``align 4``."""
    x = rand(16 + offset, dtype=np.float32)[offset:offset + 10]
    check(fn("vector.ll", "vtanh8"), x, np.float32(0.6), **F32)


def test_stack_buffer():
    check(fn("stack.ll", "stackbuf"), np.array([1.5]), 1, 1)


# -- direct calls ----------------------------------------------------------------------------
def test_call_runs_in_place():
    x, out = np.array([2.7, 0.8, 1.3]), np.zeros(8)
    assert fn("arith.ll", "ops")(x, out) is None
    a, b, c = x
    np.testing.assert_allclose(out, [a + b, a - b, a * b, a / b, np.fmod(a, b), -a,
                                     a * b + c, a * b + c])
    u, v = rand(5), rand(5)
    fn("memory.ll", "smooth")(u, 5, 1)
    for i in range(1, 4):                   # one Gauss-Seidel sweep
        v[i] += 0.25 * (v[i - 1] - 2 * v[i] + v[i + 1]) + 0.1 * v[i] ** 2
    np.testing.assert_allclose(u, v)


def test_call_returns():
    x = np.array([-2.0, 0.1, 3.0, 0.2])
    count = fn("control.ll", "clip")(x, np.zeros(4), 4, -1.0, 1.0)
    assert count == 2 and isinstance(count, int)
    assert fn("loops.ll", "newton_sqrt")(4) == pytest.approx(2.0)     # int for a double
    value = fn("casts.ll", "scalef")(0.5, 2.0)
    assert value == pytest.approx(0.5)
    assert fn("loops.ll", "dot")(np.ones(3), np.arange(3.0), 3) == 3.0


def test_call_caches_per_argument_types():
    dot = fn("loops.ll", "dot")
    for _ in range(3):
        dot(np.ones(3), np.ones(3), 3)
    dot(np.ones((2, 2)), np.ones(4), 4)
    assert len(dot._stubs) == 2


def test_gradient_api():
    dot = fn("loops.ll", "dot")
    x, y = rand(4), rand(4, seed=2)
    gx, gy, gn = adcore.gradient(Reverse, dot, x, y, 4)
    np.testing.assert_allclose(gx, y)
    np.testing.assert_allclose(gy, x)
    assert gn is None
    (_, da), value = adcore.autodiff(ReverseWithPrimal, fn("memory.ll", "cubic"),
                                     Const(np.array([1.0, 2.0, 3.0, 4.0])), Active(0.5))
    assert value == pytest.approx(1 + 1 + 0.75 + 0.5)
    assert da == pytest.approx(2 + 3 + 3 * 4 * 0.25)
    assert "define" in adcore.primal_ir(fn("loops.ll", "dot"), x, y, 4)


def test_integer_return_is_not_seeded():
    x, dx, dout = np.array([-2.0, 0.1, 0.3]), np.zeros(3), np.ones(3)
    adcore.autodiff(Reverse, fn("control.ll", "clip"), Duplicated(x, dx),
                    Duplicated(np.zeros(3), dout), 3, -1.0, 1.0)
    np.testing.assert_array_equal(dx, [0.0, 1.0, 1.0])


# -- typed pointers --------------------------------------------------------------------------
@pytest.mark.parametrize("typed,opaque", [
    ("load double, double* %p", "load double, ptr %p"),
    ("i8** %p", "ptr %p"),
    ("%struct.T* %p, %\"class.std::vec\"* %q", "ptr %p, ptr %q"),
    ("[4 x double]* %p, <4 x float>* %v, { i32*, double }* %s", "ptr %p, ptr %v, ptr %s"),
    ("void (i8*, ...)* %f, double (double)** %g", "ptr %f, ptr %g"),
    ("float addrspace(1)* %p", "ptr addrspace(1) %p"),
    ("[4 x [3 x double]]* %p, <{ i8, double* }>* %q, %0** %r", "ptr %p, ptr %q, ptr %r"),
    ("{ double, double } (i8*)* %f, i32 (i32)* (i8)* %g", "ptr %f, ptr %g"),
    ('@s = constant [3 x i8] c"a*\\00" ; i8* comment', '@s = constant [3 x i8] c"a*\\00" ; i8* comment'),
    ("define void @f() noinline optnone {", "define void @f()   {"),
])
def test_opaque_pointers(typed, opaque):
    assert opaque_pointers(typed) == opaque


# -- errors ------------------------------------------------------------------------------------
def test_missing_and_declared_functions():
    with pytest.raises(ADError, match=r"'nope' is not in the module; defined functions: chain, ops"):
        fn("arith.ll", "nope")
    with pytest.raises(ADError, match=r"'llvm.fma.f64' is only declared"):
        fn("arith.ll", "llvm.fma.f64")


def test_parse_error_has_llvm_message():
    with pytest.raises(ADError, match=r"(?s)IR is invalid.*error: value doesn't match function result"):
        adcore.from_llvm("define void @f() {\n  ret i32 0\n}\n", "f")
    undominated = ("define double @f(i1 %c) {\nentry:\n  br i1 %c, label %a, label %b\n"
                   "a:\n  %x = fadd double 1.0, 2.0\n  br label %b\nb:\n  ret double %x\n}\n")
    with pytest.raises(ADError, match=r"(?s)IR is invalid.*does not dominate all uses"):
        adcore.from_llvm(undominated, "f")


def test_unsupported_signatures():
    with pytest.raises(ADError, match=r"argument 0 \(%v: <2 x double>\): unsupported parameter type"):
        adcore.from_llvm("define double @f(<2 x double> %v) {\n  ret double 0.0\n}\n", "f")
    with pytest.raises(ADError, match="returns ptr"):
        adcore.from_llvm("define ptr @f(ptr %p) {\n  ret ptr %p\n}\n", "f")
    with pytest.raises(ADError, match="variadic"):
        adcore.from_llvm("define void @f(i32 %n, ...) {\n  ret void\n}\n", "f")


def test_wrong_arguments():
    clip = fn("control.ll", "clip")
    x = np.zeros(3)
    with pytest.raises(ADError, match=r"clip takes 5 arguments \(ptr, ptr, i64, double, double\), got 2"):
        clip(x, x)
    with pytest.raises(ADError, match=r"argument 2 \(%n: i64\) is a scalar and takes a Python int"):
        clip(x, x, x, 0.0, 1.0)
    with pytest.raises(ADError, match=r"argument 1 \(%out: ptr\) is a pointer and takes a numpy array"):
        clip(x, 1.0, 3, 0.0, 1.0)
    with pytest.raises(ADError, match=r"argument 2 \(%n: i64\) takes an integer, got float64"):
        clip(x, x, 3.0, 0.0, 1.0)
    with pytest.raises(ADError, match=r"argument 0 .* accesses double through it, but the array is float32"):
        clip(x.astype(np.float32), x, 3, 0.0, 1.0)
    with pytest.raises(ADError, match=r"argument 2 \(%idx: ptr\).* accesses i32 through it, but the array is int64"):
        fn("memory.ll", "scatter")(x, x, np.zeros(3, np.int64), x, 3)
    with pytest.raises(ADError, match=r"argument 0 .* not contiguous"):
        clip(np.zeros(6)[::2], x, 3, 0.0, 1.0)
    with pytest.raises(ADError, match=r"argument 0 \(%a: double\) takes a float, got unicode"):
        fn("loops.ll", "newton_sqrt")("2")


def test_unresolved_external_call():
    f = adcore.from_llvm("declare double @mystery(double)\n"
                         "define double @g(double %a) {\n"
                         "  %r = call double @mystery(double %a)\n  ret double %r\n}\n", "g")
    with pytest.raises(ADError, match="g calls mystery, which this process does not define"):
        f(0.5)
    with pytest.raises(adcore.UnsupportedError, match="mystery"):
        adcore.gradient(Reverse, f, 0.5)


def _calling(callee, reverse, params, ret):
    """A foreign function ``g`` passing its parameters to the external ``callee``, whose
    custom rule is ``reverse``."""
    adcore.register_rule(callee, reverse)
    args = ", ".join(f"{t} %a{k}" for k, t in enumerate(params))
    call = f"call {ret} @{callee}({args})"
    body = f"  {call}\n  ret void" if ret == "void" else f"  %r = {call}\n  ret {ret} %r"
    return adcore.from_llvm(f"declare {ret} @{callee}({', '.join(params)})\n"
                            f"define {ret} @g({args}) {{\n{body}\n}}\n", "g")


@numba.njit
def _pointer_rule_reverse(x, n, dx):
    return None


@numba.njit
def _float_rule_reverse(a):
    return None


def test_unresolved_external_with_a_rule():
    """A custom rule does not make an undefined symbol callable: refused before running."""
    f = _calling("mystery_with_rule", _pointer_rule_reverse, ["ptr", "i64"], "void")
    with pytest.raises(adcore.LinkError, match="g calls mystery_with_rule, which this process does not"):
        adcore.autodiff(Reverse, f, Duplicated(np.ones(3), np.ones(3)), 3)


def test_external_rule_with_float_result_is_refused():
    """Rules of external symbols cannot return derivatives of float results or arguments."""
    f = _calling("float_with_rule", _float_rule_reverse, ["double"], "double")
    with pytest.raises(adcore.UnsupportedError, match="float result"):
        adcore.gradient(Reverse, f, 0.5)


@pytest.mark.parametrize("callee,t", [("llvm.powi.f64.i32", "double"), ("__powidf2", "double"),
                                      ("llvm.powi.f32.i32", "float"), ("__powisf2", "float")])
def test_integer_powers(callee, t):
    """powi with a run-time exponent: LLVM lowers it to the compiler builtin __powidf2,
    which adcore provides when the process lacks it."""
    f = adcore.from_llvm(f"declare {t} @{callee}({t}, i32)\n"
                         f"define {t} @p({t} %x, i32 %n) {{\n"
                         f"  %y = call {t} @{callee}({t} %x, i32 %n)\n  ret {t} %y\n}}\n", "p")
    tol = 1e-6 if t == "float" else 1e-13
    for n in (-3, -1, 0, 1, 2, 7):
        assert f(1.3, n) == pytest.approx(1.3 ** n, rel=tol)
        (d, _), y = adcore.autodiff(ReverseWithPrimal, f, Active(1.3), n)
        assert d == pytest.approx(n * 1.3 ** (n - 1), rel=tol, abs=tol)


def test_attribute_group_left_empty():
    """Dropping noinline from a group that holds nothing else must still parse (clang -O0)."""
    f = adcore.from_llvm("define double @sq(double %x) #0 {\n  %y = fmul double %x, %x\n"
                         "  ret double %y\n}\nattributes #0 = { noinline }\n"
                         "attributes #1 = { noinline optnone }\n", "sq")
    assert f(3.0) == 9.0
    assert adcore.gradient(Reverse, f, 3.0) == (6.0,)


def test_wrong_arguments_to_autodiff():
    x = np.zeros(3)
    with pytest.raises(ADError, match=r"argument 2 \(%n: i64\) takes an integer"):
        adcore.autodiff(Reverse, fn("control.ll", "clip"), Duplicated(x, x.copy()),
                        Duplicated(x.copy(), x.copy()), Active(3.0), 0.0, 1.0)


# -- compiled by clang and rustc ---------------------------------------------------------------
def _compile(command):
    assert shutil.which(command[0]), f"{command[0]} is not installed"
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


@functools.cache
def clang_ir(opt, compiler=DEFAULT):
    """``tests/ll/kernels.c`` compiled to LLVM IR with ``opt`` (space-separated flags)."""
    with open(os.path.join(LL, "kernels.c")) as f:
        return c_to_llvm(f.read(), opt, compiler)


CLANG_CASES = [
    ("sinsum", lambda: (rand(5), np.zeros(5), 5, 0.7), {}),
    ("scatter_axpy", lambda: (0.7, rand(5, dtype=np.float32), IDX[:5].copy(),
                              rand(3, dtype=np.float32), 5), F32),
    ("energy", lambda: (rand(6), 6, 0), {}),
    ("energy", lambda: (rand(6, lo=-1, hi=1), 6, 1), {}),
    ("energy", lambda: (rand(6), 6, 2), {}),
    ("heat", lambda: (rand(7), 7, 3), {}),
    ("square_plus", lambda: (rand(11, dtype=np.float32), 11), F32),
    ("vla_logsumexp", lambda: (rand(6, lo=-2, hi=2), 6), {}),
    ("vla_rounds", lambda: (rand(5), 5, 3), {}),
    ("int_power", lambda: (rand(5, lo=0.5, hi=1.5), 5, 3), {}),
    ("int_power", lambda: (rand(5, lo=0.5, hi=1.5), 5, -2), {}),
]


@pytest.mark.parametrize("compiler", sorted(COMPILERS))
@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3", "-O1 -g"])   # -O2, -O3 vectorise
@pytest.mark.parametrize("name,args,opts", CLANG_CASES,
                         ids=[f"{c[0]}-{k}" for k, c in enumerate(CLANG_CASES)])
def test_clang(opt, name, args, opts, compiler):
    f = adcore.from_llvm(clang_ir(opt, compiler), name)
    check(f, *args(), **opts)


@pytest.mark.parametrize("opt", ["-O1", "-O0"])
def test_clang_element_types(opt):
    f = adcore.from_llvm(clang_ir(opt), "scatter_axpy")
    assert [p.element for p in f.params] == [None, "float", "i32", "float", None]
    with pytest.raises(ADError, match="accesses float through it, but the array is float64"):
        f(0.5, np.zeros(2), np.zeros(2, np.int32), np.zeros(2, np.float32), 2)


RUST = """
#[no_mangle]
pub extern "C" fn expsum(x: *const f64, y: *mut f64, n: usize, a: f64) -> f64 {
    let xs = unsafe { std::slice::from_raw_parts(x, n) };
    let ys = unsafe { std::slice::from_raw_parts_mut(y, n) };
    let mut s = 0.0;
    for i in 0..n {
        ys[i] = (a * xs[i]).exp();
        s += ys[i] * xs[i];
    }
    s
}
"""


def test_rustc(tmp_path):
    src = tmp_path / "k.rs"
    src.write_text(RUST)
    ir = _compile(["rustc", "--crate-type=cdylib", "-C", "opt-level=1", "--emit=llvm-ir",
                   "-o", "-", str(src)])
    check(adcore.from_llvm(ir, "expsum"), rand(5), np.zeros(5), 5, 0.3)
