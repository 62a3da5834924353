"""The operator library (schemas and per-key kernels) and the C++ API."""
from __future__ import annotations

from ..api import OpView


def render(env, views: list[OpView], namespace: str) -> dict[str, str]:
    custom = [v for v in views if v.op.kind == "custom"]
    device = [v for v in custom if v.op.implementation != "composite"]
    context = {
        "namespace": namespace,
        "custom_ops": custom,
        "device_ops": device,
        "mutating_ops": [v for v in device if v.out_variant or v.inplace_variant],
        "composites": [v for v in custom if v.op.implementation == "composite"],
        "official_ops": [v for v in views if v.op.kind == "official"],
    }
    files = {
        "csrc/registrations.cpp": env.get_template("registrations.cpp.j2").render(context),
        "csrc/npu_ops.cpp": env.get_template("npu_ops.cpp.j2").render(context),
    }
    umbrella = env.get_template("umbrella.h.j2")
    # Per operator: the functions registrations.cpp installs for it (the files
    # defining them include the header too, so a drifting definition does not
    # compile), and its C++ API.
    op_kernels = env.get_template("op_kernels.h.j2")
    with_adapters = device + context["official_ops"]
    for v in with_adapters + context["composites"]:
        adapted = any(v is a for a in with_adapters)
        files[f"include/generated/op_kernels/{v.cpp_name}.h"] = op_kernels.render(
            adapters=[v] if adapted else [], autograd=[v] if adapted and v.autograd else [],
            composites=[] if adapted else [v])
    npu_ops = env.get_template("npu_ops.h.j2")
    for v in custom:
        files[f"include/generated/ops/{v.cpp_name}.h"] = npu_ops.render(custom_ops=[v])
    files["include/generated/op_kernels.h"] = umbrella.render(
        folder="op_kernels", names=[v.cpp_name for v in with_adapters + context["composites"]],
        purpose="Every function registrations.cpp installs, by the dispatch key it serves.")
    files["include/generated/npu_ops.h"] = umbrella.render(
        folder="ops", names=[v.cpp_name for v in custom],
        purpose="The C++ API of every custom operator (simhpu::ops).")
    return files
