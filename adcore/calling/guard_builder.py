"""The one writer of guards: generated straight-line Python functions that check a call's
arguments are what a native function was compiled for (types, shapes, dtypes, the very
objects, memory that does not overlap) before calling it.

A :class:`GuardBuilder` binds what it walks to variables ``v1, v2, ...`` (:meth:`let`),
keeps the objects it compares with as globals ``G1, ...`` (:meth:`const`) and collects
conditions (:meth:`check`): consecutive ones make one ``if`` that fails the guard.  Its
users: the repeat calls of ``autodiff`` and ``gradient`` (:mod:`adcore.calling.repeat_guard`),
the staged programs of ``Duplicated`` models (``layers.staging.guard``), the fused
optimiser update (``optim.fused``) and the call layer's own checks (the address table of
:mod:`adcore.calling.addresses`, the ctypes entry's argument check).
"""
import re
import weakref

import numpy as np

_BINDING = re.compile(r"(v\d+) = ")
_NAME = re.compile(r"\b[va]\d+\b")
_PLAIN = (int, float, complex, str, bytes, bool, type(None), np.number, np.bool_)


def unless(conditions, action):
    """The statement running ``action`` unless all ``conditions`` (Python expressions)
    hold."""
    return f"if not ({' and '.join(conditions)}): {action}"


def used_bindings(lines, tail):
    """``lines`` (statements) without the bindings ``v = ...`` that nothing after them
    (nor ``tail``, the source that follows) reads, dropped from the last line up; a dropped
    binding is a field the caller never uses (a shadow's bias that is ``None``, the state
    of a layer without parameters)."""
    kept, needed = [], set(_NAME.findall(tail))
    for line in reversed(lines):
        bound = _BINDING.match(line)
        if bound and bound.group(1) not in needed:
            continue
        needed.update(_NAME.findall(line))
        kept.append(line)
    return kept[::-1]


def compiled(source, scope, name):
    """Function ``name`` defined by ``source`` in (a copy of) ``scope``."""
    scope = dict(scope)
    exec(source, scope)
    return scope[name]


class GuardBuilder:
    """Accumulates a guard's statements: bindings, checks and the objects they compare with
    (``env``, the guard's globals).  A failed check runs ``fail`` (a statement).  A check
    may be about an array variable (``about``): a variant of the guard can leave such
    checks to the native code it calls (``skip``)."""

    def __init__(self, env=None, fail="return None"):
        self.env = dict(env or {})
        self.fail, self.n = fail, 0
        self.lines, self.pending = [], []   # statements or groups of (condition, about)

    def name(self, prefix="v"):
        self.n += 1
        return f"{prefix}{self.n}"

    def const(self, obj, prefix="G"):
        """A global of the guard holding ``obj``."""
        name = self.name(prefix)
        self.env[name] = obj
        return name

    def let(self, expr):
        """A new variable bound to ``expr``."""
        v = self.name()
        self.statement(f"{v} = {expr}")
        return v

    def statement(self, line):
        self.flush()
        self.lines.append(line)

    def check(self, cond, about=None):
        """Add condition ``cond`` (about array variable ``about``, when given)."""
        self.pending.append((f"({cond})", about))

    def flush(self):
        if self.pending:
            self.lines.append(self.pending)
            self.pending = []

    def same(self, var, value):
        """Check ``var`` equals the static ``value`` (identity for objects)."""
        if value is None or isinstance(value, bool):
            self.check(f"{var} is {value}")
        elif isinstance(value, _PLAIN) or (isinstance(value, tuple) and
                                         all(isinstance(v, _PLAIN) for v in value)):
            self.check(f"type({var}) is {self.const(type(value))} and {var} == {self.const(value)}")
        else:
            self.check(f"{var} is {self.const(value)}")

    def array(self, var, value, skippable=True):
        """Check ``var`` is an ndarray of ``value``'s shape and dtype (equal, not only the
        same object: an unpickled array's dtype is a new object); a check about ``var``
        (see ``skip``) when ``skippable``."""
        dtype = self.const(value.dtype)
        self.check(f"type({var}) is ndarray and {var}.shape == {value.shape!r} and "
                   f"({var}.dtype is {dtype} or {var}.dtype == {dtype})", var if skippable else None)

    def distinct_memory(self, arrays, disjoint):
        """Fail unless the ``arrays`` (variables) share no memory: the verdict of the last
        call that passed holds for the same array objects (held by weak references, so
        alive) with the same shapes and strides, as an array keeps its memory while it
        lives; else ``disjoint(arrays)`` (a function) looks."""
        if not arrays:
            return
        seen, n = self.const([None], "M"), len(arrays)
        self.env.update(ref=weakref.ref, disjoint=disjoint)
        same = " and ".join(f"m[{i}]() is {x}" for i, x in enumerate(arrays))
        listed = "".join(x + ", " for x in arrays)
        self.statement(f"layout = ({''.join(f'{x}.shape, {x}.strides, ' for x in arrays)})")
        self.statement(f"m = {seen}[0]")
        self.statement(f"if m is None or not ({same} and m[{n}] == layout):\n"
                       f"    {unless([f'disjoint(({listed}))'], self.fail)}\n"
                       f"    {seen}[0] = ({''.join(f'ref({x}), ' for x in arrays)}layout)")

    def body(self, skip=(), tail=""):
        """The statements, checks about the variables in ``skip`` left out and bindings
        nothing reads (``tail``: the source after them) dropped."""
        lines = []
        for line in self.lines + ([self.pending] if self.pending else []):
            if isinstance(line, str):
                lines.append(line)
                continue
            conds = [c for c, about in line if about is None or about not in skip]
            if conds:
                lines.append(unless(conds, self.fail))
        return used_bindings(lines, tail)

    def source(self, name, params, tail, caught=(), skip=()):
        """``def name(*params)``: the guard, then the statements ``tail``; an exception
        of the types ``caught`` raised by the guard's statements fails it."""
        tail_text = "\n".join(tail)
        body = [line for statement in self.body(set(skip), tail_text) for line in statement.splitlines()]
        head = f"def {name}({', '.join(params)}):\n"
        if not caught:
            return head + "".join(f"    {line}\n" for line in body + list(tail))
        return (head + "    try:\n" + "".join(f"        {line}\n" for line in body) +
                f"    except ({''.join(c.__name__ + ', ' for c in caught)}):\n        {self.fail}\n" +
                "".join(f"    {line}\n" for line in tail))

    def compile(self, name, params, tail, caught=(), skip=(), **names):
        """:meth:`source`'s function; ``names`` are more globals ``tail`` uses."""
        return compiled(self.source(name, params, tail, caught, skip), dict(self.env, **names), name)
