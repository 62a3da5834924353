"""Autograd nodes and kernels, one translation unit per differentiable operator."""
from __future__ import annotations

from .api import OpView


def render(env, views: list[OpView]) -> dict[str, str]:
    template = env.get_template("autograd.cpp.j2")
    return {f"csrc/autograd/{v.cpp_name}.cpp": template.render(v=v) for v in views if v.autograd}
