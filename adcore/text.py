"""Small helpers on LLVM IR instruction text."""
import re

_ATTACHED_METADATA = re.compile(r",\s*![-a-zA-Z_.0-9]+\s+!(?:[0-9]+|\{[^}]*\})")


def strip_metadata(text):
    """``text`` without its metadata attachments (``, !noalias !3``): a copy placed
    elsewhere must not claim the aliasing facts of the original."""
    return _ATTACHED_METADATA.sub("", text)
