"""The call layer, from Python and njit code into native code: argument checks, the guard
builder that writes every generated guard, ctypes entries, builtins compiled from IR, njit
stubs, the address table of arrays, repeat calls, and the compiled gradient object."""
