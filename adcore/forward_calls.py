"""Forward mode of a call that has a custom rule: call the rule's ``forward`` (an njit
function, see :mod:`adcore.custom_rules`) just before the call, with the call's arguments
and one lane's shadows and tangents."""
from numba.core import types as nbtypes

from . import custom_rules
from .rule_calls import njit_rule_arguments


def forward_rule_call(gen, instr, rule, lane):
    """Emit lane ``lane``'s forward-rule call for ``instr`` (refused when the rule has none)."""
    if rule.forward is None:
        raise gen.unsupported(instr, f"its custom rule (reverse {getattr(rule.reverse, '__name__', rule.reverse)}) "
                                     f"has no forward rule (register one with forward=)")
    if rule.is_external:
        _external(gen, instr, rule, lane)
    else:
        _njit(gen, instr, rule, lane)


def _call(gen, function, args, types_, out_type=None):
    symbol, restype = custom_rules.native_symbol(function, types_)
    params = ", ".join(["ptr", "ptr"] + [a.rsplit(" ", 1)[0] for a in args])
    gen.e.declare(symbol, f"declare i32 @{symbol}({params})")
    out_type = out_type or ("i64" if restype == nbtypes.none else str(gen.context.get_value_type(restype)))
    ret, exc = gen.alloca(out_type, "ruleret"), gen.alloca("ptr", "ruleexc")
    gen.e(f"call i32 @{symbol}(ptr {ret}, ptr {exc}, {', '.join(args)})")
    return ret, restype, out_type


def _external(gen, instr, rule, lane):
    e, args, types_ = gen.e, [], []
    for o in instr.operands:
        v = e(f"ptrtoint ptr {o.ref} to i64") if o.type == "ptr" else o.ref
        args.append(f"{'i64' if o.type == 'ptr' else o.type} {v}")
        types_.append(custom_rules.LLVM_TO_NUMBA[o.type])
    for o in instr.operands:
        if o.type == "ptr":
            sh = e(f"ptrtoint ptr {lane.shadow(o)} to i64") if gen.memory.is_shadowed(o) else "0"
            args.append(f"i64 {sh}")
            types_.append(nbtypes.int64)
    _call(gen, rule.forward, args, types_)


def _njit(gen, instr, rule, lane):
    """``forward(args..., tangents of array and float args...)`` for an njit callee (arrays
    as borrowed views: null meminfo); its float result is the tangent of the call's return."""
    ctx, ops = gen.context, instr.operands
    _, args, types_ = njit_rule_arguments(gen, rule, ops, lambda o: o.ref, lane.shadow,
                                          lambda o: gen.tangent(o, lane.j))
    ret, restype, out_type = _call(gen, rule.forward, args, types_)
    if isinstance(rule.restype, nbtypes.Float) and gen.memory.is_shadowed(ops[0]):
        rt = str(ctx.get_value_type(rule.restype))
        if restype != rule.restype:
            raise gen.unsupported(instr, f"the forward rule of '{instr.callee}' returns {restype}, "
                                         f"not the tangent of its {rule.restype} result")
        value = gen.e(f"load {rt}, ptr {ret}")
        gen.e.line(f"store {rt} {value}, ptr {lane.shadow(ops[0])}")
