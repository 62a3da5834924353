"""Shared by both halves of the suite: codegen/ (torch, jinja2 and pyyaml
only: no build needed) and device/ (the installed wheel)."""
import os
import sys

# Strict mode (host code touching device memory faults) for the whole suite,
# subprocesses included, unless the caller chose a mode (device/test_default_mode.py
# runs part of the suite in the default one). Set here, before anything imports
# torch: an installed torch_simhpu is loaded by `import torch` itself.
os.environ.setdefault("SIMHPU_STRICT", "1")

# Helper modules (helpers.py, codegen/yaml_edit.py); --import-mode=importlib adds no folder to sys.path.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "codegen")]
