"""Device adapters (one translation unit per operator), composites, and the
header of hand-written op_plugin/ adapters."""
from __future__ import annotations

from .api import OpView


def render(env, views: list[OpView], adapter_names=()) -> dict[str, str]:
    files = {}
    for v in views:
        if v.op.kind == "official":
            template = "official_adapter.cpp.j2"
        elif v.op.implementation == "composite":
            template = "composite.cpp.j2"
        else:
            template = "adapter.cpp.j2"
        files[f"csrc/adapters/{v.cpp_name}.cpp"] = env.get_template(template).render(v=v)
    plugins = [v for v in views if v.op.adapter]
    # Adapters no entry names (op_plugin/ written for another ops file, e.g. when building from op-plugin's
    # dialect) still compile: nothing launches them, so there is no signature to hold them to.
    unused = sorted(set(adapter_names) - {v.op.adapter for v in plugins})
    files["include/generated/op_plugin.h"] = env.get_template("op_plugin.h.j2").render(ops=plugins, unused=unused)
    return files
