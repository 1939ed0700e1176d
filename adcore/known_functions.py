"""External functions that only consume values: Numba's ``print`` and the Python C-API
calls around it (boxing a float, formatting, writing to stdout, the GIL, the reference
counts of the objects they make).  A differentiable float passed to one of them is just
read: the call runs once in the forward pass, gets nothing in the reverse pass (Enzyme
treats ``printf`` the same way), and writes no memory the kernel reads.  A callee not
listed here is still refused when a derivative could flow into or through it.
"""

CONSUMES_ONLY = frozenset((
    "numba_gil_ensure", "numba_gil_release",                        # the GIL around print
    "PyFloat_FromDouble", "PyLong_FromLongLong", "PyLong_FromUnsignedLongLong",
    "PyLong_FromSsize_t", "PyBool_FromLong",                        # boxing scalars
    "PyObject_Str", "PyObject_Repr", "PyUnicode_AsUTF8", "PyUnicode_FromString",
    "PySys_FormatStdout", "PySys_WriteStdout", "PyObject_Print",   # formatting, writing
    "PyErr_WriteUnraisable", "PyErr_Clear", "Py_DecRef", "Py_IncRef",
))


def consumes_only(instr):
    """True for a call to one of the functions above."""
    return instr.opcode == "call" and instr.callee in CONSUMES_ONLY
