import re
from pathlib import Path

from setuptools import setup, find_packages

VERSION = re.search(r'__version__ = "(.+)"', Path(__file__).with_name("adcore").joinpath(
    "__init__.py").read_text()).group(1)

setup(
    name="adcore",
    version=VERSION,
    description="Reverse-mode automatic differentiation of Numba kernels at the LLVM IR level, "
                "with a tape engine and a Flux-like layers/optim API",
    packages=find_packages(include=["adcore", "adcore.*", "layers", "layers.*",
                                    "optim", "optim.*", "bench", "bench.*"]),
    package_data={"adcore.ir": ["templates/*.ll"]},     # the IR templates adcore.ir.writer reads
    python_requires=">=3.10",
    install_requires=[
        "numba>=0.68,<0.69",
        "llvmlite>=0.50,<0.51",
        "numpy>=1.24",
        "scipy",          # Numba's np.dot and @ call BLAS through scipy
        "tqdm",
        "threadpoolctl",  # bench: the BLAS/OpenMP thread pools in the results' environment
    ],
    extras_require={
        "test": ["pytest", "pytest-xdist", "hypothesis",            # tests run in 2 processes
                 "jsonschema", "matplotlib",                        # bench: schema, charts
                 "scikit-learn",                                    # the digits data set
                 "ziglang",                                         # C to LLVM IR (zig cc)
                 "tbb",                                             # Numba's tbb threading layer
                 "distributed"],                                    # adcore.distributed
        "digits": ["scikit-learn", "matplotlib"],   # python -m bench digits
        "peers": ["torch==2.13.0", "jax[cpu]", "autograd", "matplotlib"],
        "plot": ["matplotlib"],
        "distributed": ["distributed"],             # adcore.distributed, train(cluster=)
        "docs": ["sphinx>=7", "myst-parser>=2",        # the documentation site (docs/)
                 "distributed"],                    # autodoc imports adcore.distributed
    },
)
