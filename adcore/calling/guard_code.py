"""Helpers for the straight-line Python guards adcore's callers generate
(``layers.staging.guard``, ``optim.fused``): a guard binds what it walks to variables
``v1, v2, ...`` and checks them."""
import re

_BINDING = re.compile(r"\s+(v\d+) = ")
_NAME = re.compile(r"\b[va]\d+\b")


def used_bindings(lines, tail):
    """``lines`` of a guard without the bindings ``v = ...`` that nothing after them (nor
    ``tail``, the source that follows) reads, dropped from the last line up; a dropped
    binding is a field the caller never uses (a shadow's bias that is ``None``, the
    state of a layer without parameters)."""
    kept, needed = [], set(_NAME.findall(tail))
    for line in reversed(lines):
        bound = _BINDING.match(line)
        if bound and bound.group(1) not in needed:
            continue
        needed.update(_NAME.findall(line))
        kept.append(line)
    return kept[::-1]
