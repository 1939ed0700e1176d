"""The IR model's instruction fields parsed from LLVM's text (predicate, flags, element and
allocated types, alignment, volatility, atomicity), on hand-written IR read as the pipeline
reads it."""
import llvmlite.binding as llvm
import pytest

from adcore.frontend.index_signs import remove_negative_index_tests
from adcore.analysis.cfg import ControlFlow
from adcore.ir.model import Instr, Synthetic, gep_element_type, read_function

IR = r"""
%pair = type { double, i64 }

declare double @llvm.sqrt.f64(double)

define void @f(ptr %p, i64 %n, double %x) {
entry:
  %lt = icmp slt i64 %n, 0
  %same = icmp samesign ult i64 %n, 4
  %"icmp.named" = icmp sge i64 %n, 1
  %ord = fcmp oeq double %x, 0.0
  %fast = fcmp fast une double %x, 0.0
  %nnan = fcmp nnan ninf olt double %x, 1.0
  %byte = getelementptr inbounds nuw i8, ptr %p, i64 8
  %elt = getelementptr double, ptr %p, i64 %n
  %fld = getelementptr inbounds { i64, ptr }, ptr %p, i64 %n, i32 1
  %arr = getelementptr [4 x double], ptr %p, i64 0, i64 %n
  %nested = getelementptr { [2 x double], <{ i32, i8 }> }, ptr %p, i64 1
  %named = getelementptr %pair, ptr %p, i64 %n, i32 0
  %vec = getelementptr <4 x float>, ptr %p, i64 %n
  %slot = alloca [4 x { double, i64 }], align 32
  %one = alloca double
  %vla = alloca i64, i64 %n, align 16
  %v = load volatile double, ptr %p, align 4
  %a = load atomic i64, ptr %p acquire, align 8
  %av = load atomic volatile i64, ptr %p seq_cst, align 8
  %plain = load double, ptr %byte, align 2
  store volatile double %x, ptr %p, align 16
  store double %x, ptr %elt, align 8
  %rmw = atomicrmw volatile add ptr %p, i64 1 seq_cst, align 8
  %sub = sub nuw nsw i64 %n, 1
  %add = add nsw i64 %n, 2
  %ex = udiv exact i64 %n, 2
  %or = or disjoint i64 %n, 1
  %z = zext nneg i32 7 to i64
  %m = fmul reassoc nsz double %x, %x
  %r = tail call fast double @llvm.sqrt.f64(double %x)
  %s = select i1 %lt, double %x, double %m
  ret void
}
"""


@pytest.fixture(scope="module")
def instrs():
    fn = read_function(llvm.parse_assembly(IR).get_function("f"))
    return {i.name or i.text.split()[0] + str(k): i for k, i in enumerate(fn.instructions())}


@pytest.mark.parametrize("name, predicate, flags", [
    ("lt", "slt", set()), ("same", "ult", {"samesign"}), ("icmp.named", "sge", set()),
    ("ord", "oeq", set()), ("fast", "une", {"fast"}), ("nnan", "olt", {"nnan", "ninf"})])
def test_compare_predicates(instrs, name, predicate, flags):
    assert instrs[name].predicate == predicate
    assert instrs[name].flags == flags


def test_no_predicate_outside_compares(instrs):
    assert all(i.predicate is None for i in instrs.values() if i.opcode not in ("icmp", "fcmp"))


@pytest.mark.parametrize("name, element, flags", [
    ("byte", "i8", {"inbounds", "nuw"}), ("elt", "double", set()),
    ("fld", "{ i64, ptr }", {"inbounds"}), ("arr", "[4 x double]", set()),
    ("nested", "{ [2 x double], <{ i32, i8 }> }", set()), ("named", "%pair", set()),
    ("vec", "<4 x float>", set())])
def test_gep_element_types(instrs, name, element, flags):
    gep = instrs[name]
    assert gep.element_type == element == gep_element_type(gep)
    assert gep.flags == flags
    assert gep.allocated_type is None


@pytest.mark.parametrize("name, allocated, align", [
    ("slot", "[4 x { double, i64 }]", 32), ("one", "double", 8), ("vla", "i64", 16)])
def test_allocas(instrs, name, allocated, align):
    assert (instrs[name].allocated_type, instrs[name].align, instrs[name].element_type) == \
        (allocated, align, None)


def test_loads_and_stores(instrs):
    stores = [i for i in instrs.values() if i.opcode == "store"]
    got = {n: (instrs[n].align, instrs[n].volatile, instrs[n].atomic)
           for n in ("v", "a", "av", "plain", "rmw")}
    assert got == {"v": (4, True, False), "a": (8, False, True), "av": (8, True, True),
                   "plain": (2, False, False), "rmw": (8, True, True)}
    assert [(s.align, s.volatile, s.atomic) for s in stores] == [(16, True, False), (8, False, False)]


def test_align_absent(instrs):
    """Only memory instructions have an alignment; a load written without one has none."""
    assert all(i.align is None for i in instrs.values()
               if i.opcode not in ("load", "store", "alloca", "atomicrmw", "cmpxchg"))
    block = instrs["lt"].block
    load = Instr(block, "q", "load", "double", "%q = load double, ptr %p")
    assert (load.align, load.volatile, load.atomic) == (None, False, False)
    call = Instr(block, "c", "call", "void", "%c = call ptr @g(ptr align 8 %p)")
    assert call.align is None


@pytest.mark.parametrize("name, flags", [
    ("sub", {"nuw", "nsw"}), ("add", {"nsw"}), ("ex", {"exact"}), ("or", {"disjoint"}),
    ("z", {"nneg"}), ("m", {"reassoc", "nsz"}), ("r", {"fast"}), ("s", set()), ("plain", set())])
def test_flags(instrs, name, flags):
    assert instrs[name].flags == flags


def test_fields_follow_a_new_text(instrs):
    """A rewritten instruction (index_signs' constant tests, a Synthetic's text set after it
    is made) is parsed again."""
    fn = read_function(llvm.parse_assembly(IR).get_function("f"))
    lt = next(i for i in fn.instructions() if i.name == "lt")
    assert lt.predicate == "slt"
    assert remove_negative_index_tests(fn, ControlFlow(fn), {fn.args[1]}) == 1
    assert (lt.text, lt.predicate, lt.flags) == ("%lt = icmp eq i1 false, true", "eq", set())
    syn = Synthetic(lt.block, "sh", "getelementptr", "ptr")
    assert syn.element_type is None
    syn.text = "%sh = getelementptr inbounds { double, double }, ptr %p, i64 1"
    assert (syn.element_type, syn.flags) == ("{ double, double }", {"inbounds"})
    lines = Synthetic(lt.block, "sz", "alloca", "ptr", "%n2 = mul i64 %n, 8\n  %sz = alloca i8, i64 %n2")
    assert lines.allocated_type is None and lines.align is None
