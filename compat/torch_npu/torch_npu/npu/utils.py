"""torch_npu.npu.utils: what the Ascend part and its software say about themselves."""
from __future__ import annotations

import os
import re

from torch_simhpu import device as _device

# SoC names and the versions torch_npu numbers them by: Ascend/pytorch,
# torch_npu/csrc/core/npu/NpuVariables.cpp (https://gitcode.com/Ascend/pytorch).
SOC_VERSIONS = {
    "Ascend910PremiumA": 100, "Ascend910ProA": 101, "Ascend910A": 102, "Ascend910ProB": 103, "Ascend910B": 104,
    "Ascend310P1": 200, "Ascend310P2": 201, "Ascend310P3": 202, "Ascend310P4": 203, "Ascend310P5": 204,
    "Ascend310P7": 205, "Ascend910B1": 220, "Ascend910B2": 221, "Ascend910B2C": 222, "Ascend910B3": 223,
    "Ascend910B4": 224, "Ascend310B1": 240, "Ascend310B2": 241, "Ascend310B3": 242, "Ascend310B4": 243,
    "Ascend910_9391": 250, "Ascend910_9392": 251, "Ascend910_9381": 252, "Ascend910_9382": 253,
    "Ascend910_9372": 254, "Ascend910_9362": 255,
}
SOC_SETTING = "SIMHPU_NPU_SOC"
CANN_SETTING = "SIMHPU_NPU_CANN_VERSION"
DEFAULT_SOC = "Ascend910B3"
DEFAULT_CANN = "8.5.0"


def _soc() -> str:
    soc = os.environ.get(SOC_SETTING, DEFAULT_SOC)
    if soc not in SOC_VERSIONS:
        raise RuntimeError(f"{SOC_SETTING}={soc!r} names no Ascend part torch_npu knows; "
                           f"one of {', '.join(SOC_VERSIONS)}")
    return soc


def get_device_name(device=None) -> str:
    """The Ascend part every simulated device stands for (SIMHPU_NPU_SOC)."""
    _device._index(device) if device is not None else None  # a device that does not exist fails as on the part
    return _soc()


def get_soc_version() -> int:
    return SOC_VERSIONS[_soc()]


def get_cann_version(module: str = "CANN") -> str:
    """The CANN release simhpu answers as (SIMHPU_NPU_CANN_VERSION): what version checks compare with."""
    version = os.environ.get(CANN_SETTING, DEFAULT_CANN)
    if not re.fullmatch(r"\d+\.\d+(\.\d+|\.RC\d+|\.T\d+)?(\.alpha\d+|\.beta\d+)?", version):
        raise RuntimeError(f"{CANN_SETTING}={version!r} is not a CANN version such as 8.5.0 or 8.0.RC3")
    return version


def _cann_version_key(version: str) -> tuple:
    """Orders CANN versions: 8.0.RC3 < 8.0.0 < 8.1.RC1."""
    parts = []
    for part in version.split(".")[:3]:
        if part.isdigit():
            parts.append((int(part), 1, 0))  # a release after its candidates
        else:
            match = re.fullmatch(r"(RC|T)(\d+)", part)
            parts.append((0, 0, int(match.group(2))) if match else (0, 0, 0))
    return tuple(parts)


def _is_gte_cann_version(version: str, module: str = "CANN") -> bool:
    return _cann_version_key(get_cann_version(module)) >= _cann_version_key(version)


def clear_npu_overflow_flag() -> None:
    """Nothing to clear: simhpu computes as the CPU does, and records no overflow flag."""
