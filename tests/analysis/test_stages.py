"""Unit tests of the pipeline's stages on small hand-written IR: a failure here points at
one analysis (control flow, pointer bases, shadowed memory, clobbering, activity, the
save-or-recompute policy), not at a whole gradient."""
import llvmlite.binding as llvm
import numba
import numpy as np
import pytest

import adcore
from adcore import pipeline
from adcore.analysis.activity import Activity
from adcore.analysis.cfg import ControlFlow
from adcore.ir.writer import Emitter
from adcore.errors import UnsupportedError
from adcore.ir.model import Operand, read_function
from adcore.analysis.memory import Clobbers, ShadowedMemory
from adcore.analysis.pointers import PointerBases
from adcore.rules.scalar import is_differentiable_call, is_pure_call
from adcore.plan.values import Values

NO_RULES = (lambda instr: None, is_differentiable_call, is_pure_call)

# s = sum_i sin(x[i]) * w ; y[i] = 2 x[i]: a counted loop with a phi accumulator
LOOP = """
declare double @llvm.sin.f64(double)
define double @f(ptr %x, ptr %y, ptr %c, i64 %n, double %w) {
entry:
  %tmp = alloca double
  br label %head
head:
  %i = phi i64 [ 0, %entry ], [ %i1, %body ]
  %s = phi double [ 0.0, %entry ], [ %s1, %body ]
  %done = icmp sge i64 %i, %n
  br i1 %done, label %exit, label %body
body:
  %px = getelementptr double, ptr %x, i64 %i
  %xi = load double, ptr %px
  %pc = getelementptr double, ptr %c, i64 %i
  %ci = load double, ptr %pc
  %si = call double @llvm.sin.f64(double %xi)
  %t = fmul double %si, %w
  %u = fmul double %t, %ci
  %s1 = fadd double %s, %u
  %py = getelementptr double, ptr %y, i64 %i
  %two = fmul double %xi, 2.0
  store double %two, ptr %py
  store double %u, ptr %tmp
  %i1 = add i64 %i, 1
  br label %head
exit:
  %pick = select i1 %done, ptr %x, ptr %y
  %first = load double, ptr %pick
  %r = fadd double %s, %first
  ret double %r
}
"""


def function(text, name="f"):
    return read_function(llvm.parse_assembly(text).get_function(name))


def named(func, name):
    return next(v for v in list(func.args) + list(func.instructions()) if v.name == name)


@pytest.fixture(scope="module")
def loop():
    return function(LOOP)


def test_control_flow_finds_the_loop_and_its_counter(loop):
    cfg = ControlFlow(loop)
    assert [b.name for b in cfg.rpo][0] == "entry"
    assert {b.name for b in cfg.cyclic} == {"head", "body"}
    assert [l.header.name for l in cfg.loops] == ["head"]
    iv = cfg.ivs[named(loop, "i").block]
    assert iv.phi.name == "i" and iv.latch.name == "body" and iv.outside.name == "entry"


def test_pointer_bases(loop):
    bases = PointerBases(loop)
    x, y = named(loop, "x"), named(loop, "y")
    of = lambda name: bases.base[named(loop, name)]
    assert of("px") == {x} and of("py") == {y}
    assert of("pick") == {x, y}                              # a select joins both
    assert of("tmp") == {named(loop, "tmp")}                 # an alloca is its own base


def shadowed(func, names, pointers=None):
    pointers = pointers or PointerBases(func)
    return ShadowedMemory(func, pointers, [named(func, n) for n in names], lambda i: None, "f")


def test_shadowed_memory_and_mixed_pointers(loop):
    memory = shadowed(loop, ["x", "y"])
    px, pc = (named(loop, n) for n in ("px", "pc"))
    assert memory.is_shadowed(Operand(px.ref, "ptr", px))
    assert not memory.is_shadowed(Operand(pc.ref, "ptr", pc))
    assert named(loop, "tmp") in memory.shadow_allocs       # float memory on the stack
    only_x = shadowed(loop, ["x"])
    assert only_x.mixed_constants([named(loop, "y")]) == {named(loop, "y")}   # %pick mixes x and y


def activity(func, active_args, shadows, ret_active=True):
    memory = shadowed(func, shadows)
    arrays = [a for a in func.args if a.type == "ptr"]
    return Activity(func, memory, [named(func, a) for a in active_args], None, ret_active,
                    arrays, NO_RULES)


RETURNED = """
define void @g(ptr %x, double %w, ptr %out) {
entry:
  %a = load double, ptr %x
  %b = fmul double %a, %w
  %k = fptosi double %b to i64
  %c = fadd double %b, 1.0
  store double %c, ptr %out
  %d = fmul double %a, 3.0
  ret void
}
"""


def test_activity_varied_useful_active():
    g = function(RETURNED, "g")
    act = activity(g, ["w"], ["x", "out"])
    names = lambda values: {v.name for v in values}
    assert {"a", "b", "c", "d"} <= names(act.varied)
    assert "k" not in names(act.varied)                     # float -> int carries no derivative
    assert {"b", "c", "a", "w"} <= names(act.useful)          # they reach the store into %out
    assert "d" in names(act.varied) and "d" not in names(act.active)   # computed, never used
    no_shadow = activity(g, ["w"], ["x"])
    assert named(g, "out") in no_shadow.unshadowed_writes   # a Const array receives derivatives


def test_activity_refuses_what_it_cannot_differentiate():
    bits = function("""
define void @h(ptr %x) {
  %a = load double, ptr %x
  %b = bitcast double %a to i64
  %c = xor i64 %b, 1
  %d = bitcast i64 %c to double
  store double %d, ptr %x
  ret void
}""", "h")
    with pytest.raises(UnsupportedError, match="no derivative rule for this instruction"):
        activity(bits, [], ["x"])


def test_clobbers_decide_what_can_be_reloaded(loop):
    pointers = PointerBases(loop)
    clobbers = Clobbers(loop, pointers, lambda i: None, is_pure_call,
                        [named(loop, "x"), named(loop, "y"), named(loop, "c")], distinct_arrays=True)
    assert clobbers.can_reload(named(loop, "xi"))           # x is never written
    assert clobbers.written_bases() == {named(loop, "y"), named(loop, "tmp")}
    overlapping = Clobbers(loop, pointers, lambda i: None, is_pure_call,
                           [named(loop, "x"), named(loop, "y")], distinct_arrays=False)
    assert not overlapping.can_reload(named(loop, "xi"))    # y may alias x


def test_save_or_recompute_policy(loop):
    cfg = ControlFlow(loop)
    clobbers = Clobbers(loop, PointerBases(loop), lambda i: None, is_pure_call,
                        [named(loop, "x"), named(loop, "y"), named(loop, "c")], True)
    values = Values(cfg, clobbers, Emitter({"x"}), lambda t, hint: f"%slot.{hint}")
    assert values.recomputable(named(loop, "si"))           # a math call on a reloadable load
    assert values.saved_bytes(named(loop, "si")) == 0        # nothing new must be kept for it
    assert values.runs_backwards(named(loop, "i"))          # the counter is run backwards
    assert not values.runs_backwards(named(loop, "s"))
    assert not values.recomputable(named(loop, "s"))        # the accumulator phi is kept
    assert values.saved_bytes(named(loop, "s")) == 8


@numba.njit
def _scale_sum(x, a):
    return np.sum(x * a)


def test_pipeline_primal_is_what_primal_ir_shows():
    x = np.ones(3)
    argtypes = (numba.typeof(x), numba.typeof(0.5))
    assert pipeline.primal(_scale_sum, argtypes).ir == adcore.primal_ir(_scale_sum, x, 0.5)


def test_pipeline_layout_of_the_gradient_parameters():
    x = np.ones(3)
    anns = [adcore.Duplicated(x, np.zeros(3)), adcore.Active(0.5)]
    argtypes = (numba.typeof(x), numba.typeof(0.5))
    layout = pipeline.Layout(pipeline.primal(_scale_sum, argtypes), anns, argtypes, None, None)
    assert layout.duplicated == [0] and layout.arrays == [0]
    assert layout.active == [2 + len(layout.groups[0])]     # after retptr, excinfo and x's fields
    assert [str(t) for t in layout.result.types] == ["float64", "float64", "int64"]


def test_reading_a_function_keeps_llvmlites_lock_callbacks():
    """read_function runs without Numba's timing callbacks on llvmlite's lock and puts them
    back (Numba's compile events keep working)."""
    lock = llvm.ffi.lib._lock
    before = list(lock._cblist)
    assert before                      # Numba registers its llvm_lock event
    function(LOOP)
    assert lock._cblist == before
