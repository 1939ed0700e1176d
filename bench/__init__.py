"""adcore's benchmark suite (``python -m bench``). A workload of your own is a function
``fn(config) -> rows`` registered with ``@workload``; see ``bench.registry``."""
from .registry import Config, workload
from .rows import failed, row, skipped

__all__ = ["Config", "workload", "row", "skipped", "failed"]
