"""The facts a result depends on: machine, thread settings, versions, date.

CPU features come from llvmlite (the host as LLVM sees it: what Numba and adcore compile
for), BLAS/OpenMP thread pools from threadpoolctl (the libraries actually loaded, with their
thread counts), versions from the installed distributions' metadata.
"""
import datetime
import os
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from . import peers

THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                    "NUMBA_NUM_THREADS", "NUMBA_THREADING_LAYER")
PACKAGES = ("numpy", "scipy", "numba", "llvmlite", "threadpoolctl")


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def _memory_bytes():
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def cpu():
    """Model, LLVM's name and enabled features of the host CPU, logical cores and those this
    process may run on, memory."""
    import llvmlite.binding as llvm
    features = llvm.get_host_cpu_features()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return dict(model=_cpu_model(), llvm_name=llvm.get_host_cpu_name(),
                flags=sorted(name for name, on in features.items() if on),
                cores=os.cpu_count(), usable_cores=usable, memory_bytes=_memory_bytes())


def threads():
    """Thread settings: the environment variables, the loaded BLAS/OpenMP pools
    (threadpoolctl), Numba's and PyTorch's thread counts."""
    import numba
    from threadpoolctl import threadpool_info
    pools = sorted((dict(api=p["internal_api"], version=p.get("version"), num_threads=p["num_threads"],
                         library=Path(p["filepath"]).name) for p in threadpool_info()),
                   key=lambda p: p["library"])
    torch = peers.get("torch")
    return dict(variables={v: os.environ.get(v) for v in THREAD_VARIABLES}, pools=pools,
                numba=dict(num_threads=numba.config.NUMBA_NUM_THREADS,
                           threading_layer=numba.config.THREADING_LAYER),
                torch=None if torch is None else torch.get_num_threads())


def _git(*args):
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", *args], cwd=here, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def _version(name):
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def versions():
    """Python, the packages adcore uses, adcore itself (with its git commit when run from a
    clone) and the peers (None: not installed)."""
    out = {"python": platform.python_version(), "implementation": platform.python_implementation()}
    out.update({name: _version(name) for name in PACKAGES})
    out["adcore"] = dict(version=_version("adcore"), commit=_git("rev-parse", "HEAD"),
                         describe=_git("describe", "--always", "--dirty"))
    out["peers"] = {name: peers.version(name) for name in peers.NAMES}
    return out


def load_average():
    """The 1-minute load average (processes running or waiting for a core), or None."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def busy(env):
    """The highest load average of the run when it exceeded the usable cores, else None."""
    loads = [v for v in env["load_average"].values() if v is not None]
    return max(loads) if loads and max(loads) > env["cpu"]["usable_cores"] else None


def collect(load_at_start=None):
    """The environment of this process, as stored in the JSON results (call it after the
    workloads: threadpoolctl sees only the libraries loaded by then); ``load_at_start`` is
    ``load_average()`` before them."""
    return dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                load_average=dict(start=load_at_start, end=load_average()),
                platform=dict(system=platform.system(), release=platform.release(),
                              machine=platform.machine()),
                math=math(), cpu=cpu(), threads=threads(), versions=versions())


def math():
    """The math functions adcore's compiled code calls (no fast-math flag is set anywhere)."""
    from adcore.backend import vector_math
    if vector_math.ENABLED:
        return ("adcore's gradients: glibc's libmvec for vectorised tanh/exp/log/sin/cos "
                "(4 ulp), libm elsewhere; Numba's own code: libm")
    return "libm (adcore's vector math off)"
