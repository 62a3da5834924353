"""What Python sees: pybind11 bindings, fake kernels, torch.compile
substitutions, the package's generated __init__, the type stub and the docs."""
from __future__ import annotations

from ..api import OpView
from ..model import Project

FILES = {
    "csrc/python_bindings.cpp": "python_bindings.cpp.j2",
    "python/torch_simhpu/_generated/__init__.py": "generated_init.py.j2",
    "python/torch_simhpu/_generated/fake.py": "fake.py.j2",
    "python/torch_simhpu/_generated/compile.py": "compile.py.j2",
    "python/torch_simhpu/__init__.pyi": "stub.pyi.j2",
    "docs/ops.md": "ops.md.j2",
}


def render(env, project: Project, views: list[OpView]) -> dict[str, str]:
    context = {"project": project, "ops": views, "custom_ops": [v for v in views if v.op.kind == "custom"]}
    return {path: env.get_template(template).render(context) for path, template in FILES.items()}
