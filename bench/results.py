"""The results document of a run, as written by ``--json`` and read by ``--compare``.

Times are seconds (per gradient, per op or per 1000 epochs, as each row's case says); each
timed row keeps every sample and their summary. ``bench.schema.SCHEMA`` describes the
format; ``FORMAT`` changes when a field changes meaning or is removed.
"""
import json
import math
from pathlib import Path

import numpy as np

FORMAT = "adcore-bench/1"


def document(command, settings, environment, seconds, workloads, rows):
    """The results document: ``settings`` (the workloads, quick, size and the sampling), the
    ``environment`` (``bench.environment.collect``), wall ``seconds``, per workload its wall
    time and resident memory, and the rows."""
    return dict(format=FORMAT, command=command, settings=settings, environment=environment,
                seconds=seconds, workloads=workloads, rows=rows)


def _finite(value):
    """``value`` with numpy scalars as Python numbers and NaN and infinities (not JSON) as
    None, recursively."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def write(doc, path):
    Path(path).write_text(json.dumps(_finite(doc), indent=1, allow_nan=False) + "\n")


def read(path):
    """A results document; ValueError when it is not one of this format."""
    doc = json.loads(Path(path).read_text())
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise ValueError(f"{path}: not an {FORMAT} results file (format: {found!r})")
    return doc
