"""Tensors and skips as torch_npu's tests make them."""
from __future__ import annotations

import contextlib
import functools
import os
import unittest
from itertools import product

import numpy as np
import torch

import torch_npu
from torch_npu.npu import utils as _npu_utils


def get_npu_device() -> str:
    """"npu:N" with N from SET_NPU_DEVICE, else "npu:0"."""
    index = os.environ.get("SET_NPU_DEVICE")
    return "npu:0" if index is None else f"npu:{index}"


def set_npu_device() -> str:
    device = get_npu_device()
    torch.npu.set_device(device)
    return device


def is_iterable(value) -> bool:
    try:
        iter(value)
    except TypeError:
        return False
    return True


def iter_indices(tensor: torch.Tensor):
    if tensor.dim() == 0:
        return range(0)
    if tensor.dim() == 1:
        return range(tensor.size(0))
    return product(*(range(size) for size in tensor.size()))


@contextlib.contextmanager
def freeze_rng_state():
    state = torch.get_rng_state()
    try:
        yield
    finally:
        torch.set_rng_state(state)


def create_common_tensor(item, min_value, max_value, device=None):
    """A CPU tensor and its copy on the device from [numpy dtype, format id, shape]: values uniform in
    [min_value, max_value), the device copy cast to the format unless it is -1."""
    dtype, format_, shape = item[0], item[1], item[2]
    values = np.random.uniform(min_value, max_value, shape).astype(dtype)
    cpu_input = torch.from_numpy(values)
    npu_input = torch.from_numpy(values).to(device or get_npu_device())
    if format_ != -1:
        npu_input = torch_npu.npu_format_cast(npu_input, format_)
    return cpu_input, npu_input


def create_dtype_tensor(shape, dtype, npu_format=-1, min_value=-5, max_value=5, no_zero=False, device=None):
    """As create_common_tensor from a torch dtype; bools are random, no_zero replaces zeros by ones."""
    if dtype == torch.bool:
        values = np.random.randint(0, 2, size=shape).astype(np.bool_)
    else:
        values = np.random.uniform(min_value, max_value, shape)
        if no_zero:
            values[values == 0] = 1
        values = torch.from_numpy(values).to(dtype).numpy() if dtype != torch.bfloat16 else values
    cpu_input = torch.from_numpy(np.asarray(values)).to(dtype)
    npu_input = cpu_input.to(device or get_npu_device())
    if npu_format != -1:
        npu_input = torch_npu.npu_format_cast(npu_input, npu_format)
    return cpu_input, npu_input


def test_2args_broadcast(fn, device=None):
    """fn over broadcasting pairs, on the CPU and the device: yields (cpu result, device result as numpy)."""
    device = device or get_npu_device()
    for x_shape, y_shape in (((2, 3, 4, 5), (1, 1, 1)), ((2, 3, 4, 5), (5,)), ((2, 3, 4, 5), (3, 1, 5)),
                             ((1, 1, 5), (2, 3, 4, 5))):
        x = torch.from_numpy(np.random.rand(*x_shape).astype(np.float32))
        y = torch.from_numpy(np.random.rand(*y_shape).astype(np.float32))
        yield fn(x, y).numpy(), fn(x.to(device), y.to(device)).cpu().numpy()


def check_operators_in_prof(expected, prof, unexpected=()) -> bool:
    """Whether every name of `expected` is among the profile's events and none of `unexpected` is.
    The events are the device's: its kernels carry simhpu's names (an ATen operator's, a
    reference's), not CANN's (ViewCopy, TransData), so a test that asks for one of CANN's fails."""
    names = {event.name for event in prof.function_events}
    return all(name in names for name in expected) and not any(name in names for name in unexpected)


def SupportedDevices(devices):  # noqa: N802 - torch_npu's name
    """Runs the test only where the part's name begins with one of `devices` (e.g. "Ascend910B")."""
    def decorator(test):
        @functools.wraps(test)
        def run(*args, **kwargs):
            name = _npu_utils.get_device_name()
            if not any(name.startswith(device) for device in devices):
                raise unittest.SkipTest(f"for {', '.join(devices)}; this part is {name}")
            return test(*args, **kwargs)
        return run
    return decorator


def SkipIfNotGteCANNVersion(version: str):  # noqa: N802 - torch_npu's name
    """Runs the test only where the CANN version is at least `version`."""
    def decorator(test):
        @functools.wraps(test)
        def run(*args, **kwargs):
            if not _npu_utils._is_gte_cann_version(version):
                raise unittest.SkipTest(f"needs CANN >= {version}; this is {_npu_utils.get_cann_version()}")
            return test(*args, **kwargs)
        return run
    return decorator
