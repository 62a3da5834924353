"""Loading the whole operator project and generating its files."""
from __future__ import annotations

import dataclasses
import os

from .model.cpp_expr import ExpressionError, Parsed, Scope, formula_helpers, parse, symint_arguments
from .derivatives.loader import derivatives_of, load_derivatives
from .emit import render, write_tree
from .errors import CodegenError, Problems  # noqa: F401  (CodegenError: what load_project raises)
from .model.operators import OP_PLUGIN_REGISTRATION, Project, registered_names
from .simhpu_yaml.load import load_ops
from .simhpu_yaml.stubs import STUB_KERNEL_REGISTRATION
from .target import Target, backend

OPS_YAML = "op_plugin_functions.yaml"
DERIVATIVES_YAML = "derivatives.yaml"
# Beside a dialect ops file: operators of it given simhpu's own kernels, in simhpu's format.
OVERLAY_YAML = "op_plugin_overlay.yaml"
KERNEL_DIR = os.path.join("csrc", "kernels")
OP_PLUGIN_DIR = "op_plugin"


def load_project(root: str, target: Target | None = None) -> Project:
    """Load and validate both YAML files; raises CodegenError listing every
    problem. The one place the model is built: each pass returns what it
    found, and every Operator is assembled from those results once. `target`:
    the backend itself (default) or an operator package (target.package)."""
    target = target or backend(root)
    dialect = _load_dialect(root, target)
    if dialect is not None:
        return dialect
    problems = Problems()
    project = _load_own(root, target, OPS_YAML, DERIVATIVES_YAML, problems)
    problems.raise_if_any()
    return project


def _load_own(root: str, target: Target, ops_file: str, derivatives_file: str | None, problems: Problems,
              dialect_derivatives=None) -> Project:
    """An ops file in simhpu's own format (and its derivatives file), every operator assembled once. An
    overlay of a dialect file takes its derivatives from the dialect's derivatives.yaml instead: the
    entries (selected for this torch) that name its custom operators."""
    kernels = registered_names(os.path.join(root, KERNEL_DIR))
    op_plugins = registered_names(os.path.join(root, OP_PLUGIN_DIR), OP_PLUGIN_REGISTRATION)
    stub_kernels = registered_names(os.path.join(root, KERNEL_DIR), STUB_KERNEL_REGISTRATION)
    declared = load_ops(os.path.join(root, ops_file), kernels, problems, root, op_plugins, target, stub_kernels)
    # Both files are checked in one run whatever the other holds: derivative
    # entries of operators whose declaration has problems are skipped, not reported.
    composites = _resolve_composites(target, declared, problems)
    if derivatives_file:
        derivatives = load_derivatives(os.path.join(root, derivatives_file), declared, problems, root,
                                       target.formula_helpers_header)
    elif dialect_derivatives:
        derivatives = derivatives_of(_naming(dialect_derivatives, {op.name for op in declared.custom_ops}),
                                     DERIVATIVES_YAML, declared, problems, target.formula_helpers_header)
    else:
        derivatives = {}
    if problems.items:
        return declared
    ops = []
    for op in declared.ops:
        composite, derivative = composites.get(op.name), derivatives.get(op.name)
        parts = [p for p in (composite, derivative) if p is not None]
        ops.append(dataclasses.replace(op, composite_cpp=composite.cpp if composite else None,
                                       derivative=derivative.info if derivative else None,
                                       aten_calls=frozenset().union(*(p.aten_calls for p in parts)),
                                       npu_calls=frozenset().union(*(p.npu_calls for p in parts))))
    generated = tuple(op.kernel for op in ops if op.elementwise)
    return dataclasses.replace(declared, ops=tuple(ops), kernel_names=tuple(sorted({*kernels, *generated})),
                               adapter_names=tuple(sorted(op_plugins)))


def _load_dialect(root: str, target: Target) -> Project | None:
    """The project of a root whose ops file is in op-plugin's dialect (codegen/op_plugin/translate.py), else
    None. Its overlay (OVERLAY_YAML, simhpu's own format), when there is one, gives operators of the dialect
    file simhpu's kernels: an overlay entry replaces the dialect's entry of the same name and schema."""
    from .op_plugin.translate import translate

    report = load_dialect_project(root)
    if report is None:
        return None
    problems = Problems()
    if not target.in_tree:
        problems.add(OPS_YAML, 1, "(file)", "all_version",
                     "an operator package cannot be built from op-plugin's dialect: its official entries give "
                     "aten operators device kernels, which torch_simhpu owns",
                     "build the dialect file as torch_simhpu's own YAML, or declare the package's operators in "
                     "simhpu's format")
    project = translate(report, problems, target)
    overlay = (_load_own(root, target, OVERLAY_YAML, None, problems, report.derivative_entries)
               if os.path.isfile(os.path.join(root, OVERLAY_YAML)) else None)
    if overlay is None:
        problems.raise_if_any()
        adapters = registered_names(os.path.join(root, OP_PLUGIN_DIR), OP_PLUGIN_REGISTRATION)
        return dataclasses.replace(project, adapter_names=tuple(sorted(adapters)),
                                   kernel_names=tuple(sorted(registered_names(os.path.join(root, KERNEL_DIR)))))
    dialect_ops = {op.name: op for op in project.ops}
    for op in overlay.ops:
        replaced = dialect_ops.get(op.name)
        if replaced is not None and str(replaced.schema) != str(op.schema):
            problems.add(OVERLAY_YAML, op.line, op.name, "func",
                         f"{OPS_YAML}:{replaced.line} declares {op.name} as {replaced.schema}",
                         "give the overlay entry the dialect entry's schema exactly")
    problems.raise_if_any()
    provided = {op.name for op in overlay.ops}
    ops = tuple(op for op in project.ops if op.name not in provided) + overlay.ops
    return dataclasses.replace(overlay, ops=ops, rejected=project.rejected | overlay.rejected)


def _naming(entries, names: set):
    """The derivative entries whose schema names one of `names`, lines kept."""
    from .yaml_loader import LineList

    chosen = LineList()
    chosen.line, chosen.item_lines = entries.line, []
    for index, entry in enumerate(entries):
        if str(entry.get("name", "")).split("(")[0].strip() in names:
            chosen.append(entry)
            chosen.item_lines.append(entries.line_at(index))
    return chosen


def load_dialect_project(root: str):
    """The op-plugin dialect's report when the root's ops file is written in it (codegen/op_plugin/dialect.py),
    else None; raises CodegenError listing every problem of a dialect file."""
    from .op_plugin.dialect import is_dialect, load_dialect, load_dialect_derivatives
    from .yaml_loader import LineDict, load_yaml_file

    problems = Problems()
    doc = load_yaml_file(os.path.join(root, OPS_YAML), OPS_YAML, problems, empty=LineDict())
    if not is_dialect(doc):
        return None
    report = load_dialect(doc, OPS_YAML, problems)
    if report.all_versions and os.path.isfile(os.path.join(root, DERIVATIVES_YAML)):
        report.derivative_entries = load_dialect_derivatives(os.path.join(root, DERIVATIVES_YAML), DERIVATIVES_YAML,
                                                             report, problems)
    problems.raise_if_any()
    return report


def generate(root: str, out_dir: str, target: Target | None = None) -> list[str]:
    """Validate, then write the generated tree; nothing is written if validation fails."""
    project = load_project(root, target)
    return write_tree(out_dir, render(project))


def _resolve_composites(target: Target, project: Project, problems: Problems) -> dict[str, Parsed]:
    """Operator name -> its parsed composite expression (its C++ rendered from
    the parse); composites that call themselves through others are refused."""
    # Operators rejected for problems of their own still count as declared, so
    # their callers are not reported too.
    npu_ops = frozenset(op.cpp_name for op in project.custom_ops) | project.rejected
    helpers = frozenset(formula_helpers(target.formula_helpers_header))
    calls: dict[str, set] = {}
    parsed_ops: dict[str, Parsed] = {}
    for op in project.ops:
        if op.composite is None:
            continue
        scope = Scope(frozenset(a.name for a in op.schema.arguments.flat_all), npu_ops - {op.cpp_name}, helpers,
                      symint_values=symint_arguments(op.schema))
        try:
            parsed = parse(op.composite, scope)
        except ExpressionError as e:
            problems.add(op.file, op.composite_line, op.name, "composite", f"the expression {e}",
                         "write one C++ expression over the arguments, calling npu_* operators, aten "
                         "operators or helpers from csrc/autograd/formulas.h")
            continue
        parsed_ops[op.name] = parsed
        calls[op.cpp_name] = parsed.npu_calls
    for op in project.ops:
        cycle = _call_cycle(op.cpp_name, calls)
        if cycle:
            problems.add(op.file, op.composite_line, op.name, "composite",
                         "composite operators call each other in a cycle: " + " -> ".join(cycle),
                         "let one of them call a kernel (exec:) instead")
    return parsed_ops


def _call_cycle(start: str, calls: dict[str, set]) -> list[str]:
    """The shortest chain of composite calls from `start` back to itself, or []."""
    paths = [[start]]
    seen = set()
    while paths:
        path = paths.pop(0)
        for callee in sorted(calls.get(path[-1], ())):
            if callee == start:
                return path + [start]
            if callee not in seen:
                seen.add(callee)
                paths.append(path + [callee])
    return []
