"""The call graph of a module, and adcore's inlining decision.

A callee is inlined unless it is recursive: a function on a cycle of the call graph (a
strongly connected component with more than one function, or one that calls itself)
stays a call, differentiated as a call (:mod:`adcore.reverse.callees`).  Inlining is an
optimisation; recursion cannot be inlined.
"""
import re

from ..analysis.cfg import on_cycles

_NAME = r'"(?:[^"\\]|\\.)*"|[-a-zA-Z$._0-9]+'
_DEFINE = re.compile(r"^define\b[^@]*@(" + _NAME + r")\(", re.M)
_CALL = re.compile(r"\b(?:call|invoke)\b[^@\n]*?@(" + _NAME + r")\(")


def _unquote(name):
    return name[1:-1] if name.startswith('"') else name


def call_graph(module):
    """``{function name: set of defined functions it calls}`` over the defined functions
    of an llvmlite module (read from its text: walking llvmlite's operands is slow)."""
    text = str(module)
    starts = [(m.start(), _unquote(m.group(1))) for m in _DEFINE.finditer(text)]
    graph = {name: set() for _, name in starts}
    for k, (start, name) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else len(text)
        graph[name] = {c for c in map(_unquote, _CALL.findall(text, start, end)) if c in graph}
    return graph


def recursive_functions(graph):
    """The functions of ``graph`` that lie on a cycle."""
    return on_cycles(graph, lambda name: sorted(graph.get(name, ())))


def kept_as_calls(module):
    """The functions of ``module`` that are not inlined: the recursive ones."""
    return recursive_functions(call_graph(module))
