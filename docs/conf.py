"""Sphinx configuration of adcore's documentation.

Build it with ``python -m sphinx -W --keep-going -b html docs docs/_build/html`` from the
repository's root (``pip install -e ".[docs]"`` first).
"""
import os
import sys

sys.path.insert(0, os.path.abspath(".."))

import adcore  # noqa: E402

project = "adcore"
author = "the adcore developers"
copyright = "the adcore developers"
release = adcore.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "myst_parser",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]

myst_enable_extensions = ["colon_fence", "deflist", "dollarmath"]
myst_heading_anchors = 3

# API reference: docstrings as written (reST with ``literals``), Google/NumPy sections too
autodoc_default_options = {"members": False, "undoc-members": False}
autodoc_member_order = "bysource"
autodoc_typehints = "none"
autodoc_preserve_defaults = True
napoleon_google_docstring = True
napoleon_numpy_docstring = True
add_module_names = False

html_theme = "alabaster"
html_title = f"adcore {release}"
html_theme_options = {
    "description": "Automatic differentiation of Numba kernels at the LLVM IR level",
    "fixed_sidebar": True,
}
