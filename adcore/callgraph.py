"""The call graph of a module, and adcore's inlining decision.

A callee is inlined unless it is recursive: a function on a cycle of the call graph (a
strongly connected component with more than one function, or one that calls itself)
stays a call, differentiated as a call (:mod:`adcore.calls`).  Inlining is an
optimisation; recursion cannot be inlined.
"""


def call_graph(module):
    """``{function name: set of defined functions it calls}`` over the defined functions
    of an llvmlite module."""
    defined = {fn.name for fn in module.functions if not fn.is_declaration}
    graph = {}
    for fn in module.functions:
        if fn.is_declaration:
            continue
        callees = set()
        for block in fn.blocks:
            for ins in block.instructions:
                if ins.opcode in ("call", "invoke"):
                    name = list(ins.operands)[-1].name
                    if name in defined:
                        callees.add(name)
        graph[fn.name] = callees
    return graph


def recursive_functions(graph):
    """The functions of ``graph`` that lie on a cycle (Tarjan's strongly connected
    components, iteratively)."""
    index, low, stack, on, out = {}, {}, [], set(), set()
    counter = 0
    for root in graph:
        if root in index:
            continue
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        work = [(root, iter(sorted(graph[root])))]
        while work:
            node, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        x = stack.pop()
                        on.discard(x)
                        component.append(x)
                        if x == node:
                            break
                    if len(component) > 1 or node in graph[node]:
                        out.update(component)
            elif w not in index:
                index[w] = low[w] = counter
                counter += 1
                stack.append(w)
                on.add(w)
                work.append((w, iter(sorted(graph.get(w, ())))))
            elif w in on:
                low[node] = min(low[node], index[w])
    return out


def kept_as_calls(module):
    """The functions of ``module`` that are not inlined: the recursive ones."""
    return recursive_functions(call_graph(module))
