"""C compiled to LLVM IR for the foreign-IR tests, on any machine the test extra is installed on.

``COMPILERS``: zig's clang (the ``ziglang`` wheel of ``pip install -e ".[test]"``; its
undefined-behaviour sanitizer, on by default at -O0, off) everywhere, and the system's
clang where it is installed (``.ci/run`` installs it), so CI reads the IR of both.
"""
import os
import shutil
import subprocess
import sys
import tempfile

COMPILERS = {"zig": [sys.executable, "-m", "ziglang", "cc", "-fno-sanitize=undefined"]}
if shutil.which("clang"):
    COMPILERS["clang"] = ["clang"]
DEFAULT = "clang" if "clang" in COMPILERS else "zig"


def c_to_llvm(source, opt, compiler=DEFAULT):
    """LLVM IR text of C ``source`` (a string) compiled with the flags ``opt``
    (space-separated) by ``compiler``."""
    with tempfile.TemporaryDirectory() as tmp:     # zig cc writes "-o -" to a file named "-"
        src, out = os.path.join(tmp, "source.c"), os.path.join(tmp, "source.ll")
        with open(src, "w") as f:
            f.write(source)
        subprocess.run(COMPILERS[compiler] + opt.split() + ["-S", "-emit-llvm", "-o", out, src],
                       check=True, capture_output=True, text=True)
        with open(out) as f:
            return f.read()
