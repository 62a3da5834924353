"""Telling an operator package's source folder from its installed copy.

Python puts the folder it was started in first on sys.path, so Python started
in a package's own folder (beside its setup.py) imports the package's sources,
which hold no compiled module, library or generated Python: the import then
fails as a circular import, a missing `_generated` or an IndexError, and
nothing names the folder. These helpers load what the build made and, when it
is missing from a source folder, raise an error that says what happened.
"""
from __future__ import annotations

import glob
import importlib
import os
import sys
from types import ModuleType


def _source_folder_error(package: str, missing: str) -> ImportError | None:
    """The error for `package` imported from its source folder (None: it was not)."""
    folder = os.path.dirname(os.path.abspath(sys.modules[package].__file__))
    if not os.path.exists(os.path.join(os.path.dirname(folder), "setup.py")):
        return None
    return ImportError(
        f"{package} is being imported from {folder}, its source folder, which has no {missing} (the build makes "
        f"it): Python was started in {os.getcwd()}, which puts that folder first on sys.path and hides the "
        f"installed {package}. Run Python from another folder to use the installed package.", name=package)


def import_built(package: str, module: str = "_C") -> ModuleType:
    """Import `package.module` (what the build made: `_C`, `_generated.ops`, ...)."""
    try:
        return importlib.import_module(f"{package}.{module}")
    except ImportError as error:
        shadowed = _source_folder_error(package, f"{package}.{module}")
        if shadowed is None:
            raise
        raise shadowed from error


def built_library(package: str, pattern: str = "_C*.so") -> str:
    """The path of the one shared library beside `package`'s __init__ that matches
    `pattern` (for torch.ops.load_library)."""
    folder = os.path.dirname(os.path.abspath(sys.modules[package].__file__))
    found = glob.glob(os.path.join(folder, pattern))
    if len(found) == 1:
        return found[0]
    shadowed = _source_folder_error(package, pattern) if not found else None
    if shadowed is not None:
        raise shadowed
    raise ImportError(f"{package}: expected one built library {pattern} in {folder}, found "
                      f"{[os.path.basename(f) for f in found]}; reinstall the package's wheel", name=package)
