"""What references.yaml's expressions call as `ref.NAME(...)`: op-plugin's custom operators written as
composites of ATen operators, from the semantics Ascend documents for each (docs/zh/custom_APIs in
Ascend/op-plugin). Half-precision inputs are computed in float32 and rounded once, as the part's
vector units do. A call the part refuses is refused here, naming the operator and the argument."""
from __future__ import annotations

import torch
import torch.nn.functional as F

_INT8_MAX = 127.0


def _check(condition: bool, op: str, message: str) -> None:
    if not condition:
        raise RuntimeError(f"npu::{op}: {message}")


def _float(x: torch.Tensor) -> torch.Tensor:
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def swiglu(x: torch.Tensor, dim: int) -> torch.Tensor:
    """silu(A) * B for A, B the halves of x along dim."""
    _check(-x.dim() <= dim < x.dim(), "npu_swiglu", f"dim {dim} is out of range for a {x.dim()}-d input")
    _check(x.size(dim) % 2 == 0, "npu_swiglu", f"input's size {x.size(dim)} along dim {dim} must be even")
    a, b = _float(x).chunk(2, dim)
    return (F.silu(a) * b).to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, -1)
    return torch.cat((-x2, x1), -1)


def rotate_interleave(x: torch.Tensor) -> torch.Tensor:
    return torch.stack((-x[..., 1::2], x[..., ::2]), -1).flatten(-2)


def rotary_mul(x, r1, r2, rotary_mode: str, rotate=None) -> torch.Tensor:
    """x * cos + rotate(x) * sin (r1 = cos, r2 = sin), rotate by halves, interleaved, or by a matrix."""
    op = "npu_rotary_mul"
    _check(rotary_mode in ("half", "interleave"), op,
           f"The rotary_mode of npu_rotary_mul should be half or interleave, but got {rotary_mode}")
    _check(x.size(-1) % 2 == 0, op, f"the last dimension of self ({x.size(-1)}) must be even")
    for name, r in (("r1", r1), ("r2", r2)):
        _check(r.dim() == x.dim(), op, f"{name} must have self's {x.dim()} dimensions, got {r.dim()}")
        torch.broadcast_shapes(r.shape, x.shape)
    xf = _float(x)
    if rotate is not None:
        rotated = xf @ _float(rotate)
    else:
        rotated = rotate_half(xf) if rotary_mode == "half" else rotate_interleave(xf)
    return (xf * _float(r1) + rotated * _float(r2)).to(x.dtype)


def fast_gelu(x: torch.Tensor) -> torch.Tensor:
    """x * sigmoid(1.702 x), the documented x / (1 + exp(-1.702 |x|)) * exp(0.851 (x - |x|))."""
    return (_float(x) * torch.sigmoid(1.702 * _float(x))).to(x.dtype)


def gelu(x: torch.Tensor, approximate: str) -> torch.Tensor:
    _check(approximate in ("none", "tanh"), "npu_gelu", f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return F.gelu(_float(x), approximate=approximate).to(x.dtype)


def layer_norm_eval(x, normalized_shape, weight, bias, eps: float) -> torch.Tensor:
    shape = list(normalized_shape)
    _check(list(x.shape[x.dim() - len(shape):]) == shape, "npu_layer_norm_eval",
           f"normalized_shape {shape} must be input's last dimensions {list(x.shape)}")
    for name, t in (("weight", weight), ("bias", bias)):
        _check(t is None or list(t.shape) == shape, "npu_layer_norm_eval",
               f"{name} must have shape {shape}, got {list(t.shape) if t is not None else None}")
    out = F.layer_norm(_float(x), shape, None if weight is None else _float(weight),
                       None if bias is None else _float(bias), eps)
    return out.to(x.dtype)


def confusion_transpose(x, perm, shape, transpose_first: bool) -> torch.Tensor:
    """A transpose then a reshape (transpose_first), or a reshape then a transpose."""
    op = "npu_confusion_transpose"
    if transpose_first:
        _check(sorted(perm) == list(range(x.dim())), op, f"perm {list(perm)} is not a permutation of {x.dim()} dimensions")
        return x.permute(*perm).reshape(shape).contiguous()
    reshaped = x.reshape(shape)
    _check(sorted(perm) == list(range(reshaped.dim())), op,
           f"perm {list(perm)} is not a permutation of shape {list(shape)}'s {reshaped.dim()} dimensions")
    return reshaped.permute(*perm).contiguous()


def scaled_masked_softmax(x, mask, scale, fixed_triu_mask: bool) -> torch.Tensor:
    """softmax over the last dimension of x * scale, with -10000 where mask is true."""
    op = "npu_scaled_masked_softmax"
    _check(mask.dtype == torch.bool, op, f"mask must be bool, got {mask.dtype}")
    _check(not fixed_triu_mask, op, "fixed_triu_mask=True is reserved and not supported (as on the part)")
    torch.broadcast_shapes(mask.shape, x.shape)
    return torch.softmax((_float(x) * scale).masked_fill(mask, -10000.0), -1).to(x.dtype)


def moe_gating_top_k_softmax(x, finished, k: int):
    """softmax over experts, the k largest (ties to the lower index), their experts (num_experts for a
    finished row) and each row's place in the k-major order."""
    op = "npu_moe_gating_top_k_softmax"
    _check(x.dim() in (2, 3), op, f"x must be 2-d or 3-d, got {x.dim()}-d")
    _check(0 < k <= min(x.size(-1), 1024), op, f"k must be in 1..{min(x.size(-1), 1024)}, got {k}")
    probabilities = torch.softmax(_float(x), -1)
    order = torch.sort(probabilities, stable=True, dim=-1, descending=True).indices[..., :k]
    y = probabilities.gather(-1, order).to(x.dtype)
    expert_idx = order.to(torch.int32)
    if finished is not None:
        _check(finished.dtype == torch.bool and list(finished.shape) == list(x.shape[:-1]), op,
               f"finished must be bool of shape {list(x.shape[:-1])}")
        expert_idx = torch.where(finished.unsqueeze(-1), x.size(-1), expert_idx).to(torch.int32)
    rows = expert_idx.numel() // k
    row_idx = torch.arange(rows * k, device=x.device, dtype=torch.int32).reshape(k, rows).t().reshape(expert_idx.shape)
    return y, expert_idx, row_idx


_INT4 = 16  # torch.quint4x2's ScalarType: int4 results, eight packed in each int32


def dynamic_quant(x, smooth_scales, group_index, dst_type, quant_mode: str, dst_type_max: float):
    """Symmetric dynamic quantisation per token (row) or per channel (column):
    scale = max(|x * smooth|) / DTYPE_MAX, y = round(x * smooth / scale), int8 or int4 (eight to an int32,
    the first in the low bits). With group_index (each group's end row), row r takes smooth_scales[g]
    of the group g it falls in."""
    op = "npu_dynamic_quant"
    _check(x.dim() > 1, op, f"x must have more than one dimension, got {x.dim()}")
    _check(quant_mode in ("pertoken", "perchannel"), op, f"quant_mode must be 'pertoken' or 'perchannel', got {quant_mode!r}")
    _check(dst_type in (None, 1, _INT4), op, f"dst_type {dst_type} is not simulated yet (int8 or torch.quint4x2)")
    int4 = dst_type == _INT4
    _check(not int4 or x.size(-1) % 8 == 0, op, f"int4 needs x's last dimension to be a multiple of 8, got {x.size(-1)}")
    xf = _float(x)
    if group_index is not None:
        _check(smooth_scales is not None and smooth_scales.dim() == 2, op, "group_index needs 2-d smooth_scales [groups, H]")
        _check(smooth_scales.size(0) == group_index.numel(), op,
               f"smooth_scales has {smooth_scales.size(0)} groups, group_index {group_index.numel()}")
        rows = xf.reshape(-1, x.size(-1))
        row_ids = torch.arange(rows.size(0), device=x.device, dtype=group_index.dtype)
        group = torch.searchsorted(group_index.contiguous(), row_ids, right=True).clamp(max=group_index.numel() - 1)
        xf = (rows * _float(smooth_scales)[group]).reshape(x.shape)
    elif smooth_scales is not None:
        _check(list(smooth_scales.shape) == [x.size(-1)], op,
               f"smooth_scales must have shape [{x.size(-1)}], got {list(smooth_scales.shape)}")
        xf = xf * _float(smooth_scales)
    dim = -1 if quant_mode == "pertoken" else -2
    scale = xf.abs().amax(dim, keepdim=True) / (7.0 if int4 else _INT8_MAX)
    y = torch.round(xf / scale)
    scale = scale.squeeze(dim)
    if not int4:
        return y.clamp(-128, 127).to(torch.int8), scale
    nibbles = y.clamp(-8, 7).to(torch.int16).bitwise_and(15).reshape(*x.shape[:-1], -1, 2)
    packed = (nibbles[..., 0] + nibbles[..., 1] * 16).to(torch.uint8).contiguous()
    return packed.view(torch.int32), scale
