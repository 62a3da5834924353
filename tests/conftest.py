"""Shared by both halves of the suite: codegen/ (torch, jinja2 and pyyaml
only: no build needed) and device/ (the installed wheel)."""
import os
import sys

# Helper modules (helpers.py, codegen/yaml_edit.py); --import-mode=importlib adds no folder to sys.path.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "codegen")]
