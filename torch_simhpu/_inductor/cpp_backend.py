"""Telling Inductor that simhpu's kernels come from its C++ backend.

Inductor decides some code generation by device type where it means "which
backend writes this device's kernels": get_current_backend() names the C++
backend for "cpu" only and Triton (config.cuda_backend) for every other
device, and the scheduler's node.is_cpu() gates loop fusion and reindexing
heuristics written for the C++ kernel's loop shapes. simhpu's kernels come
from the C++ backend, so both answer as for the CPU. Without this, Inductor
applies Triton-only reasoning to C++ loops: vectorised indirect indexing
(embedding, gather) and matmul+softmax fusion fail with empty AssertionErrors.
"""
from __future__ import annotations

import functools
from torch_simhpu._device_name import DEVICE_TYPE

DEVICES = {"cpu", DEVICE_TYPE}


def install_backend_choice() -> None:
    """Before lowering: get_current_backend, where codegen and lowering ask it."""
    import torch._inductor.codegen.common as codegen_common
    import torch._inductor.utils as inductor_utils

    original = inductor_utils.get_current_backend
    if getattr(original, "_simhpu_aware", False):
        return

    @functools.wraps(original)
    def get_current_backend(device_type: str | None = None) -> str:
        if device_type is None:
            from torch._inductor.virtualized import V

            device_type = V.graph.get_current_device_or_throw().type
        if device_type == DEVICE_TYPE:
            return "cpp"
        return original(device_type)

    get_current_backend._simhpu_aware = True
    for module in (inductor_utils, codegen_common):
        module.get_current_backend = get_current_backend


def install_scheduler_choice() -> None:
    """Before a graph's scheduler is built: the scheduler's C++-backend heuristics."""
    from torch._inductor.scheduler import BaseSchedulerNode

    def is_cpu(node) -> bool:
        device = node.get_device()
        return device is not None and device.type in DEVICES

    if not getattr(BaseSchedulerNode.is_cpu, "_simhpu_aware", False):
        is_cpu._simhpu_aware = True
        BaseSchedulerNode.is_cpu = is_cpu
