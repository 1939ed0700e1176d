"""The reverse pass of a call that has a custom rule: call the rule's reverse (an njit
function registered with :func:`adcore.register_rule`) with the call's arguments as they
were, and the shadows of its pointer or array arguments."""
from numba.core import types as nbtypes

from .. import numba_abi
from ..analysis.pointers import UNKNOWN
from ..ir.writer import float_const
from ..rules import custom as custom_rules


def reverse_rule_call(gen, instr, rule):
    """Call the rule's reverse with the call's arguments and their shadows."""
    keep = rule.loop is not None and _keeps_overwritten(gen, instr, rule)
    copied, unread = {}, _unread_loop_operands(gen, instr, rule, keep)
    for k, o in enumerate(instr.operands):
        if k not in unread and _overwritten_input(gen, instr, rule, k, o):
            if not (rule.is_external and rule.extents is not None or _loop_array_size(gen, instr, rule, k)):
                raise gen.unsupported(instr, f"argument {k} of '{instr.callee}' is overwritten after "
                                              f"the call, but its custom rule reads it in the reverse pass")
            copied[k] = None
    if rule.loop is not None:   # the range lives on the stack, refilled each time the loop runs
        copied[2 + numba_abi.DATA] = None
    if copied:
        copied = _copy_operands(gen, instr, rule, copied) if rule.loop is None else \
            _copy_loop_operands(gen, instr, rule, copied)
    extra = ()
    if rule.loop is not None:
        rule, extra = _parallel_loop_rule(gen, instr, rule, keep)
    if rule.is_external:
        _external(gen, instr, rule, copied)
    else:
        _njit(gen, instr, rule, copied, extra)


def _overwritten_input(gen, instr, rule, k, o):
    """Whether operand ``k`` (``o``) points into an array the call reads and the kernel
    writes after it."""
    return o.type == "ptr" and k not in rule.outputs and reads_array(gen.memory.pointers, o) \
        and gen.clobbers.clobbered_after(instr, o)


def _keeps_overwritten(gen, instr, rule):
    """Whether a parallel loop's chunks should keep on their tapes every value they read
    from arrays (``parallel_loops.taped(..., keep=True)``): the kernel overwrites an array
    after the loop whose memory the chunks' reverse would read again (the forward pass
    would copy it, on one thread), and with ``keep`` their reverse reads none of those."""
    from . import parallel_loops
    shadowed = _shadowed(gen, instr, rule)
    chunk = parallel_loops.taped(rule.loop, shadowed)
    if chunk is None:
        return False
    starts, _ = numba_abi.argument_starts(gen.context, rule.argtypes)
    overwritten = {j for j, t in enumerate(rule.argtypes) if isinstance(t, nbtypes.Array) and
                   _overwritten_input(gen, instr, rule, starts[j] + numba_abi.DATA,
                                      instr.operands[starts[j] + numba_abi.DATA])}
    if not overwritten & chunk.reread:
        return False
    kept = parallel_loops.taped(rule.loop, shadowed, keep=True)
    return kept is not None and not overwritten & kept.reread


def _unread_loop_operands(gen, instr, rule, keep):
    """For a parallel loop whose chunks keep tapes (``keep`` as :func:`_keeps_overwritten`
    chose): the positions of the data operands of the arrays whose memory the chunks'
    reverse does not read (what it needs of them is on the tapes), which the forward pass
    need not copy when the kernel overwrites them."""
    if rule.loop is None:
        return set()
    from . import parallel_loops
    chunk = parallel_loops.taped(rule.loop, _shadowed(gen, instr, rule), keep)
    if chunk is None:
        return set()
    starts, _ = numba_abi.argument_starts(gen.context, rule.argtypes)
    return {starts[k] + numba_abi.DATA for k, t in enumerate(rule.argtypes)
            if isinstance(t, nbtypes.Array) and k not in chunk.reread}


def _shadowed(gen, instr, rule):
    """The array arguments of a parallel loop's chunk call that have shadows here."""
    starts, _ = numba_abi.argument_starts(gen.context, rule.argtypes)
    return [k for k, (t, pos) in enumerate(zip(rule.argtypes, starts))
            if isinstance(t, nbtypes.Array) and gen.memory.is_shadowed(instr.operands[pos + numba_abi.DATA])]


def _loop_array_size(gen, instr, rule, k):
    """For a parallel loop's chunk call: ``(nitems operand, itemsize operand)`` when operand
    ``k`` is the data of a C-contiguous array argument (its bytes are nitems x itemsize), else
    None."""
    if rule.loop is None:
        return None
    starts, _ = numba_abi.argument_starts(gen.context, rule.argtypes)
    for t, pos in zip(rule.argtypes, starts):
        if isinstance(t, nbtypes.Array) and t.layout == "C" and k == pos + numba_abi.DATA:
            return instr.operands[pos + numba_abi.NITEMS], instr.operands[pos + numba_abi.ITEMSIZE]
    return None


def _copy_loop_operands(gen, instr, rule, positions):
    """Have the forward pass copy the arrays at ``positions`` (data operands of a parallel
    loop's chunk call that the kernel overwrites later) just before the call; returns
    ``{position: copy}``: the loop's reverse runs its iterations again on the copies."""
    e, lines, copies = gen.e, [], {}
    for k in positions:
        nitems, itemsize = _loop_array_size(gen, instr, rule, k)
        size, copy = e.fresh("bytes"), e.fresh("copy")
        lines += [f"{size} = mul i64 {nitems.ref}, {itemsize.ref}",
                  f"{copy} = call ptr @ad.copy.operand(ptr %ad.rawfrees, ptr {_copies(gen)}, ptr {instr.operands[k].ref}, i64 {size})"]
        copies[k] = copy
    gen.stack_types.add("ptr")
    return gen.before_call(instr, lines, copies)


def _copies(gen):
    """The buffer the forward pass copies operands into: the gradient function's own, kept
    between calls (a callee's copies get memory of their own)."""
    if gen.spec.split is not None:
        return "null"
    gen.copies_used = True
    return "%ad.copies"


def _copy_operands(gen, instr, rule, positions):
    """Have the forward pass copy the operands at ``positions`` just before the call (their
    sizes from the rule's ``extents``); returns ``{position: copy}`` for the reverse pass."""
    e, ops = gen.e, instr.operands
    lines, args, types_ = [], [], []
    for o in ops:
        if o.type == "ptr":
            ref = e.fresh("addr")
            lines.append(f"{ref} = ptrtoint ptr {o.ref} to i64")
            args.append(f"i64 {ref}")
        else:
            args.append(f"{o.type} {o.ref}")
        types_.append(custom_rules.LLVM_TO_NUMBA[o.type])
    symbol, restype = custom_rules.native_symbol(rule.extents, types_)
    out_type = str(gen.context.get_value_type(restype))
    params = ", ".join(["ptr", "ptr"] + [a.split(" ")[0] for a in args])
    e.declare(symbol, f"declare i32 @{symbol}({params})")
    ret, exc = gen.alloca(out_type, "extents"), gen.alloca("ptr", "ruleexc")
    lines.append(f"call i32 @{symbol}(ptr {ret}, ptr {exc}, {', '.join(args)})")
    pointer_index = [k for k, o in enumerate(ops) if o.type == "ptr"]
    copies = {}
    for k in positions:
        field, size, copy = e.fresh("field"), e.fresh("bytes"), e.fresh("copy")
        lines += [f"{field} = getelementptr inbounds {out_type}, ptr {ret}, i32 0, i32 {pointer_index.index(k)}",
                  f"{size} = load i64, ptr {field}",
                  f"{copy} = call ptr @ad.copy.operand(ptr %ad.rawfrees, ptr {_copies(gen)}, ptr {ops[k].ref}, i64 {size})"]
        copies[k] = copy
    gen.stack_types.add("ptr")
    return gen.before_call(instr, lines, copies)


def _parallel_loop_rule(gen, instr, rule, keep):
    """``(rule, extra arguments)``: ``rule`` with the reverse of its parallel loop for the
    arrays that have shadows here; where the loop's chunks keep tapes, the forward pass
    allocates the tape (from the gradient's arena, freed at its end) and the reverse is
    given its address (``keep``: the chunks keep every value they read, see
    :func:`_keeps_overwritten`)."""
    from . import parallel_loops
    from ..rules.custom import BoundRule
    shadowed = _shadowed(gen, instr, rule)
    if parallel_loops.taped(rule.loop, shadowed, keep) is None:
        return BoundRule(rule.symbol, parallel_loops.reverse_function(rule.loop, shadowed), rule.outputs,
                         rule.argtypes, rule.restype), ()
    e = gen.e
    tape, address = e.fresh("tape"), e.fresh("tapeaddr")
    lines = [f"{tape} = call ptr @ad.arena.alloc(ptr %ad.arena, ptr %ad.rawfrees, i64 {parallel_loops.tape_bytes()})",
             f"{address} = ptrtoint ptr {tape} to i64"]
    kept = gen.before_call(instr, lines, {"tape": tape})["tape"]
    gen.stack_types.add("ptr")
    gen.loop_tapes[instr] = (address, shadowed, keep)
    reverse = parallel_loops.taped_reverse_function(rule.loop, shadowed, keep)
    at = e(f"ptrtoint ptr {gen.values.materialise(kept)} to i64")
    return BoundRule(rule.symbol, reverse, rule.outputs, rule.argtypes, rule.restype), \
        [(f"i64 {at}", nbtypes.int64)]


def reads_array(pointers, op):
    """True when pointer ``op`` points into an array (an argument's or an allocation's), not
    into a stack temporary such as BLAS's ``alpha``, which Numba refills with a constant."""
    bs = pointers.bases(op)
    return bs == UNKNOWN or any(getattr(b, "opcode", None) != "alloca" for b in bs)


def _external(gen, instr, rule, copied):
    args, types_ = external_rule_arguments(
        gen, instr.operands, lambda k, o: gen.values.materialise(copied[k] if k in copied else o), gen.shadow)
    call_rule(gen, rule.reverse, args, types_, out_type="i64")


def _njit(gen, instr, rule, copied=None, extra=()):
    """``reverse(args..., shadows of array args..., dret, extra...)`` for an njit callee,
    whose call passes Numba's flattened arguments after its return slot and excinfo
    (``copied``: copies to pass instead of some operands, by position; ``extra``: more
    ``(IR argument, Numba type)``)."""
    e, act, ctx = gen.e, gen.act, gen.context
    ops = instr.operands
    copies = {id(ops[k]): c for k, c in (copied or {}).items()}
    groups, args, types_ = njit_rule_arguments(
        gen, rule, ops, lambda o: gen.values.materialise(copies.get(id(o), o)), gen.shadow)
    float_ret = isinstance(rule.restype, nbtypes.Float)
    if float_ret:
        rt = str(ctx.get_value_type(rule.restype))
        retp = ops[0]
        if gen.memory.is_shadowed(retp):
            sp = gen.shadow(retp)
            dret = e(f"load {rt}, ptr {sp}")
            e.line(f"store {rt} {float_const(rt, 0)}, ptr {sp}")
        else:
            dret = float_const(rt, 0)
        args.append(f"{rt} {dret}")
        types_.append(rule.restype)
    args += [a for a, _ in extra]
    types_ += [t for _, t in extra]
    ret, restype, out_type = call_rule(gen, rule.reverse, args, types_)
    if restype == nbtypes.none:
        return
    floats = [g[0] for t, g in groups if isinstance(t, nbtypes.Float)]
    for k, o in enumerate(floats):
        if o.defn in act.active:
            field = e(f"getelementptr inbounds {out_type}, ptr {ret}, i32 0, i32 {k}")
            gen.accumulate(o.defn, e(f"load {o.type}, ptr {field}"))


def njit_rule_arguments(gen, rule, ops, value, shadow, float_tangent=None):
    """``(groups, args, types)`` of a call to an njit rule for a call to an njit callee with
    operands ``ops`` (Numba's flattened arguments after the return slot and excinfo):
    ``groups`` pairs each Numba argument type with its operands; ``args`` are the callee's
    arguments, then per array argument its shadow view (``shadow(o)`` of its data pointer;
    an unshadowed one is empty) or, with ``float_tangent``, per float argument
    ``float_tangent(o)``, in argument order.  ``value(o)`` is an operand's value.  Arrays
    are borrowed views (null meminfo): Numba's reference counting skips them, so a rule
    cannot free an array the kernel still owns."""
    ctx, pos, groups = gen.context, 2, []
    for t in rule.argtypes:
        n = len(numba_abi.flat_types(ctx, t))
        groups.append((t, ops[pos:pos + n]))
        pos += n
    args = [f"{o.type} {'null' if is_array and j == numba_abi.MEMINFO else value(o)}"
            for t, g in groups for is_array in [isinstance(t, nbtypes.Array)] for j, o in enumerate(g)]
    types_ = list(rule.argtypes)
    for t, g in groups:
        if isinstance(t, nbtypes.Array):
            data = numba_abi.data_position(ctx, t)
            shadowed = gen.memory.is_shadowed(g[data])
            for j, o in enumerate(g):
                if j == numba_abi.MEMINFO:
                    args.append("ptr null")
                elif j == data:
                    args.append(f"ptr {shadow(o) if shadowed else 'null'}")
                elif not shadowed and j in (numba_abi.NITEMS, numba_abi.shape_field(0)):   # empty shadow
                    args.append(f"{o.type} 0")
                else:
                    args.append(f"{o.type} {value(o)}")
            types_.append(t)
        elif isinstance(t, nbtypes.Float) and float_tangent is not None:
            args.append(f"{g[0].type} {float_tangent(g[0])}")
            types_.append(t)
    return groups, args, types_


def call_rule(gen, function, args, types_, out_type=None):
    """Emit a call of njit ``function`` (a rule's reverse or forward) compiled for
    ``types_`` on the IR arguments ``args``: ``(its return slot, its Numba return type, the
    slot's LLVM type)`` (``out_type``, else i64 for None or the return's own type)."""
    symbol, restype = custom_rules.native_symbol(function, types_)
    params = ", ".join(["ptr", "ptr"] + [a.rsplit(" ", 1)[0] for a in args])
    gen.e.declare(symbol, f"declare i32 @{symbol}({params})")
    out_type = out_type or ("i64" if restype == nbtypes.none else str(gen.context.get_value_type(restype)))
    ret, exc = gen.alloca(out_type, "ruleret"), gen.alloca("ptr", "ruleexc")
    gen.e(f"call i32 @{symbol}(ptr {ret}, ptr {exc}, {', '.join(args)})")
    return ret, restype, out_type


def external_rule_arguments(gen, ops, value, shadow):
    """``(args, types)`` of a call to the rule of an external symbol with operands ``ops``:
    each operand (``value(k, o)``; a pointer as its int64 address), then per pointer operand
    the address of its shadow (``shadow(o)``; 0 when it has none)."""
    e, args, types_ = gen.e, [], []
    for k, o in enumerate(ops):
        v = value(k, o)
        if o.type == "ptr":
            v = e(f"ptrtoint ptr {v} to i64")
        args.append(f"{'i64' if o.type == 'ptr' else o.type} {v}")
        types_.append(custom_rules.LLVM_TO_NUMBA[o.type])
    for o in ops:
        if o.type == "ptr":
            sh = e(f"ptrtoint ptr {shadow(o)} to i64") if gen.memory.is_shadowed(o) else "0"
            args.append(f"i64 {sh}")
            types_.append(custom_rules.LLVM_TO_NUMBA["i64"])
    return args, types_
