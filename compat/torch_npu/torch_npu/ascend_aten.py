"""ATen operators whose Ascend kernels take what the CPU's refuse, registered for the npu device.

op-plugin registers its own kernel for some ATen operators, and where that kernel takes more than the CPU's
(another index dtype), code written for Ascend relies on it. Each one here follows the adapter's documented
behaviour (Ascend/op-plugin's op_plugin/ops), and gives what the CPU gives wherever the CPU accepts the call.
"""
from __future__ import annotations

import torch

_LIBRARY = torch.library.Library("aten", "IMPL")


def one_hot(self: torch.Tensor, num_classes: int = -1) -> torch.Tensor:
    """one_hot of any integer index dtype, in that dtype (the CPU's takes int64 only); num_classes -1 reads the
    largest class from the device, as the part does."""
    if self.dtype == torch.bool or self.dtype.is_floating_point or self.dtype.is_complex:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if num_classes < -1:
        raise RuntimeError(f"one_hot: num_classes must be -1 or non-negative, got {num_classes}")
    if num_classes == -1:
        if self.numel() == 0:
            raise RuntimeError("one_hot: can not infer total number of classes from empty tensor.")
        num_classes = max(int(self.max().item()) + 1, 1)
    classes = torch.arange(num_classes, device=self.device, dtype=self.dtype)
    return (self.unsqueeze(-1) == classes).to(self.dtype)


def register() -> None:
    _LIBRARY.impl("one_hot", one_hot, "PrivateUse1")
