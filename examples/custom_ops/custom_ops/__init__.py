"""custom_ops: add_custom on simhpu, forward and backward, eager and torch.compile.

    import torch, custom_ops
    z = custom_ops.add_custom(x, y)          # or torch.ops.custom_ops.add_custom(x, y)
"""
import torch
import torch_simhpu  # noqa: F401  (the device, and the library _C links)
from torch_simhpu.utils import import_built

_C = import_built(__name__)  # says so when run from this source folder


def add_custom(self: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """self + other, broadcast, on the simhpu device."""
    return torch.ops.custom_ops.add_custom(self, other)


__all__ = ["add_custom"]
