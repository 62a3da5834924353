"""torch.npu (and torch_npu.npu) in a torch_npu process: simhpu's device module with torch_npu's additions.

Everything torch.simhpu has (streams, events, memory, RNG, graphs, synchronize, amp's dtypes) is
here under the same names; what torch_npu adds is here too: the Ascend part's name and SoC
version (SIMHPU_NPU_SOC, Ascend910B3 unless set), the CANN version (SIMHPU_NPU_CANN_VERSION), and
the settings programs write (config.allow_internal_format, set_compile_mode, set_option,
matmul/conv allow_hf32), which simhpu records and reads back: its kernels compute as the CPU
does whatever they say.
"""
from __future__ import annotations

import dataclasses
import os
import types

import torch
from torch_simhpu import device as _device

from torch_npu.npu import amp, utils  # noqa: F401
from torch_npu.npu.utils import get_cann_version, get_device_name, get_soc_version  # noqa: F401

NPUGraph = _device.Graph
graph = _device.graph
config = types.SimpleNamespace(allow_internal_format=False)
matmul = types.SimpleNamespace(allow_hf32=False)
conv = types.SimpleNamespace(allow_hf32=True)
_compile_mode = {"jit_compile": False}
_options: dict[str, str] = {}
_compatible_impl = False


def get_device_properties(device=None):
    """simhpu's properties of the device, named as the Ascend part it stands for."""
    return dataclasses.replace(_device.get_device_properties(device), name=get_device_name(device))


def set_compile_mode(jit_compile: bool = False) -> None:
    """Recorded (is_jit_compile_false reads it); simhpu compiles no operator at run time either way."""
    if not isinstance(jit_compile, bool):
        raise TypeError(f"torch.npu.set_compile_mode: jit_compile must be a bool, got {jit_compile!r}")
    _compile_mode["jit_compile"] = jit_compile


def is_jit_compile_false() -> bool:
    return not _compile_mode["jit_compile"]


def set_option(option: dict) -> None:
    """Recorded: ACL's options, each a string value."""
    if not isinstance(option, dict):
        raise TypeError(f"torch.npu.set_option: expected a dict of options, got {type(option).__name__}")
    _options.update({str(key): str(value) for key, value in option.items()})


def use_compatible_impl(enabled: bool) -> None:
    """Recorded: simhpu has one implementation of each operator."""
    global _compatible_impl
    _compatible_impl = bool(enabled)


def __getattr__(name: str):
    """The rest of torch.npu is simhpu's device module."""
    try:
        return getattr(_device, name)
    except AttributeError:
        raise AttributeError(f"module 'torch.npu' has no attribute {name!r}: neither simhpu's device module nor "
                             "what torch_npu adds to it here has it") from None
