"""Sphinx configuration: the Markdown pages (MyST) and the API reference from the installed
package's docstrings. Built by the test suite with warnings as errors (tests/device/test_docs.py):

    python -m sphinx -W -b html docs build/docs
"""
project = "torch_simhpu"
extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
html_theme = "alabaster"
autodoc_member_order = "bysource"
# Code blocks are examples of several languages and of program output, some deliberately partial
# (a YAML fragment, an error message): they are shown as written, never lexed.
highlight_language = "none"


def _as_written(app, what, name, obj, options, lines):
    """The docstrings are plain text, not reStructuredText: each is shown as written, preformatted."""
    if lines:
        lines[:] = ["::", ""] + ["    " + line for line in lines] + [""]


def setup(app):
    app.connect("autodoc-process-docstring", _as_written)
