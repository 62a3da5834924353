"""What Dynamo and Inductor ask of the device (torch._dynamo.device_interface)."""
from __future__ import annotations

import torch
from torch._dynamo.device_interface import DeviceInterface
from torch._inductor.codegen.common import DeviceOpOverrides

from torch_simhpu import device as device_module
from torch_simhpu.device import streams
from torch_simhpu.device.properties import SimhpuDeviceProperties, device_properties


class SimHPUInterface(DeviceInterface):
    device = device_module.device
    Event = torch.Event
    Stream = streams.Stream

    class Worker:
        @staticmethod
        def set_device(device: int) -> None:
            device_module.set_device(device)

        @staticmethod
        def current_device() -> int:
            return device_module.current_device()

        @staticmethod
        def get_device_properties(device=None) -> SimhpuDeviceProperties:
            return device_properties(device_module._index(device))

    current_device = staticmethod(device_module.current_device)
    set_device = staticmethod(device_module.set_device)
    device_count = staticmethod(device_module.device_count)
    is_available = staticmethod(device_module.is_available)
    synchronize = staticmethod(device_module.synchronize)
    stream = staticmethod(streams.stream)
    current_stream = staticmethod(streams.current_stream)
    set_stream = staticmethod(streams.set_stream)
    memory_allocated = staticmethod(device_module.memory_allocated)

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        previous = device_module.current_device()
        if device >= 0 and device != previous:
            device_module.set_device(device)
        return previous

    exchange_device = maybe_exchange_device

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        torch.accelerator.set_stream(torch.Stream(stream_id=stream_id, device_index=device_index,
                                                  device_type=device_type))

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        return streams.current_stream(device_idx).stream_id

    @staticmethod
    def get_device_properties(device=None) -> SimhpuDeviceProperties:
        return device_properties(device_module._index(device))

    @staticmethod
    def get_compute_capability(device=None) -> str:
        return ""

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return True

    @staticmethod
    def is_triton_capable(device=None) -> bool:
        return False  # kernels are Inductor's C++ ones


class SimHPUDeviceOpOverrides(DeviceOpOverrides):
    """Python lines the generated wrapper uses for device bookkeeping."""

    def import_get_raw_stream_as(self, name: str) -> str:
        return f"from torch_simhpu._inductor.interface import get_raw_stream as {name}"

    def set_device(self, device_idx: int) -> str:
        return f"torch.simhpu.set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.simhpu.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        return f"torch.simhpu.device({device_idx})"


def get_raw_stream(device_index: int) -> int:
    return SimHPUInterface.get_raw_stream(device_index)
