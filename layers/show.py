"""Flux-style printing of models.

A layer prints as one line, ``Dense(784 => 32, σ)``, followed by a comment with its
parameter count aligned at a fixed column (``, plus 32`` counts non-trainable arrays such
as running statistics); a container (``Chain``, ``Parallel``, ``SkipConnection``) prints
one element per line and, at the top level when it holds more than two arrays, a total
line ``# Total: 4 arrays, 25_450 parameters, 99.414 KiB.`` (the bytes of the arrays), or
Flux's two lines ``# Total: 4 trainable arrays, ...,`` / ``# plus 2 non-trainable, ...``.
"""
import operator

import numpy as np

from adcore.tree import is_node, leaves, node_fields

from .buffers import buffers

_NAMES = {"sigmoid": "σ"}
_SYMBOLS = {id(f): name for f, name in ((operator.add, "+"), (np.add, "+"), (operator.mul, "*"),
                                        (np.multiply, "*"))}
_COLUMN = 20   # where the total comment starts


def function_name(f):
    """How a plain callable prints: ``+`` for addition, its name (``σ`` for sigmoid), else
    its ``repr``."""
    if id(f) in _SYMBOLS:
        return _SYMBOLS[id(f)]
    name = getattr(f, "__name__", None)
    return _NAMES.get(name, name) if name else repr(f)


def count(x):
    """``(arrays, parameters, bytes)`` of the float arrays in ``x``."""
    ls = [a for _, a in leaves(x)]
    return len(ls), sum(a.size for a in ls), sum(a.nbytes for a in ls)


def format_bytes(n):
    """Julia's ``Base.format_bytes``: ``"512 bytes"``, ``"99.414 KiB"``."""
    units = ["bytes", "KiB", "MiB", "GiB", "TiB"]
    k = 0
    while k < len(units) - 1 and n > 1024 ** (k + 1):
        k += 1
    if k == 0:
        return f"{n} byte" + ("" if n == 1 else "s")
    return f"{n / 1024 ** k:.3f} {units[k]}"


def _is_container(x):
    return hasattr(x, "layers") and is_node(x)


def _elements(x):
    """``(name, element)`` pairs a container prints: its ``show_children()``, else its layers."""
    if hasattr(x, "show_children"):
        return x.show_children()
    return x.layers.items() if isinstance(x.layers, dict) else [(None, l) for l in x.layers]


def _one_line(x):
    if hasattr(x, "show_string"):
        return x.show_string()
    if _is_container(x):
        return f"{type(x).__name__}(" + ", ".join(_one_line(l) for _, l in _elements(x)) + ")"
    if is_node(x) and type(x).__repr__ is object.__repr__:
        fields = ", ".join(f"{k}={_summary(v)}" for k, v in node_fields(x))
        return f"{type(x).__name__}({fields})"
    if callable(x) and not is_node(x):
        return function_name(x)
    return repr(x)


def _summary(v):
    return f"<{v.dtype} {v.shape}>" if hasattr(v, "shape") else repr(v)


def _layer_lines(x, indent, name):
    s = ("" if name is None else f"{name} = ") + _one_line(x)
    line = " " * indent + s + ("," if indent else "")
    _, n, _ = count(x)
    frozen = sum(a.size for _, a in buffers(x))
    if n or frozen:
        line += " " * max(2, (39 if indent else 20) - indent - len(s))
        line += f"# {n:_} parameters" + (f", plus {frozen:_}" if frozen else "")
    return [line]


def lines(x, indent=0, name=None):
    """The printed form of ``x`` as a list of lines, at ``indent`` spaces.

    A container prints its elements one per line; the total line is added only at
    the top level (``indent == 0``), so wrappers can embed these lines.
    """
    if not _is_container(x):
        return _layer_lines(x, indent, name)
    pre = ("" if name is None else f"{name} = ") + f"{type(x).__name__}("
    out = [" " * indent + pre]
    for k, l in _elements(x):
        out += lines(l, indent + 2, k)
    out.append(" " * indent + ")" + ("," if indent else ""))
    return out


def total_comment(x, extra_bytes=0):
    """The lines of ``# Total: ...`` for a model with more than two arrays, else ``[]``."""
    arrays, n, nbytes = count(x)
    frozen = [a for _, a in buffers(x)]
    nbytes += extra_bytes + sum(a.nbytes for a in frozen)
    if arrays + len(frozen) <= 2:
        return []
    if not frozen:
        return [f"# Total: {arrays} arrays, {n:_} parameters, {format_bytes(nbytes)}."]
    return [f"# Total: {arrays} trainable arrays, {n:_} parameters,",
            f"# plus {len(frozen)} non-trainable, {sum(a.size for a in frozen):_} parameters, "
            f"summarysize {format_bytes(nbytes)}."]


def _add_total(out, total):
    """``out`` with the total comment after its last line, aligned at ``_COLUMN``."""
    if total:
        out[-1] = out[-1].ljust(2) + " " * (_COLUMN - 2) + total[0]
        out += [" " * _COLUMN + t for t in total[1:]]
    return out


def show(x):
    """The multi-line Flux-style ``repr`` of a model."""
    out = lines(x)
    if _is_container(x):
        out = _add_total(out, total_comment(x))
    return "\n".join(out)


def norm_string(x):
    """``norm(∇)`` of the float arrays of ``x`` rounded to 3 significant digits."""
    total = sum(float(np.sum(np.square(a, dtype=np.float64))) for _, a in leaves(x))
    return repr(float(f"{np.sqrt(total):.3g}"))


def show_duplicated(model, shadow):
    """How ``Duplicated(model)`` prints: the model, then ``# norm(∇) ≈ ...`` of the stored
    gradient, as in Flux (the total counts the bytes of both)."""
    out = ["Duplicated("] + lines(model, indent=2) + [f"  # norm(∇) ≈ {norm_string(shadow)}", ")"]
    return "\n".join(_add_total(out, total_comment(model, count(shadow)[2])))
