"""What Python sees: pybind11 bindings, fake kernels, torch.compile
substitutions, the package's generated __init__, the type stub and the docs."""
from __future__ import annotations

from .api import OpView
from ..model.operators import Project
from ..model.rules import ArgRef
from ..model.types import python_default


def _rule(rule) -> tuple:
    return (rule.fn, tuple(a.name if isinstance(a, ArgRef) else a.value for a in rule.args))


def reference_view(v: OpView) -> dict:
    """What reference.py.j2 writes for one operator; every text in it is
    validated (names, rules) or rendered with repr()."""
    op = v.op
    args = [dict(name=a.name, type=str(a.type), default=python_default(a) if a.default is not None else "None",
                 required=a.default is None)
            for a in op.schema.arguments.flat_all]
    return dict(name=op.name, where=repr(f"{op.file}:{op.line}"), args=args, arg_names=[a["name"] for a in args],
                expression=op.reference, outputs=repr(tuple(o.name for o in op.outputs)),
                dtypes=repr(op.dtypes or ("float32", "float64")),  # a composite: its ops' dtypes
                variants=repr(op.variants), differentiable=op.derivative is not None or op.composite is not None,
                checks=repr(tuple(_rule(c) for c in op.checks)),
                sizes=repr(tuple(_rule(o.size) for o in op.outputs)), samples=repr(op.samples),
                composite=op.composite is not None)

# {package}: the folder of the Python package the operators are exposed from.
FILES = {
    "csrc/python_bindings.cpp": "python_bindings.cpp.j2",
    "python/{package}/_generated/__init__.py": "generated_init.py.j2",
    "python/{package}/_generated/fake.py": "fake.py.j2",
    "python/{package}/_generated/compile.py": "compile.py.j2",
    "python/{package}/_generated/reference.py": "reference.py.j2",
    "python/{package}/_generated/op_plugin.py": "op_plugin.py.j2",
    "docs/ops.md": "ops.md.j2",
}
# The backend's package is written by hand around the generated part; an
# operator package gets its extension module's init and a module to import.
BACKEND_FILES = {"python/{package}/__init__.pyi": "stub.pyi.j2"}
PACKAGE_FILES = {
    "csrc/module.cpp": "package_module.cpp.j2",
    "python/{package}/_generated/ops.py": "package_ops.py.j2",
    "python/{package}/_generated/ops.pyi": "stub.pyi.j2",
}


def render(env, project: Project, views: list[OpView]) -> dict[str, str]:
    in_tree = project.target.in_tree
    context = {"project": project, "ops": views, "custom_ops": [v for v in views if v.op.kind == "custom"],
               "in_tree": in_tree, "references": [reference_view(v) for v in views if v.op.reference]}
    files = {**FILES, **(BACKEND_FILES if in_tree else PACKAGE_FILES)}
    folder = project.target.package.replace(".", "/")
    return {path.format(package=folder): env.get_template(template).render(context)
            for path, template in files.items()}
