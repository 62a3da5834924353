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
    kernels = {"adapters": device + context["official_ops"],
               "autograd": [v for v in device if v.autograd],
               "composites": context["composites"]}
    return {
        "csrc/registrations.cpp": env.get_template("registrations.cpp.j2").render(context),
        "include/generated/op_kernels.h": env.get_template("op_kernels.h.j2").render(kernels),
        "include/generated/npu_ops.h": env.get_template("npu_ops.h.j2").render(context),
        "csrc/npu_ops.cpp": env.get_template("npu_ops.cpp.j2").render(context),
    }
