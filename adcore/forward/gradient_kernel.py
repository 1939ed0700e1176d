"""adcore's gradient IR read back as a kernel, for :func:`adcore.hvp` (forward mode over
reverse mode).

The gradient's value-stack calls stay calls (:class:`StackCall`, mirrored on tangent stacks
by the tangent generator's stack mode).  The reverses of njit functions' rules are compiled
in and differentiated as code.  Each call of a custom rule's reverse with a
``reverse_tangent`` (the BLAS rules) is rewritten into a call of a small wrapper taking its
addresses as pointers, ``@adg.reverse.<symbol>``, so that the analyses see which memory it
reads and writes; the wrapper's rule is the reverse's tangent (:func:`reverse_call_rule`).
"""
import re

import llvmlite.binding as llvm

from .. import numba_abi
from ..errors import UnsupportedError
from ..frontend.capture import Kernel
from ..ir.model import local
from ..ir.writer import Emitter
from ..numba_abi import target_machine
from ..reverse.value_stack import without_reserves
from ..rules import custom as custom_rules
from ..rules.custom import BoundRule

_STACK_CALL = re.compile(r"^adg\.(push\.|pop\.|snapshot$|restore$)")
_HELPER_DEF = re.compile(r"^(define internal [^@]*@adg\.(?!push\.|pop\.|stack\.grow)[^(]*\(.*\)) noinline", re.M)
_STACK_DEF = re.compile(r"^(define internal [^@]*@adg\.(?:push|pop)\.[^(]*\(.*\)) alwaysinline", re.M)
_ADDRESS_CONSTANT = re.compile(r"^i64 ptrtoint \((ptr .*) to i64\)$")
_REVERSE_CALL = "adg.reverse."


class StackCall:
    """A value-stack call of gradient IR, handled by the tangent generator (stack mode):
    ``push``/``pop`` of a value, ``snapshot``/``restore`` of an array's memory."""

    is_external, forward = False, None

    def __init__(self, what, type_):
        self.what, self.type = what, type_
        self.outputs = (0, 1) if what == "restore" else (0,)   # the stack struct; restore: the array


def stack_rule(instr):
    """The :class:`StackCall` of a value-stack call of gradient IR, or None."""
    if instr.opcode != "call" or not _STACK_CALL.match(instr.callee or ""):
        return None
    what = instr.callee[len("adg."):].split(".")[0]
    return StackCall(what, instr.operands[1].type if what == "push" else instr.type)


def reverse_call_rule(instr):
    """The rule of a rewritten reverse call (``@adg.reverse.<symbol>``): external, its
    forward the reverse's tangent, writing the shadows (its last pointer operands); else None."""
    callee = (instr.callee or "") if instr.opcode == "call" else ""
    if not callee.startswith(_REVERSE_CALL):
        return None
    _, tangent = custom_rules.reverse_tangent(callee[len(_REVERSE_CALL):])
    pointers = [k for k, o in enumerate(instr.operands) if o.type == "ptr"]
    return BoundRule(callee, None, tuple(pointers[len(pointers) // 2:]), forward=tangent)


def float_pops(func, name):
    """The float pops of gradient IR (they carry tangents from the start); refuses calls to
    custom-rule reverses that have no tangent."""
    for instr in func.instructions():
        if instr.opcode == "call" and (instr.callee or "").startswith("adcore_rule_"):
            raise UnsupportedError(f"'{instr.text}'", name, "hvp cannot differentiate the reverse of "
                                   "an external symbol's custom rule that has no reverse_tangent "
                                   "(adcore.register_rule)")
    return [i for i in func.instructions()
            if stack_rule(i) is not None and stack_rule(i).what == "pop" and i.is_float]


class GradientKernel:
    """adcore's compiled gradient of a kernel, presented as a kernel to differentiate:
    arguments are the kernel's then its shadows; its stack push/pop stay calls."""

    def __init__(self, compiled, argtypes, pyname):
        self.compiled, self.argtypes, self.pyname = compiled, argtypes, pyname
        self.__name__ = f"gradient of {pyname}"
        self.symbol = compiled.symbol

    def _adcore_capture(self, argtypes):
        text = re.sub(r"@ad\.", "@adg.", without_reserves(self.compiled.adjoint_ir))
        text = _HELPER_DEF.sub(r"\1", text)          # shadow allocations and frees get inlined
        text = _STACK_DEF.sub(r"\1", text)           # pushes and pops stay calls
        module = _with_reverse_wrappers(llvm.parse_assembly(text), self.symbol, self.__name__)
        _link_njit_reverses(module)
        tm = target_machine()
        module.triple, module.data_layout = tm.triple, str(tm.target_data)
        kernel = Kernel(tuple(argtypes), self.compiled.native.nopython_signatures[0].return_type,
                        self.symbol, module, self.__name__, numba_abi.target_context())
        kernel.keep = [fn.name for fn in module.functions
                       if _STACK_CALL.match(fn.name) or fn.name.startswith(_REVERSE_CALL)]
        return kernel


def _with_reverse_wrappers(module, symbol, name):
    """``module`` with each call of a reverse that has a tangent rewritten to call its
    wrapper, addresses passed as the pointers they were made from."""
    text = str(module)
    wrappers = {}
    function = module.get_function(symbol)
    defs = {i.name: i for block in function.blocks for i in block.instructions if i.name}
    for block in function.blocks:
        for call in block.instructions:
            ops = list(call.operands)
            callee = ops[-1].name if call.opcode == "call" else ""
            found = custom_rules.reverse_tangent(callee)
            if found is None:
                continue
            target = module.get_function(found[0])
            c_pointers = [k for k, a in enumerate(target.arguments) if str(a.type) == "ptr"]
            args = ops[2:-1]
            addresses = set(c_pointers) | set(range(len(args) - len(c_pointers), len(args)))
            spelled = [_address(a, defs, name) if k in addresses else _spell(a) for k, a in enumerate(args)]
            wrappers[callee] = [s.split(" ", 1)[0] for s in spelled]
            line = str(call).strip()
            head = line.split("call", 1)[0]
            text = text.replace(line, f"{head}call i32 @{_REVERSE_CALL}{callee}({', '.join(spelled)})", 1)
    if not wrappers:
        return module
    return llvm.parse_assembly(text + "\n" + "\n".join(_wrapper(c, ts) for c, ts in wrappers.items()))


def _link_njit_reverses(module):
    """Compile into ``module`` the code of the njit rules' reverses it calls, to be inlined
    and differentiated like the rest of the gradient."""
    for fn in list(module.functions):
        if fn.is_declaration and custom_rules.njit_rule_reverse(fn.name):
            part = custom_rules.linkable(fn.name)
            if part is not None:
                module.link_in(part)


def _wrapper(callee, types_):
    """A function with the reverse's arguments, pointers for addresses, calling it."""
    e = Emitter()
    ret, exc = e.alloca("i64", "ret"), e.alloca("ptr", "exc")
    args = ", ".join(f"i64 {e(f'ptrtoint ptr %a{k} to i64')}" if t == "ptr" else f"{t} %a{k}"
                     for k, t in enumerate(types_))
    e.line(f"ret i32 {e(f'call i32 @{callee}(ptr {ret}, ptr {exc}, {args})')}")
    params = ", ".join(f"{t} %a{k}" for k, t in enumerate(types_))
    return e.define(f"internal i32 @{_REVERSE_CALL}{callee}({params}) noinline")


def _spell(value):
    """The IR spelling ``type value`` of an operand."""
    if value.value_kind in (llvm.ValueKind.global_variable, llvm.ValueKind.function):
        return f"ptr @{local(value.name)[1:]}"
    if value.is_constant:
        return str(value)
    return f"{value.type} {local(value.name)}"


def _address(value, defs, name):
    """The pointer an int64 address operand was made from, spelled ``ptr p`` (``defs``: the
    function's instructions by name)."""
    made = defs.get(value.name) if value.name else None
    if made is not None and made.opcode == "ptrtoint":
        return _spell(list(made.operands)[0])
    spelled = str(value) if value.is_constant else ""
    if spelled == "i64 0":
        return "ptr null"
    made = _ADDRESS_CONSTANT.match(spelled)
    if made:
        return made.group(1)
    raise UnsupportedError(f"address {_spell(value)}", name, "hvp cannot tell which array a custom "
                           "rule's reverse receives")
