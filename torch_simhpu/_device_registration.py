"""Makes PyTorch know the device as "simhpu" (done once, at import)."""
import atexit

import torch

from torch_simhpu import _C, device

DEVICE_TYPE = "simhpu"


def register() -> None:
    torch.utils.rename_privateuse1_backend(DEVICE_TYPE)
    torch._register_device_module(DEVICE_TYPE, device)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True)
    # Kernels still queued at exit must finish before the interpreter tears down.
    atexit.register(_C._synchronize_all)
