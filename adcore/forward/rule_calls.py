"""Forward mode of a call that has a custom rule: call the rule's ``forward`` (an njit
function, see :mod:`adcore.rules.custom`) just before the call, with the call's arguments
and one lane's shadows and tangents."""
from numba.core import types as nbtypes

from ..reverse.rule_calls import call_rule, external_rule_arguments, njit_rule_arguments


def forward_rule_call(gen, instr, rule, lane):
    """Emit lane ``lane``'s forward-rule call for ``instr`` (refused when the rule has none)."""
    if rule.forward is None:
        raise gen.unsupported(instr, f"its custom rule (reverse {getattr(rule.reverse, '__name__', rule.reverse)}) "
                                     f"has no forward rule (register one with forward=)")
    if rule.is_external:
        _external(gen, instr, rule, lane)
    else:
        _njit(gen, instr, rule, lane)


def _external(gen, instr, rule, lane):
    args, types_ = external_rule_arguments(gen, instr.operands, lambda k, o: o.ref, lane.shadow)
    call_rule(gen, rule.forward, args, types_)


def _njit(gen, instr, rule, lane):
    """``forward(args..., tangents of array and float args...)`` for an njit callee (arrays
    as borrowed views: null meminfo); its float result is the tangent of the call's return."""
    ctx, ops = gen.context, instr.operands
    _, args, types_ = njit_rule_arguments(gen, rule, ops, lambda o: o.ref, lane.shadow,
                                          lambda o: gen.tangent(o, lane.j))
    ret, restype, out_type = call_rule(gen, rule.forward, args, types_)
    if isinstance(rule.restype, nbtypes.Float) and gen.memory.is_shadowed(ops[0]):
        rt = str(ctx.get_value_type(rule.restype))
        if restype != rule.restype:
            raise gen.unsupported(instr, f"the forward rule of '{instr.callee}' returns {restype}, "
                                         f"not the tangent of its {rule.restype} result")
        value = gen.e(f"load {rt}, ptr {ret}")
        gen.e.line(f"store {rt} {value}, ptr {lane.shadow(ops[0])}")
