"""npu_rms_norm and npu_add_rms_norm as torch_npu's bindings take them.

simhpu's own operators of these names (its YAML) compute at x's dtype, keep rstd in it and take gamma in
it. Ascend's take the keyword epsilon, compute a half or bfloat16 x at float32, give rstd in float32 and y
rounded once to x's dtype, and take gamma in x's dtype or in float32 (docs/zh/custom_APIs in
Ascend/op-plugin). These run simhpu's operators on float32 copies where Ascend computes at float32, so the
values, dtypes and gradients are Ascend's; torch.ops.npu.npu_rms_norm stays simhpu's own.
"""
from __future__ import annotations

import torch

_REDUCED = (torch.float16, torch.bfloat16)


def _check_gamma(op: str, x: torch.Tensor, gamma: torch.Tensor) -> None:
    if gamma.dtype not in (x.dtype, torch.float32):
        raise RuntimeError(f"npu::{op}: gamma must have x's dtype ({x.dtype}) or float32, got {gamma.dtype}")


def npu_rms_norm(x: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6):
    """(y, rstd): y = x * rstd * gamma with rstd = 1 / sqrt(mean(x^2, -1) + epsilon), rstd in float32."""
    _check_gamma("npu_rms_norm", x, gamma)
    if x.dtype in _REDUCED:
        y, rstd = torch.ops.npu.npu_rms_norm(x.float(), gamma.float(), epsilon)
        return y.to(x.dtype), rstd
    return torch.ops.npu.npu_rms_norm(x, gamma, epsilon)


def npu_add_rms_norm(x1: torch.Tensor, x2: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6):
    """(y, rstd, x): x = x1 + x2 in their dtype, then npu_rms_norm of x."""
    _check_gamma("npu_add_rms_norm", x1, gamma)
    if x1.dtype in _REDUCED:
        total = x1 + x2
        y, rstd = npu_rms_norm(total, gamma, epsilon)
        return y, rstd, total
    return torch.ops.npu.npu_add_rms_norm(x1, x2, gamma, epsilon)
