"""Modules over op-plugin's operators, as torch_npu.contrib.module.npu_modules has them."""
import torch

from torch_npu.contrib.function.npu_functional import dropout_with_byte_mask


class DropoutWithByteMask(torch.nn.Module):
    """nn.Dropout whose keep mask is stored as bytes."""

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"DropoutWithByteMask: p must be in [0, 1], got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, input):
        return dropout_with_byte_mask(input, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"
