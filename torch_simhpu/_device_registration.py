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
    _check_autograd_engine()


def _check_autograd_engine() -> None:
    """Fails the import clearly when a backward ran before the device was registered.

    The autograd engine sizes its per-device threads at the first backward of the
    process; a device registered later has no thread there, and every backward on it
    would fail with an internal assertion. An empty backward on the device finds out
    (it launches nothing).
    """
    leaf = torch.empty(0, device=DEVICE_TYPE, requires_grad=True)
    try:
        torch.autograd.backward(leaf, torch.empty(0, device=DEVICE_TYPE))
    except RuntimeError as error:
        if "device_ready_queues_" not in str(error):
            raise
        raise ImportError(
            "torch_simhpu was imported after a backward pass had run in this process, so PyTorch's "
            "autograd engine has no thread for the simhpu device. torch_simhpu loads itself with "
            "`import torch` (its torch.backends entry point); if TORCH_DEVICE_BACKEND_AUTOLOAD=0 is set, "
            "import torch_simhpu before the first backward."
        ) from None
