"""Loading the whole operator project and generating its files."""
from __future__ import annotations

import os

from .derivatives import attach_derivatives
from .emit import render, write_tree
from .errors import Problems
from .model import Project, load_ops, registered_kernels

OPS_YAML = "op_plugin_functions.yaml"
DERIVATIVES_YAML = "derivatives.yaml"
KERNEL_DIR = os.path.join("csrc", "kernels")


def load_project(root: str) -> Project:
    """Load and validate both YAML files; raises CodegenError listing every problem."""
    problems = Problems()
    kernels = registered_kernels(os.path.join(root, KERNEL_DIR))
    project = load_ops(os.path.join(root, OPS_YAML), kernels, problems)
    if not problems.items:
        attach_derivatives(os.path.join(root, DERIVATIVES_YAML), project, problems)
    problems.raise_if_any()
    return project


def generate(root: str, out_dir: str) -> list[str]:
    """Validate, then write the generated tree; nothing is written if validation fails."""
    project = load_project(root)
    return write_tree(out_dir, render(project))
