"""What torch.simhpu.get_device_properties() reports: torch.cuda's fields, for a simulated part.

The fields a program sizes things by (name, total_memory, multi_processor_count)
come from the device itself: its memory capacity (SIMHPU_MEMORY_LIMIT, or the
device profile's capacity when SIMHPU_DEVICE_PROFILE sets one at import) and the
host processors that run its kernels. The rest describe no real silicon; they
carry values a CUDA program can size itself by without failing, and say so in
their names' documentation here rather than pretend to be measurements.
"""
from __future__ import annotations

import dataclasses
import os
import uuid

from torch_simhpu import _C
from torch_simhpu._device_name import DEVICE_TYPE

# A "compute capability" that names no NVIDIA part: code that branches on
# major >= 8 (bf16, tf32 paths) sees a modern part, and no CUDA arch matches it.
CAPABILITY = (9, 0)


def device_name(index: int) -> str:
    """"simhpu", or "simhpu (PROFILE)" while a device profile is in use."""
    profile = _C._simclock_profile_name()
    return f"simhpu ({profile})" if profile else "simhpu"


@dataclasses.dataclass(frozen=True)
class SimhpuDeviceProperties:
    """torch.cuda.get_device_properties()'s fields, for one simhpu device."""

    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int
    is_integrated: bool = False
    is_multi_gpu_board: bool = False
    # Not silicon: the numbers CUDA programs commonly size tiles by.
    max_threads_per_multi_processor: int = 2048
    max_threads_per_block: int = 1024
    warp_size: int = 32
    regs_per_multiprocessor: int = 65536
    shared_memory_per_block: int = 48 * 1024
    shared_memory_per_block_optin: int = 227 * 1024
    shared_memory_per_multiprocessor: int = 228 * 1024
    L2_cache_size: int = 50 * 1024 * 1024
    clock_rate: int = 0  # kHz; 0: the simulated part has no clock of its own
    memory_clock_rate: int = 0
    memory_bus_width: int = 0
    gcnArchName: str = "NA"  # noqa: N815 - torch.cuda's spelling
    uuid: str = ""
    pci_bus_id: int = 0
    pci_device_id: int = 0
    pci_domain_id: int = 0
    index: int = 0
    type: str = DEVICE_TYPE

    def __repr__(self) -> str:
        return (f"_SimhpuDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // (1024 * 1024)}MB, "
                f"multi_processor_count={self.multi_processor_count}, uuid={self.uuid})")


def device_properties(index: int) -> SimhpuDeviceProperties:
    return SimhpuDeviceProperties(
        name=device_name(index), major=CAPABILITY[0], minor=CAPABILITY[1],
        total_memory=_C._memory_limit(), multi_processor_count=os.cpu_count() or 1,
        uuid=str(uuid.uuid5(uuid.NAMESPACE_URL, f"simhpu:{index}")), pci_device_id=index, index=index)
