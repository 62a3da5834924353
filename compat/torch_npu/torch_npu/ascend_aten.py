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


def _renorm_factor(x: torch.Tensor, p, dim: int, maxnorm) -> torch.Tensor:
    """renorm's per-slice factor: maxnorm / (norm + 1e-7) where a slice's p-norm is over maxnorm, 1
    elsewhere, the norm at float32 for a reduced dtype and the factor in x's dtype, as ATen computes it.
    Ascend's kernel also takes p = 0, the norm then being the slice's count of nonzero elements."""
    p, maxnorm = float(p), float(maxnorm)
    if p < 0:
        raise RuntimeError("renorm: non-positive-norm not supported")
    if maxnorm < 0:
        raise RuntimeError(f"renorm: expected maxnorm to be >= 0 but got {maxnorm}")
    if x.dim() <= 1:
        raise RuntimeError(f"renorm: input needs at least 2 dimensions, got {x.dim()} dimensions")
    if not -x.dim() <= dim < x.dim():
        raise IndexError(f"Dimension out of range (expected to be in range of [{-x.dim()}, {x.dim() - 1}], "
                         f"but got {dim})")
    reduce = [d for d in range(x.dim()) if d != dim % x.dim()]
    acc = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    if p == 0:
        norm = (x != 0).sum(reduce, keepdim=True, dtype=acc)
    else:
        norm = torch.linalg.vector_norm(x, p, reduce, keepdim=True, dtype=acc)
    return torch.where(norm > maxnorm, maxnorm / (norm + 1e-7), torch.ones_like(norm)).to(x.dtype)


def renorm(self: torch.Tensor, p, dim: int, maxnorm) -> torch.Tensor:
    return self * _renorm_factor(self, p, dim, maxnorm)


def renorm_(self: torch.Tensor, p, dim: int, maxnorm) -> torch.Tensor:
    return self.mul_(_renorm_factor(self, p, dim, maxnorm))


def renorm_out(self: torch.Tensor, p, dim: int, maxnorm, *, out: torch.Tensor) -> torch.Tensor:
    return torch.mul(self, _renorm_factor(self, p, dim, maxnorm), out=out)


def register() -> None:
    _LIBRARY.impl("one_hot", one_hot, "PrivateUse1")
    _LIBRARY.impl("renorm", renorm, "PrivateUse1")
    _LIBRARY.impl("renorm_", renorm_, "PrivateUse1")
    _LIBRARY.impl("renorm.out", renorm_out, "PrivateUse1")
