"""Loading the whole operator project and generating its files."""
from __future__ import annotations

import os

from .cpp_calls import formula_helpers, resolve
from .derivatives import attach_derivatives
from .emit import render, write_tree
from .errors import CodegenError, Problems  # noqa: F401  (CodegenError: what load_project raises)
from .model import Project, load_ops, registered_kernels

OPS_YAML = "op_plugin_functions.yaml"
DERIVATIVES_YAML = "derivatives.yaml"
KERNEL_DIR = os.path.join("csrc", "kernels")


def load_project(root: str) -> Project:
    """Load and validate both YAML files; raises CodegenError listing every problem."""
    problems = Problems()
    kernels = registered_kernels(os.path.join(root, KERNEL_DIR))
    project = load_ops(os.path.join(root, OPS_YAML), kernels, problems, root)
    if not problems.items:
        _resolve_composites(root, project, problems)
        attach_derivatives(os.path.join(root, DERIVATIVES_YAML), project, problems, root)
    problems.raise_if_any()
    return project


def generate(root: str, out_dir: str) -> list[str]:
    """Validate, then write the generated tree; nothing is written if validation fails."""
    project = load_project(root)
    return write_tree(out_dir, render(project))


def _resolve_composites(root: str, project: Project, problems: Problems) -> None:
    npu_ops = {op.cpp_name for op in project.custom_ops}
    helpers = formula_helpers(root)
    for op in project.ops:
        if op.composite is None:
            continue
        values = {a.name for a in op.schema.arguments.flat_all}
        aten, unknown = resolve(op.composite, values, npu_ops - {op.cpp_name}, helpers)
        op.aten_calls |= aten
        for message in unknown:
            problems.add(op.file, op.line, op.name, "composite", f"the expression {message}")
