"""Exceptions raised by adcore."""


class ADError(Exception):
    """Base class of every error adcore raises on purpose."""


class UnsupportedError(ADError):
    """The differentiator met IR (an instruction or a callee) it has no rule for."""

    def __init__(self, what, function=None, detail="", location=None):
        self.what = what
        self.detail = detail
        self.function = function
        self.location = location          # (file, line) of the Python source, when known
        where = f" in Python function {function!r}" if function else ""
        if location:
            where += f" ({location[0]}, line {location[1]})"
        msg = f"cannot differentiate {what}{where}"
        if detail:
            msg += f": {detail}"
        super().__init__(msg)


class ActivityError(ADError):
    """Misuse of activity annotations, detected before anything runs."""


class CompileError(ADError):
    """Numba cannot compile the function for these arguments (Numba's message kept)."""


class LinkError(ADError):
    """Compiled code calls external functions that this process does not define."""

    def __init__(self, symbols, function=None):
        self.symbols = list(symbols)
        names = ", ".join(self.symbols)
        super().__init__(f"{function or 'the compiled code'} calls {names}, which this process "
                         f"does not define; load the "
                         f"library that does with llvmlite.binding.load_library_permanently")
