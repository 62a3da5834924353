"""torch.compile on simhpu: the device registered with Dynamo and Inductor.

Inductor's C++ (CPU) code generator writes the kernels, since the device's
processor is the host's; the wrapper launches them on the device's streams
(wrapper.py, kernels.py) and runs each call of a compiled graph as one launch
(cluster.py). `torch.compile(model)` needs no backend argument;
`backend="simhpu"` (backend.py) is the same compiler with clustering always on.

Registration happens at import and costs little: Inductor's code generators are
imported when the first graph is compiled, not before.
"""
from __future__ import annotations

from torch._dynamo.device_interface import register_interface_for_device
from torch._inductor.codegen.common import register_backend_for_device, register_device_op_overrides

from torch_simhpu._inductor import config, cpp_backend
from torch_simhpu._inductor.interface import SimHPUDeviceOpOverrides, SimHPUInterface
from torch_simhpu._device_name import DEVICE_TYPE


class _Scheduling:
    """Inductor's C++ scheduling, imported when Inductor first asks for it.

    A class, since Inductor checks the registered constructor with issubclass;
    constructing it gives the CppScheduling that does the work."""

    def __new__(cls, scheduler):
        from torch._inductor.codegen.cpp import CppScheduling

        return CppScheduling(scheduler)


class _Wrapper:
    """Inductor creates the wrapper through `create`; the class is imported then.

    Not cached by Inductor's FX-graph cache: the generated module names the
    user's file and line of each launch, which that cache's key does not cover
    (the same graph from another checkout, or after lines above it moved, would
    report stale places). Kernels are still cached by their source, so a warm
    compile skips the C++ compiler; it redoes lowering and code generation."""

    supports_caching = False

    @staticmethod
    def create(*args, **kwargs):
        from torch_simhpu._inductor.wrapper import SimHPUWrapperCodegen

        return SimHPUWrapperCodegen.create(*args, **kwargs)


def register() -> None:
    register_interface_for_device(DEVICE_TYPE, SimHPUInterface)
    for index in range(SimHPUInterface.device_count()):
        register_interface_for_device(f"{DEVICE_TYPE}:{index}", SimHPUInterface)
    register_device_op_overrides(DEVICE_TYPE, SimHPUDeviceOpOverrides())
    register_backend_for_device(DEVICE_TYPE, _Scheduling, _Wrapper, device_custom_config=config)
    cpp_backend.install_backend_choice()
    from torch_simhpu._inductor import backend  # noqa: F401  (registers backend="simhpu")
