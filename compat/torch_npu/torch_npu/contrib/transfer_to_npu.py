"""Importing this makes code written for CUDA run on the npu device, as Ascend's module of the name does:
`torch.cuda.*` answers for the npu device, a device named "cuda" (a string, a torch.device, `.cuda()`) is
the npu device in tensor factories, `Tensor.to` and `Module.to`, and `torch.cuda.amp` is torch.npu's.

It changes torch for the whole process, so import it once, at the start of a program. What it does not
reach keeps its CUDA meaning: a torch.device("cuda") handed to an operator this module does not wrap, or
CUDA-only libraries (cuDNN's settings, triton's CUDA kernels).
"""
from __future__ import annotations

import functools

import torch

# torch.cuda's names that torch.npu answers (simhpu's device module and torch_npu's additions).
_CUDA_NAMES = (
    "is_available", "device_count", "current_device", "set_device", "synchronize", "device", "Stream", "Event",
    "current_stream", "default_stream", "stream", "set_stream", "manual_seed", "manual_seed_all", "seed",
    "seed_all", "initial_seed", "get_rng_state", "set_rng_state", "get_device_name", "get_device_properties",
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved", "empty_cache",
    "reset_peak_memory_stats", "mem_get_info", "memory_stats", "amp",
)

# Tensor factories that take device=.
_FACTORIES = (
    "tensor", "as_tensor", "zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm", "arange",
    "linspace", "logspace", "eye", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like",
    "randint_like", "empty_strided", "normal", "tril_indices", "triu_indices",
)


def _on_npu(device):
    """The device a CUDA program names, as the npu device: "cuda", "cuda:1", torch.device("cuda", 1)."""
    if isinstance(device, str) and device.split(":")[0] == "cuda":
        return "npu" + device[4:]
    if isinstance(device, torch.device) and device.type == "cuda":
        return torch.device("npu", device.index)
    return device


def _with_npu_devices(function, positional=False):
    """function with its device= (and, for .to, a leading positional device) read as the npu device."""
    @functools.wraps(function)
    def call(*args, **kwargs):
        if "device" in kwargs:
            kwargs["device"] = _on_npu(kwargs["device"])
        if positional and len(args) > 1:
            args = (args[0], _on_npu(args[1]), *args[2:])
        return function(*args, **kwargs)

    return call


def _cuda(self, device=None, non_blocking=False, **kwargs):
    """Tensor.cuda and Module.cuda: onto the npu device (an index picks which)."""
    target = "npu" if device is None else _on_npu(device if not isinstance(device, int) else f"npu:{device}")
    if isinstance(self, torch.nn.Module):
        return self.to(target)
    return self.to(target, non_blocking=non_blocking, **kwargs)


def _transfer() -> None:
    for name in _CUDA_NAMES:
        try:
            setattr(torch.cuda, name, getattr(torch.npu, name))
        except AttributeError:
            continue  # (a name this device module does not have keeps torch.cuda's)
    for name in _FACTORIES:
        setattr(torch, name, _with_npu_devices(getattr(torch, name)))
    torch.Tensor.to = _with_npu_devices(torch.Tensor.to, positional=True)
    torch.Tensor.cuda = _cuda
    torch.nn.Module.to = _with_npu_devices(torch.nn.Module.to, positional=True)
    torch.nn.Module.cuda = _cuda


if getattr(torch, "npu", None) is None:
    raise ImportError("torch_npu.contrib.transfer_to_npu: torch_npu is inactive in this process (its device has "
                      "another name), so there is no npu device to move CUDA code to")
_transfer()
