"""The headers of what each operator's translation unit registers (its
kernels, by dispatch key) and of its C++ API; the registrations themselves
are in the operator's own translation unit (templates/op_registration.j2)."""
from __future__ import annotations

from .api import OpView


def render(env, views: list[OpView]) -> dict[str, str]:
    custom = [v for v in views if v.op.kind == "custom"]
    with_adapters = [v for v in views if v.op.kind == "official" or v.op.implementation != "composite"]
    composites = [v for v in custom if v.op.implementation == "composite"]
    files = {}
    # Per operator: the functions its registrations name (the files defining
    # them include the header too, so a drifting definition does not compile),
    # and its C++ API.
    op_kernels = env.get_template("op_kernels.h.j2")
    for v in with_adapters:
        files[f"include/generated/op_kernels/{v.cpp_name}.h"] = op_kernels.render(
            adapters=[v], autograd=[v] if v.autograd else [], composites=[])
    for v in composites:
        files[f"include/generated/op_kernels/{v.cpp_name}.h"] = op_kernels.render(
            adapters=[], autograd=[], composites=[v])
    npu_ops = env.get_template("npu_ops.h.j2")
    for v in custom:
        files[f"include/generated/ops/{v.cpp_name}.h"] = npu_ops.render(custom_ops=[v])
    umbrella = env.get_template("umbrella.h.j2")
    files["include/generated/op_kernels.h"] = umbrella.render(
        folder="op_kernels", names=[v.cpp_name for v in with_adapters + composites],
        purpose="Every function the operators register, by the dispatch key it serves.")
    files["include/generated/npu_ops.h"] = umbrella.render(
        folder="ops", names=[v.cpp_name for v in custom],
        purpose="The C++ API of every custom operator (simhpu::ops).")
    return files
