"""The workloads ``python -m bench`` can run, and how one is added.

A workload is a function ``fn(config) -> list of rows`` (``bench.rows.row``) registered with
the ``@workload(name, title)`` decorator. The built-in ones are registered by ``bench.suite``;
others by importing their module, named with ``--load MODULE`` or as an entry point of the
group ``adcore.bench`` in the package that provides it.
"""
import importlib
import importlib.metadata
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from .timing import Sampler

ENTRY_POINT_GROUP = "adcore.bench"


@dataclass(frozen=True)
class Config:
    """What a workload is asked for: ``quick`` (smaller, fewer repeats), ``size`` (scales the
    problem sizes), the ``sampler`` to time with (``config.sampler.time(fn)``) and the
    ``--output`` folder for any files of its own (``None`` when not given); ``scheduler``
    the address of a Dask scheduler for the distributed workload (``None``: local clusters)."""
    quick: bool = False
    size: float = 1.0
    sampler: Sampler = Sampler()
    output: str = None
    scheduler: str = None


@dataclass(frozen=True)
class Workload:
    """A registered workload."""
    name: str
    title: str
    fn: object
    quick: bool    # part of --quick
    source: str    # the module that registered it


WORKLOADS = {}


def workload(name, title, quick=False):
    """Decorator registering ``fn(config) -> rows`` as the workload ``name``; ``quick``
    puts it in the ``--quick`` set."""
    def register(fn):
        old = WORKLOADS.get(name)
        if old is not None and (old.source, old.fn.__qualname__) != (fn.__module__, fn.__qualname__):
            raise ValueError(f"workload {name!r} is already registered by {old.source}")
        WORKLOADS[name] = Workload(name, title, fn, quick, fn.__module__)
        return fn
    return register


def quick_names():
    return tuple(n for n, w in WORKLOADS.items() if w.quick)


def _import(spec):
    """Imports a module by name, or a ``.py`` file by path."""
    if spec.endswith(".py"):
        path = Path(spec)
        module_spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        return module
    return importlib.import_module(spec)


def load(modules=()):
    """Registers the built-in workloads, those of installed packages' ``adcore.bench`` entry
    points, then those of ``modules`` (module names or ``.py`` paths)."""
    importlib.import_module("bench.suite")
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        entry.load()
    for spec in modules:
        _import(spec)
    return WORKLOADS
