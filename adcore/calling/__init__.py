"""Calling native code from Python: argument checks, ctypes entries, builtins compiled
from IR, repeat calls, and the compiled gradient object."""
