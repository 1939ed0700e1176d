"""The staged program's arguments: ``Arg(name, kind, payload)``, ``kind`` a ``Kind``.

Params, workspaces and kernel buffers are ``Duplicated`` (``SHADOWED``); leaves come from
the call's arguments (``LEAVES``), the others are made when the program is built."""
import enum
from typing import Any, NamedTuple


class Kind(enum.Enum):
    """What a program argument is."""
    PARAM = "a differentiated leaf"
    INPUT = "a constant leaf"
    INDEX = "an integer array argument used for indexing, flat"
    INDEX_ND = "an integer array argument handed to a user kernel in its shape"
    STATE = "a layer's state array of an argument (running statistics), read and written in place, flat"
    CONST = "an array baked from the recording"
    WORK = "a workspace buffer"
    KBUF = "a buffer handed to a user kernel"


LEAVES = (Kind.PARAM, Kind.INPUT, Kind.INDEX, Kind.INDEX_ND, Kind.STATE)   # taken from the call's arguments
SHADOWED = (Kind.PARAM, Kind.WORK, Kind.KBUF)                 # ``Duplicated`` in the program


class Arg(NamedTuple):
    name: str
    kind: Kind
    payload: Any
