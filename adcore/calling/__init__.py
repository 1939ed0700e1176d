"""The call layer, from Python into native code: argument checks, the guard builder that
writes every generated guard, ctypes entries, builtins compiled from IR, the address table
of arrays, repeat calls, and the compiled gradient object."""
