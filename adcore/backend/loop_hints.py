"""Loop hints for LLVM's optimiser: no loop vectorisation of loops with very large bodies.

LLVM's loop vectoriser analyses every pair of memory accesses of a loop (its runtime
alias checks, then loop-load elimination on the versioned copies), so its time grows with
the square of a loop's loads and stores.  Gradients of Numba programs whose per-function
passes fully unrolled small constant loops have loops of hundreds of accesses (a reverse
pass pushing and popping each one): there, loop vectorisation took half the compile time
of the seed model's gradient (0.55 of 1.1 s), and such a body, with its stack pushes,
does not become vector code anyway.  Each such loop gets
``llvm.loop.vectorize.enable false``; other loops, and SLP vectorisation, are unchanged.

The loops are found in the IR text: a branch to a block laid out at or before its own
starts a loop whose body is taken to be the blocks in between.  That is an estimate (a
hint's only effect is speed, never what the code computes).
"""
import re

MAX_VECTORISED_ACCESSES = 200     # loads and stores in one loop body; more: not vectorised

_LABEL = re.compile(r'^("(?:[^"\\]|\\.)*"|[-\w.$]+):')
_ACCESS = re.compile(r"^\s+(?:%\S+ = load |store )")
_BRANCH = re.compile(r"^\s+br ")
_TARGET = re.compile(r'label %("(?:[^"\\]|\\.)*"|[-\w.$]+)')
_METADATA_ID = re.compile(r"^!(\d+) = ", re.M)


def _blocks(lines):
    """Per function, the list of ``(label, loads and stores, [(line index, targets)] of its
    branches)`` in layout order."""
    functions, blocks = [], None
    for i, line in enumerate(lines):
        if line.startswith("define "):
            blocks = [["", 0, []]]
            functions.append(blocks)
        elif blocks is None:
            continue
        elif line.startswith("}"):
            blocks = None
        elif (label := _LABEL.match(line)) is not None:
            blocks.append([label.group(1), 0, []])
        elif _ACCESS.match(line):
            blocks[-1][1] += 1
        elif _BRANCH.match(line) and "!llvm.loop" not in line:
            blocks[-1][2].append((i, _TARGET.findall(line)))
    return functions


def large_loop_latches(text, limit=MAX_VECTORISED_ACCESSES):
    """Line indices of ``text`` of the branches closing a loop of more than ``limit``
    loads and stores (and carrying no loop metadata yet)."""
    found = []
    for blocks in _blocks(text.split("\n")):
        position = {label: k for k, (label, _, _) in enumerate(blocks)}
        for k, (_, _, branches) in enumerate(blocks):
            for line, targets in branches:
                heads = [position[t] for t in targets if position.get(t, k + 1) <= k]
                if heads and sum(b[1] for b in blocks[min(heads):k + 1]) > limit:
                    found.append(line)
    return found


def without_vectorising_large_loops(text, limit=MAX_VECTORISED_ACCESSES):
    """``text`` with every loop of more than ``limit`` loads and stores marked
    ``llvm.loop.vectorize.enable false``."""
    latches = large_loop_latches(text, limit)
    if not latches:
        return text
    lines = text.split("\n")
    hint = max(map(int, _METADATA_ID.findall(text)), default=-1) + 1
    nodes = [f'!{hint} = !{{!"llvm.loop.vectorize.enable", i1 false}}']
    for loop, line in enumerate(latches, hint + 1):      # one distinct loop ID per loop
        lines[line] += f", !llvm.loop !{loop}"
        nodes.append(f"!{loop} = distinct !{{!{loop}, !{hint}}}")
    return "\n".join(lines) + "\n" + "\n".join(nodes) + "\n"
