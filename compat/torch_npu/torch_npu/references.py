"""What references.yaml's expressions call as `ref.NAME(...)`: op-plugin's custom operators written as
composites of ATen operators, from the semantics Ascend documents for each (docs/zh/custom_APIs in
Ascend/op-plugin). Half-precision inputs are computed in float32 and rounded once, as the part's
vector units do. A call the part refuses is refused here, naming the operator and the argument."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from torch_simhpu._device_name import DEVICE_TYPE

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
    return _pack_int4(y.clamp(-8, 7)), scale


def _to_bnsd(x: torch.Tensor, layout: str, heads: int | None) -> torch.Tensor:
    """[B, N, S, D] from BSH (heads given), SBH, BSND or BNSD."""
    if layout in ("BSH", "SBH"):
        x = x.transpose(0, 1) if layout == "SBH" else x
        return x.reshape(x.size(0), x.size(1), heads, -1).transpose(1, 2)
    return x.transpose(1, 2) if layout == "BSND" else x


def _from_bnsd(x: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "BNSD":
        return x
    bsnd = x.transpose(1, 2)
    if layout == "BSND":
        return bsnd
    bsh = bsnd.reshape(bsnd.size(0), bsnd.size(1), -1)
    return bsh.transpose(0, 1) if layout == "SBH" else bsh


def _sparse_mask(sq: int, skv: int, mode: int, given, pre: int, nxt: int, device) -> torch.Tensor | None:
    """True where a query row may not see a key: the mask as given (modes 0, 1), causal from the top
    left (2) or the bottom right (3), a band around the bottom-right diagonal (4); modes 0 add the band
    pre_tockens / next_tockens set around the top-left diagonal."""
    rows = torch.arange(sq, device=device).unsqueeze(-1)
    cols = torch.arange(skv, device=device)
    if mode == 0:
        band = (cols - rows > nxt) | (rows - cols > pre)
        return band if given is None else given.to(torch.bool) | band
    if mode == 1:
        return given.to(torch.bool)
    shift = skv - sq  # rows aligned to the bottom right
    if mode == 2:
        return cols > rows
    if mode == 3:
        return cols > rows + shift
    return (cols - (rows + shift) > nxt) | ((rows + shift) - cols > pre)


def _attention_bnsd(q, k, v, scale, pse, mask, kept=None, keep_prob: float = 1.0):
    """Attention over [B, N, S, D] (half precision in float32) (keys and values of fewer heads shared by groups of query
    heads), with softmax's row max and sum; where `kept` is given ([B, N, Sq, Skv] bools), the probabilities it drops
    are zero and the rest scaled by 1 / keep_prob."""
    group = q.size(1) // k.size(1)
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = torch.matmul(_float(q), _float(k).transpose(-1, -2))
    if pse is not None:
        scores = scores + _float(pse)
    scores = scores * scale
    if mask is not None:
        scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
    row_max = scores.amax(-1, keepdim=True)
    exp = torch.exp(scores - row_max)
    row_sum = exp.sum(-1, keepdim=True)
    probs = exp / row_sum
    if kept is not None:
        probs = probs * kept * (1.0 / keep_prob if keep_prob > 0 else 0.0)
    out = torch.matmul(probs, _float(v))
    return out, row_max.squeeze(-1).float(), row_sum.squeeze(-1).float()


# Dropout masks as the part keeps them: one bit an element (1 where kept), eight to a byte little end first, the
# bytes padded to a multiple of 128 bits. The bits are a function of (seed, offset) alone, drawn as simhpu's
# generator draws any random numbers at that state, so a mask an operator drew from the default generator is the
# mask _npu_dropout_gen_mask makes from the seed and offset it reported.
_MASK_ALIGN_BITS = 128


def _mask_bytes(numel: int) -> int:
    return (numel + _MASK_ALIGN_BITS - 1) // _MASK_ALIGN_BITS * _MASK_ALIGN_BITS // 8


def _float32(value: float) -> float:
    """value as float32 holds it: the part computes a dropout probability in single precision."""
    return torch.tensor(value, dtype=torch.float32).item()


def _draw_kept(device, numel: int, drop_p: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """numel bools, each True with probability 1 - drop_p, from `generator` (the device's default one when None)."""
    if generator is None:
        generator = _default_generator(device)
    return torch.rand(numel, generator=generator, device=device) >= _float32(drop_p)


def _default_generator(device) -> torch.Generator:
    device = torch.device(device)
    module = torch.get_device_module(device.type)
    return module.default_generators[device.index if device.index is not None else module.current_device()]


def _as_int64(value: int) -> int:
    return value - 2 ** 64 if value >= 2 ** 63 else value


def _generator_state(device) -> tuple[int, int]:
    """The default generator's seed and offset now, as the part's operators report them."""
    generator = _default_generator(device)
    return _as_int64(generator.initial_seed()), generator.get_offset()


def _kept_at(device, numel: int, drop_p: float, seed: int, offset: int) -> torch.Tensor:
    """The bits a draw from a generator at (seed, offset) gives: offset a multiple of 4, as generators give
    it, or any other count of numbers to skip first."""
    skip = offset % 4
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    generator.set_offset(offset - skip)
    return _draw_kept(device, numel + skip, drop_p, generator)[skip:]


def _pack_bits(kept: torch.Tensor) -> torch.Tensor:
    numel = kept.numel()
    bits = F.pad(kept.reshape(-1).to(torch.uint8), (0, _mask_bytes(numel) * 8 - numel)).reshape(-1, 8)
    weights = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8, device=kept.device)
    return (bits * weights).sum(-1, dtype=torch.uint8)


def _unpack_bits(op: str, mask: torch.Tensor, numel: int) -> torch.Tensor:
    _check(mask.dtype == torch.uint8, op, f"the dropout mask must be uint8 (bits, eight to a byte), got {mask.dtype}")
    _check(mask.numel() * 8 >= numel, op,
           f"the dropout mask holds {mask.numel() * 8} bits, fewer than the {numel} elements it masks")
    shifts = torch.arange(8, dtype=torch.uint8, device=mask.device)
    return (mask.reshape(-1, 1).bitwise_right_shift(shifts).bitwise_and(1)).reshape(-1)[:numel].bool()


def _check_drop_p(op: str, p: float) -> None:
    _check(0.0 <= p <= 1.0, op, f"dropout probability has to be between 0 and 1, but got {p}")


def dropout_gen_mask(x: torch.Tensor, size, p: float, seed: int, offset: int) -> torch.Tensor:
    """The packed mask of a dropout of probability p over `size` elements, drawn at (seed, offset)."""
    _check_drop_p("_npu_dropout_gen_mask", p)
    _check(offset >= 0, "_npu_dropout_gen_mask", f"offset must be non-negative, got {offset}")
    return _pack_bits(_kept_at(x.device, math.prod(size), p, seed, offset))


def dropout_gen_mask_factory(size, p: float, dtype, device) -> torch.Tensor:
    """npu_dropout_gen_mask: the packed mask of a dropout over `size`, drawn from the default generator (dtype
    names the masked data's type, in which the part holds p: the mask itself is bytes)."""
    _check_drop_p("npu_dropout_gen_mask", p)
    return _pack_bits(_draw_kept(torch.device(device or DEVICE_TYPE), math.prod(size), p))


def dropout_do_mask(x: torch.Tensor, mask: torch.Tensor, p: float) -> torch.Tensor:
    """x where the packed mask keeps it, scaled by 1 / (1 - p); zero elsewhere."""
    _check_drop_p("npu_dropout_do_mask", p)
    kept = _unpack_bits("npu_dropout_do_mask", mask, x.numel()).reshape(x.shape)
    return (_float(x) * kept * (1.0 / (1.0 - p) if p < 1.0 else 0.0)).to(x.dtype)


def npu_dropout(x: torch.Tensor, p: float):
    """_npu_dropout: the output and its packed mask, drawn from the default generator."""
    _check_drop_p("_npu_dropout", p)
    mask = _pack_bits(_draw_kept(x.device, x.numel(), p))
    return dropout_do_mask(x, mask, p), mask


def fusion_attention(query, key, value, head_num: int, input_layout: str, pse, padding_mask, atten_mask, scale: float,
                     keep_prob: float, pre_tockens: int, next_tockens: int, actual_seq_qlen, actual_seq_kvlen,
                     sparse_mode: int, softmax_layout: str, sink, dropout_mask=None, seed: int = 0, offset: int = 0,
                     op: str = "npu_fusion_attention"):
    """softmax(mask(scale * (pse + q k^T))) v in each input layout, with dropout of the probabilities where
    keep_prob < 1; softmax's max and sum eight times over (Ascend keeps them so, for the backward), an empty
    softmax_out, and the dropout's seed, offset and element count."""
    _check(input_layout in ("BSH", "SBH", "BSND", "BNSD", "TND"), op,
           f"input_layout must be one of BSH, SBH, BSND, BNSD, TND, got {input_layout!r}")
    _check(0.0 <= keep_prob <= 1.0, op, f"keep_prob must be in [0, 1], got {keep_prob}")
    _check(padding_mask is None, op, "padding_mask is reserved and not supported (as on the part)")
    _check(sink is None, op, "sink is not simulated yet")
    _check(sparse_mode in (0, 1, 2, 3, 4), op, f"sparse_mode {sparse_mode} is not simulated yet (0 to 4)")
    _check(query.dtype == key.dtype == value.dtype, op, "query, key and value must have one dtype")
    def mask_of(sq: int, skv: int):
        if atten_mask is None:  # documented: without atten_mask, every position is computed
            return None
        given = None if sparse_mode in (2, 3, 4) else atten_mask  # 2 to 4 pass a compressed template
        return _sparse_mask(sq, skv, sparse_mode, given, pre_tockens, next_tockens, query.device)
    if input_layout != "TND":
        q = _to_bnsd(query, input_layout, head_num)
        _check(q.size(1) == head_num, op, f"query has {q.size(1)} heads, head_num says {head_num}")
        kv_heads = None if input_layout not in ("BSH", "SBH") else key.size(-1) // (query.size(-1) // head_num)
        k, v = _to_bnsd(key, input_layout, kv_heads), _to_bnsd(value, input_layout, kv_heads)
        _check(head_num % k.size(1) == 0, op, f"head_num {head_num} is not a multiple of key's {k.size(1)} heads")
        batch, sq, skv = q.size(0), q.size(2), k.size(2)
        numels = batch * head_num * sq * skv  # the [B, N, Sq, Skv] probabilities dropout masks
        kept, seed, offset = _attention_dropout(op, query.device, numels, keep_prob, dropout_mask, seed, offset)
        if kept is not None:
            kept = kept.reshape(batch, head_num, sq, skv)
        out, row_max, row_sum = _attention_bnsd(q, k, v, scale, pse, mask_of(sq, skv), kept, keep_prob)
        out = _from_bnsd(out.to(query.dtype), input_layout)
        stats = [s.unsqueeze(-1).expand(*s.shape, 8).contiguous() for s in (row_max, row_sum)]
        return out, stats[0], stats[1], query.new_empty(0), seed, offset, numels
    _check(actual_seq_qlen is not None and actual_seq_kvlen is not None, op,
           "input_layout TND needs actual_seq_qlen and actual_seq_kvlen (cumulative lengths)")
    _check(len(actual_seq_qlen) == len(actual_seq_kvlen), op, "actual_seq_qlen and actual_seq_kvlen differ in length")
    bounds = list(zip([0, *actual_seq_qlen], actual_seq_qlen, [0, *actual_seq_kvlen], actual_seq_kvlen))
    while bounds and bounds[-1][1] == 0 and bounds[-1][3] == 0:  # trailing batches that take no part
        bounds.pop()
    segments = [head_num * (q_end - q_start) * (kv_end - kv_start) for q_start, q_end, kv_start, kv_end in bounds]
    numels = sum(segments)  # each batch's [N, Sq, Skv] probabilities, one batch after another
    kept, seed, offset = _attention_dropout(op, query.device, numels, keep_prob, dropout_mask, seed, offset)
    kept_of = [None] * len(bounds) if kept is None else kept.split(segments)
    outs, maxes, sums = [], [], []
    for (q_start, q_end, kv_start, kv_end), kept_b in zip(bounds, kept_of):
        q_b = query[q_start:q_end].transpose(0, 1).unsqueeze(0)
        k_b, v_b = (t[kv_start:kv_end].transpose(0, 1).unsqueeze(0) for t in (key, value))
        if kept_b is not None:
            kept_b = kept_b.reshape(1, head_num, q_end - q_start, kv_end - kv_start)
        out, row_max, row_sum = _attention_bnsd(q_b, k_b, v_b, scale, None, mask_of(q_b.size(2), k_b.size(2)),
                                                kept_b, keep_prob)
        outs.append(out[0].transpose(0, 1))
        maxes.append(row_max[0].transpose(0, 1))
        sums.append(row_sum[0].transpose(0, 1))
    out = torch.cat(outs).to(query.dtype) if outs else query.new_zeros(query.shape)
    stats = [torch.cat(s).unsqueeze(-1).expand(-1, -1, 8).contiguous() for s in (maxes, sums)]
    if softmax_layout != "TND":
        stats = [s.transpose(0, 1).contiguous() for s in stats]
    return out, stats[0], stats[1], query.new_empty(0), seed, offset, numels


def _attention_dropout(op: str, device, numels: int, keep_prob: float, dropout_mask, seed: int, offset: int):
    """The kept probabilities (numels bools, or None without dropout) and the seed and offset to report: the
    dropout_mask given, or a mask drawn from the default generator at its seed and offset, as the part draws it
    (its probability 1 - keep_prob in single precision)."""
    if dropout_mask is not None:
        return _unpack_bits(op, dropout_mask, numels), seed, offset
    if keep_prob == 1.0:
        return None, seed, offset
    if keep_prob == 0.0:  # the part drops everything without drawing
        return torch.zeros(numels, dtype=torch.bool, device=device), seed, offset
    seed, offset = _generator_state(device)
    return _draw_kept(device, numels, _float32(1.0 - _float32(keep_prob))), seed, offset


def fusion_attention_v3(query, key, value, head_num: int, input_layout: str, pse, padding_mask, atten_mask,
                        scale: float, keep_prob: float, pre_tockens: int, next_tockens: int, actual_seq_qlen,
                        actual_seq_kvlen, sparse_mode: int, softmax_layout: str, sink):
    """npu_fusion_attention with the cumulative lengths as host tensors and the dropout's seed and offset
    returned as one-element int64 host tensors."""
    op = "npu_fusion_attention_v3"
    lengths = [_host_lengths(op, name, t) for name, t in (("actual_seq_qlen", actual_seq_qlen),
                                                          ("actual_seq_kvlen", actual_seq_kvlen))]
    out, row_max, row_sum, softmax_out, seed, offset, _ = fusion_attention(
        query, key, value, head_num, input_layout, pse, padding_mask, atten_mask, scale, keep_prob, pre_tockens,
        next_tockens, lengths[0], lengths[1], sparse_mode, softmax_layout, sink, op=op)
    return (out, row_max, row_sum, softmax_out, torch.tensor([seed], dtype=torch.int64),
            torch.tensor([offset], dtype=torch.int64))


def _host_lengths(op: str, name: str, lengths):
    if lengths is None or lengths.numel() == 0:
        return None
    _check(lengths.device.type == "cpu", op, f"{name} must be a tensor on the CPU, got one on {lengths.device}")
    _check(lengths.dim() == 1, op, f"{name} must be 1-dimensional, got {lengths.dim()}-d")
    _check(not lengths.is_floating_point() and not lengths.is_complex(), op,
           f"{name} must hold integers, got {lengths.dtype}")
    return lengths.tolist()


def _kv_length_mask(lengths, batch: int, sq: int, skv: int, device) -> torch.Tensor | None:
    """True at keys past each batch's valid length ([B, 1, 1, Skv]); None when all are valid."""
    if lengths is None:
        return None
    lengths = list(lengths)
    _check(len(lengths) in (1, batch), "attention", f"a length per batch ({batch}) or one for all, got {len(lengths)}")
    limit = torch.tensor(lengths * (batch if len(lengths) == 1 else 1), device=device).reshape(batch, 1, 1, 1)
    return torch.arange(skv, device=device).reshape(1, 1, 1, skv) >= limit


def _merge_masks(*masks):
    present = [m for m in masks if m is not None]
    if not present:
        return None
    merged = present[0]
    for mask in present[1:]:
        merged = merged | mask
    return merged


def _unquantised(op: str, **quantisers) -> None:
    given = [name for name, value in quantisers.items() if value is not None]
    _check(not given, op, f"{', '.join(given)}: the quantised form is not simulated yet")


def _grouped_bnsd(op: str, query, key, value, layout: str, num_heads: int, num_key_value_heads: int):
    """query, key and value as [B, N, S, D], the keys' and values' heads num_key_value_heads (or num_heads)."""
    _check(layout in ("BSH", "BNSD", "BSND"), op, f"input_layout must be BSH, BNSD or BSND, got {layout!r}")
    kv_heads = num_key_value_heads or num_heads
    _check(num_heads % kv_heads == 0, op, f"num_heads {num_heads} is not a multiple of num_key_value_heads {kv_heads}")
    return (_to_bnsd(query, layout, num_heads), _to_bnsd(key, layout, kv_heads), _to_bnsd(value, layout, kv_heads))


def prompt_flash_attention(query, key, value, pse_shift, padding_mask, atten_mask, actual_seq_lengths,
                           actual_seq_lengths_kv, num_heads: int, scale_value: float, pre_tokens: int,
                           next_tokens: int, input_layout: str, num_key_value_heads: int, sparse_mode: int,
                           deq_scale1, quant_scale1, deq_scale2, quant_scale2, quant_offset2):
    """Full attention of a prompt: softmax(scale q k^T + mask) v, keys of num_key_value_heads heads shared by
    groups of query heads, masks as atten_mask and sparse_mode say, keys past actual_seq_lengths_kv unseen,
    rows past actual_seq_lengths zero."""
    op = "npu_prompt_flash_attention"
    _unquantised(op, deq_scale1=deq_scale1, quant_scale1=quant_scale1, deq_scale2=deq_scale2,
                 quant_scale2=quant_scale2, quant_offset2=quant_offset2)
    _check(sparse_mode in (0, 1, 2, 3, 4), op, f"sparse_mode {sparse_mode} is not simulated yet (0 to 4)")
    q, k, v = _grouped_bnsd(op, query, key, value, input_layout, num_heads, num_key_value_heads)
    batch, _, sq, _ = q.shape
    skv = k.size(2)
    band = None
    if atten_mask is not None:
        given = None if sparse_mode in (2, 3, 4) else atten_mask.to(torch.bool).reshape(
            *([1] * (4 - atten_mask.dim())), *atten_mask.shape)
        band = _sparse_mask(sq, skv, sparse_mode, given, pre_tokens, next_tokens, query.device)
    mask = _merge_masks(band, _kv_length_mask(actual_seq_lengths_kv, batch, sq, skv, query.device))
    out, _, _ = _attention_bnsd(q, k, v, scale_value, pse_shift, mask)
    if actual_seq_lengths is not None:
        rows = _kv_length_mask(actual_seq_lengths, batch, 1, sq, query.device).reshape(batch, 1, sq, 1)
        out = out.masked_fill(rows, 0.0)
    return _from_bnsd(out.to(query.dtype), input_layout).contiguous()


def incre_flash_attention(query, key, value, pse_shift, atten_mask, actual_seq_lengths, num_heads: int,
                          scale_value: float, input_layout: str, num_key_value_heads: int, block_table,
                          antiquant_scale, antiquant_offset, dequant_scale1, quant_scale1, dequant_scale2,
                          quant_scale2, quant_offset2):
    """One decoding step's attention: each query row over its batch's first actual_seq_lengths keys."""
    op = "npu_incre_flash_attention"
    _unquantised(op, antiquant_scale=antiquant_scale, antiquant_offset=antiquant_offset,
                 dequant_scale1=dequant_scale1, quant_scale1=quant_scale1, dequant_scale2=dequant_scale2,
                 quant_scale2=quant_scale2, quant_offset2=quant_offset2)
    _check(block_table is None, op, "block_table (paged key-value caches) is not simulated yet")
    q, k, v = _grouped_bnsd(op, query, key, value, input_layout, num_heads, num_key_value_heads)
    batch, _, sq, _ = q.shape
    skv = k.size(2)
    given = None if atten_mask is None else atten_mask.to(torch.bool).reshape(batch, 1, -1, skv)[..., -sq:, :]
    mask = _merge_masks(given, _kv_length_mask(actual_seq_lengths, batch, sq, skv, query.device))
    out, _, _ = _attention_bnsd(q, k, v, scale_value, pse_shift, mask)
    return _from_bnsd(out.to(query.dtype), input_layout).contiguous()


def grouped_matmul(x, weight, bias, group_list, split_item: int, group_type, group_list_type: int, act_type: int,
                   scale, offset, antiquant_scale, antiquant_offset, per_token_scale, activation_input,
                   output_dtype=None) -> list:
    """y_i = x_i @ weight_i + bias_i per group: tensors in lists, or one x split along m (group_type 0) or
    k (2) by group_list (cumulative ends with group_list_type 0, sizes with 1), weights as a list or one
    [E, K, N] tensor; split_item 0/1 gives a tensor per group, 2/3 one tensor of them all. Quantised (int8 x
    and weights with scale): (x_i @ w_i + int32 bias_i) * scale_i [* per_token_scale], or a float bias added
    after, in output_dtype (int8 by default); weights quantised alone (antiquant_scale): x_i @ ((w_i +
    antiquant_offset_i) * antiquant_scale_i) + bias_i."""
    op = "npu_grouped_matmul"
    _unquantised(op, offset=offset, activation_input=activation_input)
    _check(act_type == 0, op, f"act_type {act_type}: a fused activation is not simulated yet")
    _check(split_item in (0, 1, 2, 3), op, f"split_item must be 0 to 3, got {split_item}")
    if group_type == 2:
        _unquantised(op, scale=scale, antiquant_scale=antiquant_scale, per_token_scale=per_token_scale)
        return _grouped_matmul_along_k(op, x, weight, bias, group_list, group_list_type or 0, split_item)
    weights = list(weight[0].unbind(0)) if len(weight) == 1 and weight[0].dim() == 3 else list(weight)
    per_group = {name: _per_group(op, name, values, len(weights)) for name, values in
                 (("bias", bias), ("scale", scale), ("antiquant_scale", antiquant_scale),
                  ("antiquant_offset", antiquant_offset))}
    _check(group_type is not None, op, "Requires manual passing group_type (-1: no groups, 0: along m, 2: along k)")
    _check(group_type in (-1, 0, 2), op, f"The group type must be -1, 0 or 2 (none, m-axis, k-axis), got {group_type}")
    group_list_type = group_list_type or 0
    if group_list is not None:
        _check(len(x) == 1, op, "with group_list, x must be one tensor split along its rows")
        sizes = _group_sizes(op, group_list, group_list_type)
        _check(len(sizes) == len(weights), op, f"group_list has {len(sizes)} groups, weight {len(weights)}")
        _check(all(size >= 0 for size in sizes) and sum(sizes) <= x[0].size(0), op,
               f"group_list {sizes} does not split x's {x[0].size(0)} rows")
        xs = list(x[0][:sum(sizes)].split(sizes))
        token_scales = (list(per_token_scale[0][:sum(sizes)].split(sizes)) if per_token_scale is not None
                        else [None] * len(xs))
    else:
        _check(len(x) == len(weights) or len(weights) == 1, op,
               f"{len(x)} inputs for {len(weights)} weights: one x split among several weights needs group_list")
        xs = list(x)
        token_scales = list(per_token_scale) if per_token_scale is not None else [None] * len(xs)
    _check(len(xs) == len(weights), op, f"{len(xs)} inputs for {len(weights)} weights")
    quantised = scale is not None
    _check(not quantised or all(x_i.dtype == torch.int8 for x_i in xs), op, "scale quantises int8 inputs only")
    _check(quantised or per_token_scale is None, op, "per_token_scale needs scale")
    dtype = _SCALAR_TYPES.get(output_dtype if output_dtype is not None else 1) if quantised else None
    _check(not quantised or dtype in _QUANT_MATMUL_OUTPUTS, op,
           f"output_dtype {output_dtype} is not one of int8, int32, float16, bfloat16")
    ys = []
    for index, (x_i, w_i, token_scale) in enumerate(zip(xs, weights, token_scales)):
        _check(x_i.size(-1) == w_i.size(0), op, f"group {index}: x's K {x_i.size(-1)} is not weight's {w_i.size(0)}")
        b_i = per_group["bias"][index]
        if quantised:
            scales, packed_offset = _dequant_scale(per_group["scale"][index])
            ys.append(_dequantised(torch.matmul(x_i.double(), w_i.double()), b_i, scales, token_scale, packed_offset,
                                   dtype))
            continue
        w_float = _float(w_i)
        if per_group["antiquant_scale"][index] is not None:
            shift = per_group["antiquant_offset"][index]
            w_float = (w_i.float() + (0.0 if shift is None else _float(shift))) * _float(per_group["antiquant_scale"][index])
        y = torch.matmul(_float(x_i), w_float)
        ys.append((y if b_i is None else y + _float(b_i)).to(x_i.dtype))
    return [torch.cat(ys)] if split_item in (2, 3) else ys


def _per_group(op: str, name: str, values, groups: int) -> list:
    """One tensor (or None) per group from a list of them, or from one tensor whose rows are the groups'."""
    if values is None:
        return [None] * groups
    values = list(values[0].unbind(0)) if len(values) == 1 and values[0].dim() == 2 and groups > 1 else list(values)
    _check(len(values) == groups, op, f"{len(values)} {name} tensors for {groups} weights")
    return values


def _group_sizes(op: str, group_list, group_list_type: int) -> list[int]:
    _check(group_list_type in (0, 1), op, f"group_list_type {group_list_type} is not simulated yet (0 or 1)")
    values = [int(v) for v in (group_list.tolist() if isinstance(group_list, torch.Tensor) else group_list)]
    return [e - s for s, e in zip([0] + values[:-1], values)] if group_list_type == 0 else values


def _grouped_matmul_along_k(op: str, x, weight, bias, group_list, group_list_type: int, split_item: int) -> list:
    """Groups along k: x [M, K] split by columns, weight [K, N] by rows; each group's [M, N] product,
    stacked into one [groups, M, N] tensor for split_item 2/3."""
    _check(group_list is not None and len(x) == 1, op, "k-axis groups (group_type 2) need one x and group_list")
    _check(bias is None, op, "k-axis groups take no bias")
    sizes = _group_sizes(op, group_list, group_list_type)
    _check(all(size >= 0 for size in sizes) and sum(sizes) <= x[0].size(-1), op,
           f"group_list {sizes} does not split x's {x[0].size(-1)} columns")
    xs = x[0][:, :sum(sizes)].split(sizes, dim=1)
    weights = weight[0][:sum(sizes)].split(sizes, dim=0) if len(weight) == 1 else list(weight)
    _check(len(weights) == len(sizes), op, f"group_list has {len(sizes)} groups, weight {len(weights)}")
    ys = [torch.matmul(_float(x_g), _float(w_g)).to(x[0].dtype).unsqueeze(0) for x_g, w_g in zip(xs, weights)]
    return [torch.cat(ys)] if split_item in (2, 3) else ys


def moe_init_routing(x, row_idx, expert_idx, active_num: int):
    """Rows expanded to one per (token, chosen expert), sorted by expert (stably); where each went; the
    sorted experts."""
    op = "npu_moe_init_routing"
    _check(x.dim() == 2 and expert_idx.dim() == 2 and row_idx.shape == expert_idx.shape, op,
           "x must be [rows, H], row_idx and expert_idx [rows, k] alike")
    rows, k = expert_idx.shape
    experts = expert_idx.reshape(-1)
    order = torch.sort(experts, stable=True).indices
    sorted_experts = experts[order].to(torch.int32)
    sources = row_idx.reshape(-1)[order].long()
    expanded_row_idx = torch.empty_like(sources).scatter_(0, sources, torch.arange(sources.numel(), device=x.device))
    active = min(active_num, rows) * k
    return x[sources[:active] % rows], expanded_row_idx.to(torch.int32), sorted_experts


def moe_finalize_routing(rows, skip1, skip2, bias, scales, src_to_dst, expert_for_source_row, drop_pad_mode, k):
    """out[i] = skip1[i] + skip2[i] + sum over k of scales[i, k] * (rows[src_to_dst[i + k * num_rows]] + bias[expert])."""
    op = "npu_moe_finalize_routing"
    _check(drop_pad_mode in (None, 0), op, f"drop_pad_mode {drop_pad_mode} is not simulated yet (0)")
    num_rows = src_to_dst.numel() // (scales.size(1) if scales is not None else (k or 1))
    top_k = src_to_dst.numel() // num_rows
    gathered = _float(rows)[src_to_dst.long().reshape(top_k, num_rows).t()]  # [num_rows, k, H]
    if bias is not None:
        _check(expert_for_source_row is not None, op, "bias needs expert_for_source_row")
        gathered = gathered + _float(bias)[expert_for_source_row.long()]
    weights = _float(scales) if scales is not None else torch.ones(num_rows, top_k, device=rows.device)
    out = (gathered * weights.unsqueeze(-1)).sum(1)
    for skip in (skip1, skip2):
        if skip is not None:
            out = out + _float(skip)
    return out.to(rows.dtype)


def apply_rotary_pos_emb(query, key, cos, sin, layout: str, rotary_mode: str):
    """Rotary embedding of query and key at once, each x * cos + rotate(x) * sin (cos and sin broadcast
    over heads). The part updates query and key in place and returns them; so does this, where neither
    needs a gradient (an in-place update of a tensor autograd records would break its backward)."""
    op = "npu_apply_rotary_pos_emb"
    _check(layout in ("BSND", "SBND", "BNSD", "TND"), op, f"layout must be BSND, SBND, BNSD or TND, got {layout!r}")
    _check(rotary_mode in ("half", "interleave"), op, f"rotary_mode {rotary_mode!r} is not simulated yet (half, interleave)")
    expected_dims = 3 if layout == "TND" else 4
    for name, t in (("query", query), ("key", key), ("cos", cos), ("sin", sin)):
        _check(t.dim() == expected_dims, op, f"{name} must be {expected_dims}-d in layout {layout}, got {t.dim()}-d")
    rotate = rotate_half if rotary_mode == "half" else rotate_interleave
    c, s = _float(cos), _float(sin)
    rotated = [(_float(x) * c + rotate(_float(x)) * s).to(x.dtype) for x in (query, key)]
    if not (torch.is_grad_enabled() and (query.requires_grad or key.requires_grad)):
        with torch.no_grad():
            query.copy_(rotated[0])
            key.copy_(rotated[1])
    return rotated[0], rotated[1]


# torch's ScalarType numbers, as an `int dtype` argument carries them.
_SCALAR_TYPES = {0: torch.uint8, 1: torch.int8, 2: torch.int16, 3: torch.int32, 4: torch.int64, 5: torch.float16,
                 6: torch.float32, 7: torch.float64, 11: torch.bool, 15: torch.bfloat16}
_QUANT_MATMUL_OUTPUTS = (torch.int8, torch.int32, torch.float16, torch.bfloat16)
_QINT8, _QUINT8, _QINT32 = 12, 13, 14  # torch.qint8, torch.quint8, torch.qint32 as ScalarType numbers


def _pack_int4(values: torch.Tensor) -> torch.Tensor:
    """Integers in [-8, 7] along the last dimension (a multiple of 8) as int32s of eight nibbles, the first
    in the low bits: the layout of torch_npu's int4 tensors."""
    nibbles = values.to(torch.int16).bitwise_and(15).reshape(*values.shape[:-1], -1, 2)
    return (nibbles[..., 0] + nibbles[..., 1] * 16).to(torch.uint8).contiguous().view(torch.int32)


def _unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """The int8 values of int32s holding eight signed nibbles each, the first in the low bits."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int32, device=packed.device)
    nibbles = packed.contiguous().unsqueeze(-1).bitwise_right_shift(shifts).bitwise_and(15)
    return torch.where(nibbles > 7, nibbles - 16, nibbles).to(torch.int8).flatten(-2)


def trans_quant_param(scale: torch.Tensor, offset, round_mode) -> torch.Tensor:
    """float32 scales (and offsets) packed into int64s as the part's matmuls read them: the scale cut to FP19
    (its top 19 bits; rounded first when round_mode is 1) in bits 0-31, bit 46 set, the offset rounded and
    clamped to [-256, 255] in bits 37-45."""
    op = "npu_trans_quant_param"
    round_mode = 0 if round_mode is None else round_mode
    _check(round_mode in (0, 1), op, f"round_mode must be 0 (truncate) or 1 (round), got {round_mode}")
    for name, t in (("scale", scale), ("offset", offset)):
        if t is None:
            continue
        _check(t.dtype == torch.float32, op, f"{name} must be float32, got {t.dtype}")
        _check(t.dim() in (1, 2) and t.numel() > 0, op, f"{name} must be a non-empty 1-d or 2-d tensor, got "
                                                         f"shape {list(t.shape)}")
    bits = scale.contiguous().view(torch.int32).to(torch.int64).bitwise_and(0xFFFFFFFF)
    if round_mode == 1:  # to the nearest FP19, ties away from zero in magnitude
        bits = (bits + 0x1000).clamp(max=0xFFFFFFFF)
    packed = bits.bitwise_and(0xFFFFE000).bitwise_or(1 << 46)
    if offset is None:
        return packed
    if scale.dim() == 1:
        _check(offset.dim() == 1 and (offset.numel() == scale.numel() or 1 in (offset.numel(), scale.numel())), op,
               f"offset's shape {list(offset.shape)} does not broadcast with scale's {list(scale.shape)}")
        packed, offset = torch.broadcast_tensors(packed, offset.reshape(-1))
    else:
        offset = offset.reshape(-1).expand(packed.size(-1)) if offset.numel() in (1, packed.size(-1)) else offset
        _check(offset.numel() == packed.size(-1) or offset.shape == packed.shape, op,
               f"offset's shape {list(offset.shape)} does not fit scale's {list(scale.shape)}")
    nine_bits = torch.round(offset).clamp(-256, 255).to(torch.int64).bitwise_and(0x1FF)
    return packed.bitwise_and(0x4000FFFFFFFF).bitwise_or(nine_bits.bitwise_left_shift(37))


def _dequant_scale(scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A quantised matmul's scale as float64 values, and the offset an int64 scale carries (None if none)."""
    if scale.dtype != torch.int64:
        return scale.double(), None
    low = scale.bitwise_and(0xFFFFFFFF)
    low = torch.where(low >= 2 ** 31, low - 2 ** 32, low).to(torch.int32)
    offset = scale.bitwise_right_shift(37).bitwise_and(0x1FF)
    offset = torch.where(offset >= 256, offset - 512, offset)
    return low.view(torch.float32).double(), offset.double()


def _int4_matrix(op: str, name: str, packed: torch.Tensor, may_be_transposed: bool) -> torch.Tensor:
    """An int4 matrix from its int32 form: (rows, cols / 8) contiguous, or for x2 also the transpose of a
    contiguous (n, k / 8), which holds its nibbles along k."""
    if may_be_transposed and not packed.is_contiguous() and packed.transpose(-1, -2).is_contiguous():
        return _unpack_int4(packed.transpose(-1, -2)).transpose(-1, -2)
    _check(packed.is_contiguous(), op, f"{name} of int4s (int32) must be contiguous"
                                       + (" or the transpose of a contiguous (n, k / 8)" if may_be_transposed else ""))
    return _unpack_int4(packed)


def quant_matmul(x1, x2, scale, offset, pertoken_scale, bias, output_dtype, group_sizes, y_scale):
    """A quantised matrix product, accumulated exactly: (x1 @ x2 [+ int32 bias]) * scale [* pertoken_scale]
    [+ offset | + float bias], rounded to int8 unless output_dtype says otherwise. int32 operands hold eight
    int4s each; a scale of npu_trans_quant_param's int64 form carries its FP19 value and offset."""
    op = "npu_quant_matmul"
    _check(x1.dtype in (torch.int8, torch.int32) and x2.dtype in (torch.int8, torch.int32), op,
           f"x1 and x2 must be int8, or int32 holding int4s, got {x1.dtype} and {x2.dtype}")
    _check(y_scale is None, op, "y_scale is not simulated yet")
    dtype = _SCALAR_TYPES.get(output_dtype if output_dtype is not None else 1)
    _check(dtype in _QUANT_MATMUL_OUTPUTS, op, f"output_dtype {output_dtype} is not one of int8, int32, float16, bfloat16")
    _check(scale.dtype in (torch.float32, torch.bfloat16, torch.int64), op,
           f"scale must be float32, bfloat16 or npu_trans_quant_param's int64, got {scale.dtype}")
    groups = list(group_sizes) if group_sizes is not None else [0, 0, 0]
    _check(len(groups) == 3 and all(g >= 0 for g in groups), op,
           f"group_sizes must be [group_m, group_n, group_k] of non-negative sizes, got {group_sizes}")
    scales, packed_offset = _dequant_scale(scale)
    if x1.dtype == torch.int8 and x2.dtype == torch.int32:
        return _a8w4_matmul(op, x1, _int4_matrix(op, "x2", x2, True), scales, offset, pertoken_scale, bias, dtype,
                            groups)
    _check(x1.dtype == x2.dtype, op, f"x1 and x2 must have one dtype (int8 with int4 weights aside), got {x1.dtype} "
                                     f"and {x2.dtype}")
    _check(groups == [0, 0, 0], op, f"group_sizes {group_sizes} are simulated for int8 activations with int4 weights only")
    a = _int4_matrix(op, "x1", x1, False) if x1.dtype == torch.int32 else x1
    b = _int4_matrix(op, "x2", x2, True) if x2.dtype == torch.int32 else x2
    _check(a.size(-1) == b.size(-2), op, f"x1's K {a.size(-1)} is not x2's {b.size(-2)}")
    return _dequantised(torch.matmul(a.double(), b.double()), bias, scales, pertoken_scale,
                        offset.double() if offset is not None else packed_offset, dtype)


def _dequantised(product, bias, scales, token_scale, offset, dtype: torch.dtype) -> torch.Tensor:
    """An exact integer product in output_dtype: (product [+ int32 bias]) * scales [* token_scale] [+ offset]
    [+ float bias], rounded and saturated to an integer dtype."""
    if bias is not None and bias.dtype == torch.int32:
        product = product + bias.double()
    out = product * scales
    if token_scale is not None:
        out = out * token_scale.double().unsqueeze(-1)
    if offset is not None:
        out = out + offset
    if bias is not None and bias.dtype != torch.int32:
        out = out + bias.double()
    if dtype in (torch.int8, torch.int32):
        limit = torch.iinfo(dtype)
        return torch.round(out).clamp(limit.min, limit.max).to(dtype)
    return out.to(dtype)


def _a8w4_matmul(op: str, x1, weight, scales, offset, pertoken_scale, bias, dtype, groups) -> torch.Tensor:
    """int8 activations with int4 weights quantised per group of group_k rows. The part splits each int8 x
    into a high nibble (x >> 4) and a low one stored as the int4 (x & 15) - 8, so what it multiplies is x - 8
    (op-plugin's test_npu_quant_matmul golden; the caller folds 8 * the weights' scaled column sums into
    offset): y = (sum over groups g of ((x - 8)_g @ w_g) * scale_g + offset) * pertoken_scale."""
    _check(bias is None, op, "int4 weights with int8 activations take offset, not bias")
    _check(dtype in (torch.float16, torch.bfloat16), op, f"int4 weights with int8 activations give float16 or "
                                                         f"bfloat16, got output_dtype {dtype}")
    _check(pertoken_scale is not None and offset is not None, op,
           "int4 weights with int8 activations need pertoken_scale and offset")
    k, n = weight.shape
    _check(x1.size(-1) == k, op, f"x1's K {x1.size(-1)} is not x2's {k}")
    group_k = groups[2] or k
    _check(k % group_k == 0, op, f"group_k {group_k} does not divide K {k}")
    _check(scales.shape in ((k // group_k, n), (n,), (1,)), op,
           f"scale must be ({k // group_k}, {n}) for {k // group_k} groups of {group_k} rows, got {list(scales.shape)}")
    shifted = (x1.double() - 8.0).reshape(*x1.shape[:-1], k // group_k, group_k).transpose(-2, -3)
    per_group = torch.matmul(shifted, weight.double().reshape(k // group_k, group_k, n))
    out = (per_group * scales.reshape(-1, 1, n) if scales.dim() == 2 else per_group * scales).sum(-3)
    return ((out + offset.double()) * pertoken_scale.double().reshape(-1, 1)).to(dtype)


def quantize(x: torch.Tensor, scales: torch.Tensor, zero_points, dtype: int, axis: int, div_mode: bool):
    """x / scales + zero_points (x * scales + zero_points without div_mode), rounded, in the integer type dtype
    names: int8 for torch.qint8, uint8 for quint8, int32 for qint32 and int32, and for torch.quint4x2 int4s packed
    eight to an int32. scales and zero_points run along `axis` and broadcast over the rest."""
    op = "npu_quantize"
    targets = {_QINT8: torch.int8, _QUINT8: torch.uint8, _QINT32: torch.int32, 3: torch.int32, _INT4: None}
    allowed = (_QINT8, _QUINT8, _QINT32, 3) if div_mode else (_QINT8, _INT4)
    _check(dtype in allowed, op, f"dtype {dtype} is not one of the ScalarTypes {allowed} "
                                 f"(div_mode={div_mode})")
    _check(x.is_floating_point(), op, f"input must be float32, float16 or bfloat16, got {x.dtype}")
    if not div_mode and axis > -2:
        axis = -1  # without div_mode, any axis above -2 names the last one
    axis = axis if axis >= 0 else axis + x.dim()
    _check(0 <= axis < max(x.dim(), 1), op, f"axis {axis} is out of range for a {x.dim()}-d input")

    def along_axis(name, t):
        if t is None:
            return None
        if t.dim() == 1 and x.dim() > 1:
            _check(t.numel() in (1, x.size(axis)), op,
                   f"{name} has {t.numel()} values; input's dimension {axis} has {x.size(axis)}")
            return t.reshape([-1 if d == axis else 1 for d in range(x.dim())])
        return t

    s = _float(along_axis("scales", scales)).double()
    y = x.double() / s if div_mode else x.double() * s
    if zero_points is not None:
        y = y + along_axis("zero_points", zero_points).double()
    y = torch.round(y)
    target = targets[dtype]
    if target is None:
        _check(x.size(-1) % 8 == 0, op, f"quint4x2 needs input's last dimension to be a multiple of 8, got {x.size(-1)}")
        return _pack_int4(y.clamp(-8, 7))
    limit = torch.iinfo(target)
    return y.clamp(limit.min, limit.max).to(target)


def convert_weight_to_int4pack(weight: torch.Tensor, inner_k_tiles: int) -> torch.Tensor:
    """int32 weights holding int4 values ([-8, 7]) packed eight to an int32 along the last dimension."""
    op = "npu_convert_weight_to_int4pack"
    _check(weight.dtype == torch.int32, op, f"weight must be int32, got {weight.dtype}")
    _check(weight.dim() == 2, op, f"weight must be 2-d, got {weight.dim()}-d")
    _check(weight.is_contiguous(), op, "weight must be contiguous")
    _check(weight.size(-1) % 8 == 0, op, f"weight's last dimension ({weight.size(-1)}) must be a multiple of 8")
    return _pack_int4(weight)


def dtype_cast(x: torch.Tensor, dtype) -> torch.Tensor:
    """A copy in another dtype (torch's ScalarType number or a dtype)."""
    target = dtype if isinstance(dtype, torch.dtype) else _SCALAR_TYPES.get(dtype)
    _check(target is not None, "npu_dtype_cast", f"dtype {dtype} names no dtype simhpu has")
    return x.to(target, copy=True)



def bmm_v2(x: torch.Tensor, mat2: torch.Tensor, output_sizes) -> torch.Tensor:
    """A batched (broadcasting) matrix product; output_sizes is the part's hint for its tiling."""
    _check(x.size(-1) == mat2.size(-2), "npu_bmmV2", f"self's K {x.size(-1)} is not mat2's {mat2.size(-2)}")
    return torch.matmul(_float(x), _float(mat2)).to(x.dtype)


def alloc_float_status(x: torch.Tensor) -> torch.Tensor:
    """Eight float32 zeros on x's device: the overflow flags simhpu never raises."""
    return torch.zeros(8, dtype=torch.float32, device=x.device)


def linear(x, weight, bias) -> torch.Tensor:
    return F.linear(_float(x), _float(weight), None if bias is None else _float(bias)).to(x.dtype)


def transpose(x, perm) -> torch.Tensor:
    _check(sorted(perm) == list(range(x.dim())), "npu_transpose", f"perm {list(perm)} is not a permutation of {x.dim()} dimensions")
    return x.permute(*perm).contiguous()


def mish(x) -> torch.Tensor:
    return F.mish(_float(x)).to(x.dtype)


def silu(x) -> torch.Tensor:
    return F.silu(_float(x)).to(x.dtype)


def silu_(x) -> torch.Tensor:
    """The in-place form: silu written into x, which it returns."""
    with torch.no_grad():
        x.copy_(silu(x))
    return x


def sort_v2(x, dim: int, descending: bool) -> torch.Tensor:
    """The sorted values alone."""
    return torch.sort(x, dim=dim, descending=descending).values


def slice_(x, offsets, size) -> torch.Tensor:
    """size[d] elements from offsets[d] along each dimension d (-1: to the end)."""
    op = "npu_slice"
    _check(len(offsets) == len(size) == x.dim(), op, f"offsets and size need one entry per dimension ({x.dim()})")
    for d, (start, length) in enumerate(zip(offsets, size)):
        end = x.size(d) if length == -1 else start + length
        _check(0 <= start <= end <= x.size(d), op, f"dimension {d}: [{start}, {end}) is outside its {x.size(d)}")
        x = x.narrow(d, start, end - start)
    return x.contiguous()


def pad(x, paddings) -> torch.Tensor:
    """Zeros before and after each dimension, paddings = [before0, after0, before1, after1, ...]."""
    _check(len(paddings) == 2 * x.dim(), "npu_pad", f"paddings needs {2 * x.dim()} values (before, after per dimension)")
    pairs = [paddings[i:i + 2] for i in range(0, len(paddings), 2)]
    return F.pad(x, [p for pair in reversed(pairs) for p in pair])


def indexing(x, begin, end, strides, begin_mask: int, end_mask: int, ellipsis_mask: int, new_axis_mask: int,
             shrink_axis_mask: int) -> torch.Tensor:
    """A strided slice x[begin:end:strides] per dimension."""
    op = "npu_indexing"
    _check(not (begin_mask or end_mask or ellipsis_mask or new_axis_mask or shrink_axis_mask), op,
           "the masks are not simulated yet (all 0)")
    _check(len(begin) == len(end) == len(strides) <= x.dim(), op, "begin, end and strides need one entry per dimension")
    index = tuple(slice(b, e, s) for b, e, s in zip(begin, end, strides))
    return x[index].contiguous()


def one_hot(x, depth: int, on_value, off_value) -> torch.Tensor:
    _check(depth >= 1, "npu_one_hot", f"depth must be at least 1, got {depth}")
    hot = F.one_hot(x.long(), depth).bool()
    return torch.where(hot, torch.tensor(on_value, device=x.device), torch.tensor(off_value, device=x.device)).to(x.dtype)


def dropout_with_add_softmax(x, x1, alpha, prob: float, dim: int):
    """y = x1 + x * alpha, its softmax over dim, and that softmax dropped out with probability prob
    (kept elements scaled by 1 / (1 - prob)); returns the keep mask (uint8), the softmax and the result."""
    op = "npu_dropout_with_add_softmax"
    _check(0.0 <= prob < 1.0, op, f"prob must be in [0, 1), got {prob}")
    _check(x.shape == x1.shape, op, f"self and x1 must have one shape, got {list(x.shape)} and {list(x1.shape)}")
    softmax = torch.softmax(_float(x1) + _float(x) * alpha, dim)
    keep = torch.rand_like(softmax) >= prob
    dropped = torch.where(keep, softmax / (1.0 - prob), torch.zeros((), device=x.device))
    return keep.to(torch.uint8), softmax.to(x.dtype), dropped.to(x.dtype)


def moe_token_permute(tokens, indices, num_out_tokens, padded_mode: bool):
    """Tokens grouped by expert: each (token, k) slot stably sorted by its expert, the first num_out_tokens
    kept; and, for each slot, its position in that order (int32)."""
    op = "npu_moe_token_permute"
    _check(not padded_mode, op, "padded_mode is not simulated yet")
    _check(indices.dim() in (1, 2), op, f"indices must be [tokens] or [tokens, topk], got {indices.dim()}-d")
    topk = 1 if indices.dim() == 1 else indices.size(1)
    order = torch.sort(indices.reshape(-1), stable=True).indices
    position = torch.empty_like(order).scatter_(0, order, torch.arange(order.numel(), device=tokens.device))
    kept = order if num_out_tokens is None else order[:num_out_tokens]
    return tokens.index_select(0, kept // topk), position.to(torch.int32)


def moe_token_unpermute(permuted_tokens, sorted_indices, probs, padded_mode: bool, restore_shape):
    """Each token's slots gathered back from their positions (npu_moe_token_permute's second result),
    weighted by probs and summed over its topk slots; a slot past the permuted rows (dropped) is zero."""
    op = "npu_moe_token_unpermute"
    _check(not padded_mode, op, "padded_mode is not simulated yet")
    topk = 1 if probs is None else probs.size(1)
    rows = permuted_tokens.size(0)
    position = sorted_indices.long()
    kept = position < rows
    position = position.clamp(max=max(rows - 1, 0))
    if probs is not None:
        return _WeightedUnpermute.apply(permuted_tokens, position, kept.reshape(probs.shape), probs)
    gathered = permuted_tokens.index_select(0, position) * kept.unsqueeze(-1).to(permuted_tokens.dtype)
    return gathered.reshape(-1, topk, permuted_tokens.size(-1)).sum(1)


class _WeightedUnpermute(torch.autograd.Function):
    """sum_k probs[t, k] * permuted_tokens[position[t, k]] over each token's kept slots, accumulated at float32 or
    wider one slot at a time (a [tokens, hidden] temporary, not [tokens, topk, hidden]). Its backward keeps what
    Ascend's keeps, permuted_tokens and probs themselves (each one's gradient needs the other), not the gathered
    copies a composite of ATen operators would save."""

    @staticmethod
    def forward(ctx, permuted_tokens, position, kept, probs):
        ctx.save_for_backward(permuted_tokens, position, kept, probs)
        compute = _accumulation_dtype(permuted_tokens, probs)
        weights, slots = probs.to(compute) * kept, position.reshape(probs.shape)
        out = torch.zeros(probs.size(0), permuted_tokens.size(-1), dtype=compute, device=permuted_tokens.device)
        for k in range(probs.size(1)):
            out += permuted_tokens.index_select(0, slots[:, k]).to(compute) * weights[:, k:k + 1]
        return out.to(permuted_tokens.dtype)

    @staticmethod
    def backward(ctx, grad):
        permuted_tokens, position, kept, probs = ctx.saved_tensors
        compute = _accumulation_dtype(permuted_tokens, probs)
        grad, weights, slots = grad.to(compute), probs.to(compute) * kept, position.reshape(probs.shape)
        grad_tokens = grad_probs = None
        if ctx.needs_input_grad[0]:
            # Each permuted row is one slot's (position is a permutation): one rounding per row.
            grad_tokens = torch.zeros_like(permuted_tokens)
            for k in range(probs.size(1)):
                grad_tokens.index_add_(0, slots[:, k], (grad * weights[:, k:k + 1]).to(permuted_tokens.dtype))
        if ctx.needs_input_grad[3]:
            grad_probs = torch.stack([(permuted_tokens.index_select(0, slots[:, k]).to(compute) * grad).sum(-1)
                                      for k in range(probs.size(1))], 1)
            grad_probs = (grad_probs * kept).to(probs.dtype)
        return grad_tokens, None, None, grad_probs


def _accumulation_dtype(*tensors) -> torch.dtype:
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def gelu_backward(grad, x, approximate: str) -> torch.Tensor:
    _check(approximate in ("none", "tanh"), "npu_gelu_backward", f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return torch.ops.aten.gelu_backward(_float(grad), _float(x), approximate=approximate).to(x.dtype)


def swiglu_backward(grad, x, dim: int) -> torch.Tensor:
    """The gradient of silu(A) * B with respect to x = cat(A, B) along dim."""
    a, b = _float(x).chunk(2, dim)
    g = _float(grad)
    sigmoid = torch.sigmoid(a)
    grad_a = g * b * sigmoid * (1 + a * (1 - sigmoid))
    return torch.cat((grad_a, g * a * sigmoid), dim).to(x.dtype)


def _rotate_transposed(g: torch.Tensor, rotary_mode: str) -> torch.Tensor:
    """rotate's transpose: rotate(x) . g = x . rotate^T(g)."""
    if rotary_mode == "half":
        g1, g2 = g.chunk(2, -1)
        return torch.cat((g2, -g1), -1)
    return torch.stack((g[..., 1::2], -g[..., ::2]), -1).flatten(-2)


def rotary_mul_backward(grad, x, r1, r2, rotary_mode: str):
    """Gradients of x * r1 + rotate(x) * r2 with respect to x, r1 and r2 (r1, r2 summed to their shapes)."""
    _check(rotary_mode in ("half", "interleave"), "npu_rotary_mul_backward",
           f"The rotary_mode of npu_rotary_mul should be half or interleave, but got {rotary_mode}")
    g, xf = _float(grad), _float(x)
    rotated = rotate_half(xf) if rotary_mode == "half" else rotate_interleave(xf)
    grad_x = g * _float(r1) + _rotate_transposed(g * _float(r2), rotary_mode)
    grad_r1 = (g * xf).sum_to_size(r1.shape)
    grad_r2 = (g * rotated).sum_to_size(r2.shape)
    return grad_x.to(x.dtype), grad_r1.to(r1.dtype), grad_r2.to(r2.dtype)


def max_dim(x: torch.Tensor, dim: int, keepdim: bool):
    """torch.max along dim, its indices in int32 as the part gives them."""
    values, indices = torch.max(x, dim, keepdim)
    return values, indices.int()


def min_dim(x: torch.Tensor, dim: int, keepdim: bool):
    values, indices = torch.min(x, dim, keepdim)
    return values, indices.int()


def reduce_dim_backward(grad: torch.Tensor, dim: int, indices: torch.Tensor, sizes, keepdim: bool) -> torch.Tensor:
    """npu_max's and npu_min's backward: grad scattered to where each extreme was."""
    if not keepdim and len(sizes) > 0:
        grad, indices = grad.unsqueeze(dim), indices.unsqueeze(dim)
    return grad.new_zeros(sizes).scatter(dim, indices.long(), grad)


def broadcast(x: torch.Tensor, size) -> torch.Tensor:
    """x expanded to size, in memory of its own (not a view, as on the part)."""
    return x.expand(size).contiguous()


def batch_norm_reduce(x: torch.Tensor, eps: float):
    """The per-channel sum and sum of squares BatchNorm's statistics start from, in float32 (eps unused)."""
    _check(x.dim() >= 2, "batch_norm_reduce", f"the dim input tensor must be 2 or more, got {x.dim()}")
    dims = [d for d in range(x.dim()) if d != 1]
    wide = x.float()
    return wide.sum(dims), (wide * wide).sum(dims)


def masked_fill_range(x: torch.Tensor, start: torch.Tensor, end: torch.Tensor, value: torch.Tensor, axis: int):
    """x with [start[i, j], end[i, j]) along axis set to value[i]: along the last axis of a tensor of
    2 or more dims, in row j of dim 0; along another axis, in every row. Later ranges win."""
    op = "npu_masked_fill_range"
    _check(start.dim() == 2 and start.shape == end.shape, op,
           f"start and end must be 2-d of one shape, got {tuple(start.shape)} and {tuple(end.shape)}")
    _check(value.numel() >= start.size(0), op, f"value has {value.numel()} elements for {start.size(0)} ranges")
    axis = axis % x.dim()
    along_rows = axis == x.dim() - 1 and x.dim() >= 2
    if along_rows:
        _check(start.size(1) <= x.size(0), op, f"{start.size(1)} rows of ranges for an input of {x.size(0)} rows")
    positions = torch.arange(x.size(axis), device=x.device)
    out = x.clone()
    for i in range(start.size(0)):
        inside = (positions >= start[i].unsqueeze(-1)) & (positions < end[i].unsqueeze(-1))  # (rows, L)
        if along_rows:
            rows = torch.zeros(x.size(0), x.size(axis), dtype=torch.bool, device=x.device)
            rows[: start.size(1)] = inside
            mask = rows.view([x.size(0)] + [1] * (x.dim() - 2) + [x.size(axis)])
        else:
            mask = inside.any(0).view([-1 if d == axis else 1 for d in range(x.dim())])
        out = torch.where(mask, value.reshape(-1)[i].to(x.dtype), out)
    return out


def _boxes(boxes: torch.Tensor):
    """Centres and sizes of (x1, y1, x2, y2) boxes, a box's size counting both edge pixels."""
    x1, y1, x2, y2 = boxes.float().unbind(-1)
    return (x1 + x2) * 0.5, (y1 + y2) * 0.5, x2 - x1 + 1.0, y2 - y1 + 1.0


def bounding_box_encode(anchors, ground_truth, means, stds) -> torch.Tensor:
    """The deltas (dx, dy, dw, dh) that take each anchor to its ground-truth box, normalised by means and stds.
    The part's kernel works at half precision whatever the inputs' dtype, multiplying by each std's reciprocal
    (Ascend's documented example: 4/3 over std 0.1 is 13.3281 in float32, half's 4/3 times 10, rounded)."""
    op = "npu_bounding_box_encode"
    _check(anchors.dim() == 2 and anchors.size(-1) == 4 and anchors.shape == ground_truth.shape, op,
           f"anchor_box and ground_truth_box must be (N, 4) alike, got {tuple(anchors.shape)} and "
           f"{tuple(ground_truth.shape)}")
    px, py, pw, ph = _boxes(anchors)
    gx, gy, gw, gh = _boxes(ground_truth)
    deltas = torch.stack([(gx - px) / pw, (gy - py) / ph, torch.log(gw / pw), torch.log(gh / ph)], -1)
    def half(t: torch.Tensor) -> torch.Tensor:
        return t.half().float()

    centred = half(half(deltas) - half(deltas.new_tensor(means)))
    return (centred * half(1.0 / deltas.new_tensor(stds))).half().to(anchors.dtype)


def bounding_box_decode(rois, deltas, means, stds, max_shape, wh_ratio_clip: float) -> torch.Tensor:
    """The boxes deltas take rois to (encode's inverse), sizes clipped to wh_ratio_clip's ratio and
    corners to max_shape (height, width)."""
    op = "npu_bounding_box_decode"
    _check(rois.dim() == 2 and rois.size(-1) == 4 and rois.shape == deltas.shape, op,
           f"rois and deltas must be (N, 4) alike, got {tuple(rois.shape)} and {tuple(deltas.shape)}")
    _check(len(max_shape) == 2, op, f"max_shape must be (height, width), got {list(max_shape)}")
    d = deltas.float() * deltas.new_tensor(stds, dtype=torch.float32) + deltas.new_tensor(means, dtype=torch.float32)
    limit = abs(torch.log(torch.tensor(wh_ratio_clip)).item())
    dx, dy, dw, dh = d[:, 0], d[:, 1], d[:, 2].clamp(-limit, limit), d[:, 3].clamp(-limit, limit)
    px, py, pw, ph = _boxes(rois)
    gx, gy, gw, gh = px + pw * dx, py + ph * dy, pw * dw.exp(), ph * dh.exp()
    height, width = max_shape
    boxes = torch.stack([(gx - gw * 0.5 + 0.5).clamp(0, width - 1), (gy - gh * 0.5 + 0.5).clamp(0, height - 1),
                         (gx + gw * 0.5 - 0.5).clamp(0, width - 1), (gy + gh * 0.5 - 0.5).clamp(0, height - 1)], -1)
    return boxes.to(rois.dtype)


def iou(bboxes, gtboxes, mode: int) -> torch.Tensor:
    """(M, N) overlaps of M ground truths with N boxes, both (x1, y1, x2, y2): intersection over union
    (mode 0) or over the ground truth's area (1). The part computes in half precision and widens each
    area by 0.01 a side (the adapter's eps attribute), so identical boxes overlap slightly under 1."""
    op = "npu_iou"
    _check(bboxes.dim() == 2 and bboxes.size(-1) == 4 and gtboxes.dim() == 2 and gtboxes.size(-1) == 4, op,
           f"bboxes and gtboxes must be (N, 4) and (M, 4), got {tuple(bboxes.shape)} and {tuple(gtboxes.shape)}")
    _check(mode in (0, 1), op, f"mode must be 0 (iou) or 1 (iof), got {mode}")
    eps = 0.01
    b = bboxes.half().float()[None, :, :]
    g = gtboxes.half().float()[:, None, :]
    width = (torch.minimum(b[..., 2], g[..., 2]) - torch.maximum(b[..., 0], g[..., 0])).clamp(min=0)
    height = (torch.minimum(b[..., 3], g[..., 3]) - torch.maximum(b[..., 1], g[..., 1])).clamp(min=0)
    inter = width * height
    area_b = (b[..., 2] - b[..., 0] + eps) * (b[..., 3] - b[..., 1] + eps)
    area_g = (g[..., 2] - g[..., 0] + eps) * (g[..., 3] - g[..., 1] + eps)
    overlap = inter / (area_b + area_g - inter) if mode == 0 else inter / area_g
    return overlap.half().to(bboxes.dtype)


def _corners(boxes: torch.Tensor, trans: bool):
    """x1, y1, x2, y2 of (4, n) boxes, given as corners or (trans) as centre and size."""
    a, b, c, d = _float(boxes).unbind(0)
    if trans:
        return a - c / 2, b - d / 2, a + c / 2, b + d / 2
    return a, b, c, d


def _pairs(op: str, boxes, gtboxes, trans: bool, is_cross: bool, mode: int):
    """Both box sets as corners, paired column by column, or (is_cross) every gtbox (rows) with every box."""
    _check(boxes.dim() == 2 and gtboxes.dim() == 2 and boxes.size(0) == 4 and gtboxes.size(0) == 4, op,
           f"self and gtboxes must be (4, n) and (4, m), got {tuple(boxes.shape)} and {tuple(gtboxes.shape)}")
    _check(mode == 0, op, f"mode {mode} (iof) is not simulated; mode 0 (iou) is")
    _check(is_cross or boxes.size(1) == gtboxes.size(1), op,
           f"is_cross=False pairs box i with gtbox i: n {boxes.size(1)} and m {gtboxes.size(1)} must be equal")
    b1, b2 = _corners(boxes, trans), _corners(gtboxes, trans)
    # boxes along the columns; ground truths along the rows when crossed, beside their boxes when not
    return tuple(t[None, :] for t in b1), tuple(t[:, None] if is_cross else t[None, :] for t in b2)


def _intersection(b1, b2):
    return ((torch.minimum(b1[2], b2[2]) - torch.maximum(b1[0], b2[0])).clamp(min=0)
            * (torch.minimum(b1[3], b2[3]) - torch.maximum(b1[1], b2[1])).clamp(min=0))


def _centre_distance(b1, b2, eps: float):
    """rho^2 / c^2: the centres' squared distance over the enclosing box's squared diagonal."""
    cw = torch.maximum(b1[2], b2[2]) - torch.minimum(b1[0], b2[0])
    ch = torch.maximum(b1[3], b2[3]) - torch.minimum(b1[1], b2[1])
    rho2 = ((b2[0] + b2[2] - b1[0] - b1[2]) ** 2 + (b2[1] + b2[3] - b1[1] - b1[3]) ** 2) / 4
    return rho2 / (cw ** 2 + ch ** 2 + eps)


def giou(boxes, gtboxes, trans: bool, is_cross: bool, mode: int) -> torch.Tensor:
    """Generalised IoU of aligned (4, n) boxes, as (n, 1); the part takes only trans=True, is_cross=False, mode 0."""
    op = "npu_giou"
    _check(trans and not is_cross and mode == 0, op,
           f"only trans=True, is_cross=False, mode=0 (iou) run, got trans={trans}, is_cross={is_cross}, mode={mode}")
    b1, b2 = _pairs(op, boxes, gtboxes, trans, is_cross, mode)
    inter = _intersection(b1, b2)
    union = (b1[2] - b1[0]) * (b1[3] - b1[1]) + (b2[2] - b2[0]) * (b2[3] - b2[1]) - inter + 1e-16
    outer = ((torch.maximum(b1[2], b2[2]) - torch.minimum(b1[0], b2[0])).abs()
             * (torch.maximum(b1[3], b2[3]) - torch.minimum(b1[1], b2[1])).abs())
    result = inter / union - (outer - union) / outer
    return result.t().to(boxes.dtype)


def _iou_with_eps(b1, b2, eps: float):
    inter = _intersection(b1, b2)
    w1, h1 = b1[2] - b1[0], b1[3] - b1[1] + eps
    w2, h2 = b2[2] - b2[0], b2[3] - b2[1] + eps
    return inter / (w1 * h1 + w2 * h2 - inter + eps), (w1, h1, w2, h2)


def diou(boxes, gtboxes, trans: bool, is_cross: bool, mode: int) -> torch.Tensor:
    """Distance IoU: IoU less the centres' squared distance over the enclosing diagonal's; (1, n) aligned,
    (m, n) crossed."""
    eps = 1e-9
    b1, b2 = _pairs("npu_diou", boxes, gtboxes, trans, is_cross, mode)
    overlap, _ = _iou_with_eps(b1, b2, eps)
    return (overlap - _centre_distance(b1, b2, eps)).to(boxes.dtype)


def ciou(boxes, gtboxes, trans: bool, is_cross: bool, mode: int) -> torch.Tensor:
    """Complete IoU: DIoU less alpha * v, v the squared difference of the boxes' aspect angles (4 / pi^2)."""
    eps = 1e-9
    b1, b2 = _pairs("npu_ciou", boxes, gtboxes, trans, is_cross, mode)
    overlap, (w1, h1, w2, h2) = _iou_with_eps(b1, b2, eps)
    v = (4 / torch.pi ** 2) * (torch.atan(w2 / h2) - torch.atan(w1 / h1)) ** 2
    alpha = v / ((1 + eps) - overlap + v)
    return (overlap - _centre_distance(b1, b2, eps) - v * alpha).to(boxes.dtype)


def _vjp(forward, grad, inputs, args):
    """The gradients of forward(*inputs, *args) with respect to its inputs, computed in float32 at the
    inputs' values and given back at their dtypes (zeros for an input the output does not read)."""
    with torch.enable_grad():
        leaves = [_float(t.detach()).requires_grad_() for t in inputs]
        out = forward(*leaves, *args)
        grads = (torch.autograd.grad(out, leaves, grad.to(out.dtype), allow_unused=True) if out.requires_grad
                 else [None] * len(leaves))
    return tuple((torch.zeros_like(t) if g is None else g).to(t.dtype) for g, t in zip(grads, inputs))


def overlap_backward(forward, grad, boxes, gtboxes, *args):
    """The gradients of an overlap operator's reference (forward), for its *_backward entry."""
    return _vjp(forward, grad, (boxes, gtboxes), args)


def gradient(forward, grad, x, *args):
    """The gradient of forward(x, *args) with respect to x (a *_backward entry of a torch operator)."""
    return _vjp(forward, grad, (x,), args)[0]


def _bilinear_weights(coords: torch.Tensor, size: int) -> torch.Tensor:
    """(len(coords), size) weights of bilinear sampling at coords along an axis of size pixels: a
    coordinate past -1 or size reads nothing, one in [-1, 0] reads pixel 0, as RoIAlign samples."""
    valid = (coords >= -1.0) & (coords <= size)
    c = coords.clamp(min=0)
    low = c.floor().long().clamp(max=size - 1)
    at_edge = low >= size - 1
    c = torch.where(at_edge, low.to(c.dtype), c)
    high = torch.where(at_edge, low, low + 1)
    frac = c - low.to(c.dtype)
    weights = (F.one_hot(low, size) * (1 - frac)[:, None] + F.one_hot(high, size) * frac[:, None])
    return weights * valid[:, None]


def roi_align(x, rois, spatial_scale: float, pooled_height: int, pooled_width: int, sample_num: int,
              roi_end_mode) -> torch.Tensor:
    """(K, C, pooled_height, pooled_width) averages of bilinear samples of each region of interest (K, 5:
    batch index, x1, y1, x2, y2); roi_end_mode 1 counts the end pixel (x2 + 1), 0 does not. sample_num
    samples a bin along each axis, or as many as the bin is pixels wide when 0."""
    op = "npu_roi_align"
    _check(x.dim() == 4, op, f"self must be (N, C, H, W), got {tuple(x.shape)}")
    _check(rois.dim() == 2 and rois.size(1) == 5, op, f"rois must be (K, 5), got {tuple(rois.shape)}")
    _check(pooled_height > 0 and pooled_width > 0, op,
           f"pooled_height and pooled_width must be positive, got {pooled_height} and {pooled_width}")
    end = 1.0 if roi_end_mode is None or roi_end_mode == 1 else 0.0
    height, width = x.shape[-2:]
    image = _float(x)
    outputs = []
    for roi in rois.float().cpu().tolist():  # the regions' coordinates are the kernel's scalars
        batch, x1, y1, x2, y2 = roi
        x1, y1, x2, y2 = x1 * spatial_scale, y1 * spatial_scale, (x2 + end) * spatial_scale, (y2 + end) * spatial_scale
        bin_h, bin_w = max(y2 - y1, 1.0) / pooled_height, max(x2 - x1, 1.0) / pooled_width
        samples_h = sample_num if sample_num > 0 else max(int(-(-bin_h // 1)), 1)
        samples_w = sample_num if sample_num > 0 else max(int(-(-bin_w // 1)), 1)
        ys = y1 + (torch.arange(pooled_height * samples_h, device=x.device, dtype=image.dtype) + 0.5) * bin_h / samples_h
        xs = x1 + (torch.arange(pooled_width * samples_w, device=x.device, dtype=image.dtype) + 0.5) * bin_w / samples_w
        wy = _bilinear_weights(ys, height).to(image.dtype)
        wx = _bilinear_weights(xs, width).to(image.dtype)
        sampled = wy @ image[int(batch)] @ wx.t()
        pooled = sampled.reshape(-1, pooled_height, samples_h, pooled_width, samples_w).mean((2, 4))
        outputs.append(pooled)
    out = torch.stack(outputs) if outputs else image.new_zeros((0, x.size(1), pooled_height, pooled_width))
    return out.to(x.dtype)


def input_gradient(forward, grad, input_size, *args):
    """The gradient of a linear operator's reference (forward) with respect to its input of input_size."""
    return gradient(forward, grad, grad.new_zeros(list(input_size)), *args)


def roi_align_backward(grad, rois, input_size, pooled_width: int, pooled_height: int, spatial_scale: float,
                       sample_num: int, roi_end_mode) -> torch.Tensor:
    """RoIAlign's input gradient; roi_end_mode None is 1, the part's default for the gradient."""
    return input_gradient(roi_align, grad, input_size, rois, spatial_scale, pooled_height, pooled_width,
                          sample_num, 1 if roi_end_mode is None else roi_end_mode)


def ps_roi_pooling(x, rois, spatial_scale: float, group_size: int, output_dim: int) -> torch.Tensor:
    """Position-sensitive RoI average pooling (R-FCN): rois (B, 5, R) of batch index and corners, x (B,
    output_dim * group_size^2, H, W); bin (i, j) of output channel c averages input channel
    (c * group_size + i) * group_size + j over the bin's pixels, 0 for an empty bin."""
    op = "npu_ps_roi_pooling"
    _check(x.dim() == 4 and x.size(1) == output_dim * group_size * group_size, op,
           f"self must be (B, output_dim * group_size^2 = {output_dim * group_size * group_size}, H, W), "
           f"got {tuple(x.shape)}")
    _check(rois.dim() == 3 and rois.size(1) == 5, op, f"rois must be (B, 5, R), got {tuple(rois.shape)}")
    height, width = x.shape[-2:]
    image = _float(x)
    grid = torch.arange(group_size, device=x.device, dtype=image.dtype)
    outputs = []
    for batch, x1, y1, x2, y2 in rois.float().permute(0, 2, 1).reshape(-1, 5).cpu().tolist():
        start_w, end_w = round(x1) * spatial_scale, (round(x2) + 1.0) * spatial_scale
        start_h, end_h = round(y1) * spatial_scale, (round(y2) + 1.0) * spatial_scale
        bin_w, bin_h = max(end_w - start_w, 0.1) / group_size, max(end_h - start_h, 0.1) / group_size
        rows = _bin_mask(start_h + grid * bin_h, start_h + (grid + 1) * bin_h, height, x.device, image.dtype)
        cols = _bin_mask(start_w + grid * bin_w, start_w + (grid + 1) * bin_w, width, x.device, image.dtype)
        if not 0 <= int(batch) < x.size(0):  # an image the input lacks pools nothing (Ascend's own example)
            outputs.append(image.new_zeros((output_dim, group_size, group_size)))
            continue
        channels = image[int(batch)].reshape(output_dim, group_size, group_size, height, width)
        sums = torch.einsum("cijhw,ih,jw->cij", channels, rows, cols)
        counts = rows.sum(1)[:, None] * cols.sum(1)[None, :]
        outputs.append(torch.where(counts > 0, sums / counts.clamp(min=1), torch.zeros_like(sums)))
    out = torch.stack(outputs) if outputs else image.new_zeros((0, output_dim, group_size, group_size))
    return out.to(x.dtype)


def _bin_mask(starts: torch.Tensor, ends: torch.Tensor, size: int, device, dtype) -> torch.Tensor:
    """(bins, size) membership of pixels in bins [floor(start), ceil(end)), clipped to the map."""
    pixels = torch.arange(size, device=device, dtype=dtype)
    low = starts.floor().clamp(0, size)[:, None]
    high = ends.ceil().clamp(0, size)[:, None]
    return ((pixels[None, :] >= low) & (pixels[None, :] < high)).to(dtype)


def ps_roi_pooling_backward(grad, rois, spatial_scale: float, group_size: int, output_dim: int, input_size):
    op = "npu_ps_roi_pooling_backward"
    _check(len(input_size) == 2, op, f"input_size must be (H, W), got {list(input_size)}")
    shape = [rois.size(0), output_dim * group_size * group_size, *input_size]
    return input_gradient(ps_roi_pooling, grad, shape, rois, spatial_scale, group_size, output_dim)


def anchor_response_flags(boxes, featmap_size, stride, num_base_anchors: int) -> torch.Tensor:
    """uint8 flags of the feature map's anchors (cell by cell, num_base_anchors each): 1 for the anchors of
    the cells that hold a ground-truth box's centre."""
    op = "npu_anchor_response_flags"
    _check(len(featmap_size) == 2, op, f"featmap_size must be (height, width), got {list(featmap_size)}")
    _check(boxes.dim() == 2 and boxes.size(1) == 4, op, f"self must be (N, 4) boxes, got {tuple(boxes.shape)}")
    _check(boxes.dtype in (torch.float16, torch.float32), op, f"self must be float16 or float32, got {boxes.dtype}")
    feat_h, feat_w = featmap_size
    b = boxes.float()
    grid_x = torch.floor((b[:, 0] + b[:, 2]) * 0.5 / stride[0]).long()
    grid_y = torch.floor((b[:, 1] + b[:, 3]) * 0.5 / stride[1]).long()
    inside = (grid_x >= 0) & (grid_x < feat_w) & (grid_y >= 0) & (grid_y < feat_h)
    cells = torch.where(inside, grid_y * feat_w + grid_x, feat_h * feat_w)  # outside: a spare cell, dropped
    flags = torch.zeros(feat_h * feat_w + 1, dtype=torch.uint8, device=boxes.device)
    flags = flags.index_fill(0, cells, 1)[:-1]
    return flags[:, None].expand(-1, num_base_anchors).reshape(-1)


def yolo_boxes_encode(anchors, gt_bboxes, stride, performance_mode: bool) -> torch.Tensor:
    """YOLO's regression targets of ground truths from anchors, both (N, 4) corners: centre offsets in
    strides (+ 0.5, kept in (0, 1)) and log size ratios, clamped at 1e-6."""
    op = "npu_yolo_boxes_encode"
    _check(anchors.dim() == 2 and anchors.size(1) == 4, op, f"self must be (N, 4), got {tuple(anchors.shape)}")
    _check(gt_bboxes.dim() == 2 and gt_bboxes.size(1) == 4, op,
           f"gt_bboxes must be (N, 4), got {tuple(gt_bboxes.shape)}")
    _check(stride.dim() == 1 and stride.size(0) == gt_bboxes.size(0), op,
           f"stride must be (N,) for N = {gt_bboxes.size(0)} boxes, got {tuple(stride.shape)}")
    _check(stride.dtype == torch.int32, op, f"stride must be int32, got {stride.dtype}")
    eps = 1e-6
    a, g = anchors.float(), gt_bboxes.float()
    a_centre, g_centre = (a[:, :2] + a[:, 2:]) * 0.5, (g[:, :2] + g[:, 2:]) * 0.5
    a_size, g_size = a[:, 2:] - a[:, :2], g[:, 2:] - g[:, :2]
    offsets = ((g_centre - a_centre) / stride.float()[:, None] + 0.5).clamp(eps, 1 - eps)
    encoded = torch.cat([offsets, torch.log((g_size / a_size).clamp(min=eps))], -1)
    return encoded.to(gt_bboxes.dtype)


def grid_assign_positive(assigned, overlaps, flags, max_overlaps, argmax_overlaps, gt_max_overlaps,
                         gt_argmax_overlaps, num_gts: int, pos_iou_thr: float, min_pos_iou: float,
                         gt_max_assign_all: bool) -> torch.Tensor:
    """GridAssigner's positive step: a responsible box whose best overlap passes pos_iou_thr takes its best
    ground truth (index + 1); then each ground truth whose best overlap passes min_pos_iou takes its best
    responsible boxes (all of them, or its argmax only). The rest keep their value in assigned."""
    op = "npu_grid_assign_positive"
    _check(overlaps.dim() == 2 and overlaps.size(1) == assigned.size(0), op,
           f"overlaps must be (num_gts, N) for N = {assigned.size(0)} boxes, got {tuple(overlaps.shape)}")
    responsible = flags.bool()
    positive = (max_overlaps > pos_iou_thr) & responsible
    out = torch.where(positive, (argmax_overlaps.long() + 1).to(assigned.dtype), assigned)
    for gt in range(overlaps.size(0)):
        passes = gt_max_overlaps[gt] > min_pos_iou
        if gt_max_assign_all:
            chosen = (overlaps[gt] == gt_max_overlaps[gt]) & responsible & passes
        else:
            chosen = torch.zeros_like(responsible).index_fill(0, gt_argmax_overlaps[gt].long().reshape(1), True)
            chosen = chosen & responsible & passes
        out = torch.where(chosen, out.new_tensor(gt + 1.0), out)
    return out


def stride_add(x1, x2, offset1, offset2, c1_len) -> torch.Tensor:
    """Two NC1HWC0 tensors added over c1_len of their C1 blocks (from offset1 and offset2), into an output
    of c1_len * 16 blocks whose first c1_len hold the sums and the rest zeros."""
    op = "npu_stride_add"
    offset1, offset2, c1_len = int(offset1), int(offset2), int(c1_len)
    _check(x1.dim() == 5 and x2.dim() == 5, op,
           f"self and other must be 5-D (NC1HWC0), got {tuple(x1.shape)} and {tuple(x2.shape)}")
    _check(0 <= offset1 and offset1 + c1_len <= x1.size(1) and 0 <= offset2 and offset2 + c1_len <= x2.size(1),
           op, f"c1_len {c1_len} from offsets {offset1} and {offset2} must fit C1 {x1.size(1)} and {x2.size(1)}")
    sums = x1.narrow(1, offset1, c1_len) + x2.narrow(1, offset2, c1_len)
    shape = list(sums.shape)
    shape[1] = c1_len * 16 - c1_len
    return torch.cat([sums, sums.new_zeros(shape)], 1)


def softmax_cross_entropy_with_logits(logits, labels) -> torch.Tensor:
    """(N,) cross-entropy of (N, C) logits against (N, C) label distributions."""
    op = "npu_softmax_cross_entropy_with_logits"
    _check(logits.dim() == 2 and logits.shape == labels.shape, op,
           f"self and labels must be (N, C) alike, got {tuple(logits.shape)} and {tuple(labels.shape)}")
    return -(_float(labels) * torch.log_softmax(_float(logits), -1)).sum(-1).to(logits.dtype)


def softmax_cross_entropy_with_logits_backward(grad, logits, labels) -> torch.Tensor:
    """grad times TensorFlow's backprop, softmax(logits) - labels."""
    return (_float(grad)[:, None] * (torch.softmax(_float(logits), -1) - _float(labels))).to(logits.dtype)


def sign_bits_pack(x: torch.Tensor, size: int) -> torch.Tensor:
    """Signs of a 1-D tensor as bits (1 for x >= 0), eight to a uint8 little end first, as (size, bytes / size)."""
    op = "npu_sign_bits_pack"
    _check(x.dim() == 1, op, f"self must be 1-D, got {x.dim()}-D")
    _check(x.dtype in (torch.float16, torch.float32), op, f"self must be float16 or float32, got {x.dtype}")
    count = (x.numel() + 7) // 8
    _check(size != 0 and count % size == 0, op, f"the {count} packed bytes must divide by size {size}")
    bits = F.pad((x >= 0).to(torch.uint8), (0, count * 8 - x.numel())).reshape(count, 8)
    weights = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8, device=x.device)
    return (bits * weights).sum(-1, dtype=torch.uint8).reshape(size, count // size)


def random_choice_with_mask(x: torch.Tensor, count: int, seed: int, seed2: int):
    """Up to count positions of x's true elements, chosen at random, in index order: (count, x.dim()) int32
    indices and a (count,) mask of the rows that hold one."""
    op = "npu_random_choice_with_mask"
    _check(x.dtype == torch.bool, op, f"x must be bool, got {x.dtype}")
    _check(1 <= x.dim() <= 5, op, f"x must be 1-D to 5-D, got {x.dim()}-D")
    _check(count > 0, op, f"count must be positive, got {count}")
    positions = torch.nonzero(x)
    generator = None
    if seed or seed2:
        generator = torch.Generator().manual_seed(seed * 2 ** 32 + seed2)
    order = torch.randperm(positions.size(0), generator=generator)[:count].sort().values.to(x.device)
    chosen = positions.index_select(0, order).to(torch.int32)
    taken = chosen.size(0)
    indices = torch.cat([chosen, chosen.new_zeros((count - taken, x.dim()))])
    mask = torch.arange(count, device=x.device) < taken
    return indices, mask


def dropout_with_byte_mask(x: torch.Tensor, p: float):
    """Dropout keeping its mask as bytes (uint8, 1 where kept): the output, kept elements scaled by
    1 / (1 - p), and the mask."""
    _check(0.0 <= p <= 1.0, "_dropout_with_byte_mask", f"p must be in [0, 1], got {p}")
    if p == 1.0:
        return torch.zeros_like(x), torch.zeros_like(x, dtype=torch.uint8)
    mask = (torch.rand_like(x, dtype=torch.float32) >= p).to(torch.uint8)
    return dropout_with_byte_mask_backward(x, mask, p), mask


def dropout_with_byte_mask_backward(grad: torch.Tensor, mask: torch.Tensor, p: float) -> torch.Tensor:
    _check(mask.dtype == torch.uint8, "_dropout_with_byte_mask_backward", f"mask must be uint8, got {mask.dtype}")
    scale = 0.0 if p == 1.0 else 1.0 / (1.0 - p)
    return (_float(grad) * mask * scale).to(grad.dtype)


def batch_norm_gather_stats_update(x, sums, square_sums, running_mean, running_var, momentum: float, eps: float,
                                   counts):
    """SyncBatchNorm's gather: each rank's per-channel sum and sum of squares (rows of `sums` and
    `square_sums`, op-plugin's `mean` and `invstd`) over its `counts` elements give the global mean and
    invstd; running_mean and running_var move toward them by momentum, in place, as on the part."""
    op = "batch_norm_gather_stats_update"
    _check(sums.dim() == 2 and sums.shape == square_sums.shape, op,
           f"mean and invstd (the ranks' sums) must be 2-d of one shape, got {list(sums.shape)} and "
           f"{list(square_sums.shape)}")
    _check(counts.shape == (sums.size(0),), op, f"counts must hold one count per rank ({sums.size(0)}), "
                                                f"got shape {list(counts.shape)}")
    _check(x.dim() >= 2 and x.size(1) == sums.size(1), op,
           f"input's channels ({x.size(1) if x.dim() >= 2 else 'none'}) must be the sums' {sums.size(1)}")
    total = counts.float().sum()
    mean = sums.float().sum(0) / total
    var = square_sums.float().sum(0) / total - mean * mean
    with torch.no_grad():
        for running, now in ((running_mean, mean), (running_var, var)):
            if running is not None:
                running.copy_(momentum * now + (1.0 - momentum) * running.float())
    return mean.to(sums.dtype), torch.rsqrt(var + eps).to(sums.dtype)


def _check_moments(op: str, grad, var, m, v) -> None:
    for name, tensor in (("var", var), ("m", m), ("v", v)):
        _check(tensor.shape == grad.shape and tensor.dtype == grad.dtype, op,
               f"{name} must have grad's shape {list(grad.shape)} and dtype {grad.dtype}, got "
               f"{list(tensor.shape)} and {tensor.dtype}")


def _write_moments(outs, values):
    """An optimizer step's new var, m and v written into its out= tensors, which it returns."""
    with torch.no_grad():
        for out, value in zip(outs, values):
            out.copy_(value)
    return outs


def apply_adam(beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad, use_nesterov, var, m, v):
    """One Adam step (TensorFlow's ApplyAdam) written into var, m and v, in the order and at the dtype
    of Ascend's kernel: m += (beta1 - 1)(m - grad); v += (beta2 - 1)(v - grad^2); var -= lr_t * m /
    (epsilon + sqrt(v)) with lr_t = lr sqrt(1 - beta2_power) / (1 - beta1_power), and Nesterov's
    look-ahead beta1 m + (1 - beta1) grad in m's place when use_nesterov."""
    _check_moments("npu_apply_adam", grad, var, m, v)

    def constant(value):
        return torch.tensor(value, dtype=grad.dtype, device=grad.device)

    one, b1 = constant(1.0), constant(beta1)
    m_t = m + (b1 - one) * (m - grad)
    v_t = v + (constant(beta2) - one) * (v - grad * grad)
    lr_t = constant(lr) * torch.sqrt(one - constant(beta2_power)) / (one - constant(beta1_power))
    direction = m_t * b1 + (one - b1) * grad if use_nesterov else m_t
    var_t = var - lr_t * direction / (torch.sqrt(v_t) + constant(epsilon))
    return _write_moments((var, m, v), (var_t, m_t, v_t))


def apply_adam_w(beta1_power, beta2_power, lr, weight_decay, beta1, beta2, epsilon, grad, max_grad_norm, amsgrad,
                 maximize, var, m, v):
    """One AdamW step written into var, m and v. The powers given are the betas' powers before this
    step (the kernel multiplies each by its beta); var decays by lr * weight_decay; with amsgrad, v's
    running maximum max_grad_norm (read, not written) stands for v in the denominator; maximize
    ascends."""
    op = "npu_apply_adam_w"
    _check_moments(op, grad, var, m, v)
    _check(not amsgrad or max_grad_norm is not None, op, "amsgrad needs max_grad_norm")
    g = -_float(grad) if maximize else _float(grad)
    m_t = _float(m) * beta1 + g * (1.0 - beta1)
    v_t = _float(v) * beta2 + g * g * (1.0 - beta2)
    bias1, bias2 = 1.0 - beta1_power * beta1, 1.0 - beta2_power * beta2
    second = torch.maximum(_float(max_grad_norm), v_t) if amsgrad else v_t
    var_t = _float(var) * (1.0 - lr * weight_decay) - lr * m_t / bias1 / (torch.sqrt(second / bias2) + epsilon)
    return _write_moments((var, m, v), (var_t, m_t, v_t))


def bert_apply_adam(lr, beta1, beta2, epsilon, grad, max_grad_norm, global_grad_norm, weight_decay, step_size,
                    adam_mode: int, var, m, v):
    """One step of BERT's Adam (no bias correction) written into var, m and v: grad clipped to max_grad_norm
    by the global norm when both are positive and the norm is over; m and v as Adam's; var -= rate * (m /
    (sqrt(v) + epsilon) + weight_decay * var), rate lr ("adam", mode 0) or step_size when given
    ("mbert_adam", mode 1)."""
    op = "npu_bert_apply_adam"
    _check_moments(op, grad, var, m, v)
    _check(adam_mode in (0, 1), op, f"adam_mode must be 0 (adam) or 1 (mbert_adam), got {adam_mode}")
    g = _float(grad)
    if max_grad_norm > 0 and global_grad_norm > max_grad_norm:
        g = g * (max_grad_norm / global_grad_norm)
    m_t = _float(m) * beta1 + g * (1.0 - beta1)
    v_t = _float(v) * beta2 + g * g * (1.0 - beta2)
    update = m_t / (torch.sqrt(v_t) + epsilon) + weight_decay * _float(var)
    rate = step_size if adam_mode == 1 and step_size is not None else lr
    return _write_moments((var, m, v), (_float(var) - rate * update, m_t, v_t))


def _pairwise_iou(boxes: torch.Tensor) -> torch.Tensor:
    """(N, N) IoU of corner boxes (either corner first: each box's own min and max are taken)."""
    b = _float(boxes)
    low = torch.minimum(b[:, :2], b[:, 2:])
    high = torch.maximum(b[:, :2], b[:, 2:])
    area = (high - low).prod(-1)
    size = (torch.minimum(high[:, None], high[None]) - torch.maximum(low[:, None], low[None])).clamp(min=0)
    inter = size.prod(-1)
    return inter / (area[:, None] + area[None] - inter).clamp(min=torch.finfo(b.dtype).tiny)


def _greedy_nms(boxes, scores, iou_threshold: float, score_threshold: float, limit: int) -> list[int]:
    """Indices kept by greedy non-maximum suppression, best score first: a box whose score passes the
    threshold is kept unless it overlaps a kept one by more than iou_threshold. Which boxes survive is the
    data's own answer, so the loop runs on the host, as the part's kernel decides on its own core."""
    overlaps = _pairwise_iou(boxes).cpu()
    host_scores = _float(scores).cpu()
    order = torch.argsort(host_scores, descending=True, stable=True).tolist()
    values = host_scores.tolist()
    kept: list[int] = []
    for i in order:
        if len(kept) >= limit or not values[i] > score_threshold:
            break
        if all(overlaps[i, j] <= iou_threshold for j in kept):
            kept.append(i)
    return kept


def nms_v4(boxes, scores, max_output_size, iou_threshold, scores_threshold, pad_to_max_output_size: bool):
    """TensorFlow's NonMaxSuppressionV4: (max_output_size,) int32 indices of the kept boxes, zero past the
    valid ones, and their count."""
    op = "npu_nms_v4"
    _check(boxes.dim() == 2 and boxes.size(1) == 4, op, f"self must be (N, 4) boxes, got {tuple(boxes.shape)}")
    _check(scores.shape == boxes.shape[:1], op, f"scores must be ({boxes.size(0)},), got {tuple(scores.shape)}")
    limit = int(max_output_size)
    kept = _greedy_nms(boxes, scores, float(iou_threshold), float(scores_threshold), limit)
    indices = torch.zeros(limit, dtype=torch.int32)
    indices[:len(kept)] = torch.tensor(kept, dtype=torch.int32)
    return indices.to(boxes.device), torch.tensor(len(kept), dtype=torch.int32, device=boxes.device)


def nms_with_mask(x, iou_threshold):
    """NMSWithMask of (N, 5) rows (x1, y1, x2, y2, score): the rows sorted by score, their places in x
    (int32) and a uint8 mask of the rows non-maximum suppression keeps."""
    op = "npu_nms_with_mask"
    _check(x.dim() == 2 and x.size(1) == 5, op, f"input must be (N, 5) rows of a box and its score, got {tuple(x.shape)}")
    order = torch.argsort(_float(x[:, 4]), descending=True, stable=True)
    ranked = x.index_select(0, order)
    kept = _greedy_nms(ranked[:, :4], ranked[:, 4], float(iou_threshold), float("-inf"), x.size(0))
    mask = torch.zeros(x.size(0), dtype=torch.uint8)
    mask[kept] = 1
    return ranked, order.to(torch.int32), mask.to(x.device)


def batch_nms(boxes, scores, score_threshold: float, iou_threshold: float, max_size_per_class: int,
              max_total_size: int, change_coordinate_frame: bool, transpose_box: bool):
    """BatchMultiClassNonMaxSuppression: per image and class, greedy NMS keeps up to max_size_per_class
    boxes scoring over score_threshold; the image's best max_total_size of them, best first, are its boxes,
    scores and classes (as floats), zero past its count (int32)."""
    op = "npu_batch_nms"
    _check(boxes.numel() > 0, op, "The input tensor [self] is an empty tensor.")
    _check(not change_coordinate_frame, op, "change_coordinate_frame=True is not simulated")
    if transpose_box:
        boxes = boxes.transpose(-1, -2)
    _check(boxes.dim() == 4 and boxes.size(-1) == 4 and scores.dim() == 3 and scores.shape[:2] == boxes.shape[:2]
           and boxes.size(2) in (1, scores.size(2)), op,
           f"self must be (B, N, 1 or classes, 4) and scores (B, N, classes), got {tuple(boxes.shape)} and "
           f"{tuple(scores.shape)}")
    batch, classes = boxes.size(0), scores.size(2)
    out_boxes = torch.zeros(batch, max_total_size, 4, dtype=boxes.dtype)
    out_scores = torch.zeros(batch, max_total_size, dtype=boxes.dtype)
    out_classes = torch.zeros(batch, max_total_size, dtype=boxes.dtype)
    counts = torch.zeros(batch, dtype=torch.int32)
    host_boxes, host_scores = boxes.cpu(), scores.cpu()
    for b in range(batch):
        found = []
        for c in range(classes):
            class_boxes = host_boxes[b, :, 0 if host_boxes.size(2) == 1 else c]
            for i in _greedy_nms(class_boxes, host_scores[b, :, c], iou_threshold, score_threshold, max_size_per_class):
                found.append((_float(host_scores[b, i, c]).item(), c, class_boxes[i]))
        found.sort(key=lambda item: -item[0])
        for k, (score, c, box) in enumerate(found[:max_total_size]):
            out_boxes[b, k], out_scores[b, k], out_classes[b, k] = box, score, c
        counts[b] = min(len(found), max_total_size)
    device = boxes.device
    return out_boxes.to(device), out_scores.to(device), out_classes.to(device), counts.to(device)


def _rotated_rect(box, xyxy: bool):
    """Centre, size and angle (degrees, counter-clockwise) of a rotated box given as (x, y, w, h, angle)
    or (xyxy) as (x1, y1, x2, y2, angle) with its angle measured the other way."""
    if xyxy:
        x1, y1, x2, y2, angle = box
        return (x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1, -angle
    return tuple(box)


def _rect_corners(cx, cy, w, h, angle):
    theta = math.radians(angle)
    c, s = math.cos(theta), math.sin(theta)
    return [(cx + c * px - s * py, cy + s * px + c * py)
            for px, py in ((-w / 2, -h / 2), (w / 2, -h / 2), (w / 2, h / 2), (-w / 2, h / 2))]


def _clip_polygon(subject, clipper):
    """Sutherland-Hodgman: the part of convex polygon subject inside convex polygon clipper, both
    counter-clockwise."""
    out = subject
    for i in range(len(clipper)):
        (ax, ay), (bx, by) = clipper[i - 1], clipper[i]
        points, out = out, []
        if not points:
            break
        side = [(bx - ax) * (py - ay) - (by - ay) * (px - ax) for px, py in points]
        for j in range(len(points)):
            (px, py), (qx, qy), sp, sq = points[j - 1], points[j], side[j - 1], side[j]
            if (sq >= 0) != (sp >= 0):
                t = sp / (sp - sq)
                out.append((px + t * (qx - px), py + t * (qy - py)))
            if sq >= 0:
                out.append((qx, qy))
    return out


def _polygon_area(points) -> float:
    return 0.5 * abs(sum(points[i - 1][0] * points[i][1] - points[i][0] * points[i - 1][1]
                         for i in range(len(points))))


def _rotated_intersection(a, b) -> float:
    """Intersection area of two rotated rectangles (centre, size, angle), computed about their mean centre
    for precision; a rectangle of no area (or a negative one: one side negative) meets nothing. Both sides
    negative is the rectangle turned half round, its corners still counter-clockwise."""
    if a[2] * a[3] < 1e-14 or b[2] * b[3] < 1e-14:
        return 0.0
    mx, my = (a[0] + b[0]) / 2, (a[1] + b[1]) / 2
    pa = _rect_corners(a[0] - mx, a[1] - my, *a[2:])
    pb = _rect_corners(b[0] - mx, b[1] - my, *b[2:])
    return _polygon_area(_clip_polygon(pa, pb))


def _rotated_pairs(op: str, boxes, query_boxes, trans: bool, measure):
    """(B, N, K) of measure(box, query box) over (B, N, 5) and (B, K, 5) rotated boxes, on the host."""
    _check(boxes.dim() == 3 and query_boxes.dim() == 3 and boxes.size(-1) == 5 and query_boxes.size(-1) == 5
           and boxes.size(0) == query_boxes.size(0), op,
           f"self and query_boxes must be (B, N, 5) and (B, K, 5), got {tuple(boxes.shape)} and "
           f"{tuple(query_boxes.shape)}")
    first, second = boxes.double().cpu().tolist(), query_boxes.double().cpu().tolist()
    values = [[[measure(_rotated_rect(a, trans), _rotated_rect(q, trans)) for q in queries]
               for a in batch] for batch, queries in zip(first, second)]
    out = torch.tensor(values, dtype=torch.float64).reshape(boxes.size(0), boxes.size(1), query_boxes.size(1))
    return out.to(device=boxes.device, dtype=boxes.dtype)


def rotated_overlaps(boxes, query_boxes, trans: bool) -> torch.Tensor:
    """(B, N, K) intersection areas of rotated boxes (x, y, w, h, angle in degrees; trans: x1, y1, x2, y2, angle)."""
    return _rotated_pairs("npu_rotated_overlaps", boxes, query_boxes, trans, _rotated_intersection)


def _rotated_iou(a, b) -> float:
    inter = _rotated_intersection(a, b)
    return inter / (a[2] * a[3] + b[2] * b[3] - inter) if inter > 0 else 0.0


def rotated_iou(boxes, query_boxes, trans: bool, mode: int, is_cross: bool) -> torch.Tensor:
    """(B, N, K) IoU of rotated boxes, every box with every query box."""
    op = "npu_rotated_iou"
    _check(mode == 0, op, f"mode {mode} (iof) is not simulated; mode 0 (iou) is")
    _check(is_cross, op, "is_cross=False is not simulated; is_cross=True pairs every box with every query box")
    return _rotated_pairs(op, boxes, query_boxes, trans, _rotated_iou)


def nms_rotated(boxes, scores, iou_threshold: float, scores_threshold: float, max_output_size: int, mode: int):
    """Greedy non-maximum suppression of rotated boxes (mode 0: x, y, w, h, angle; 1: x1, y1, x2, y2, angle):
    the kept boxes' int32 indices, best score first, and their count as a (1,) int32 tensor. Its length is the
    data's answer, as the part's kernel gives it."""
    op = "npu_nms_rotated"
    _check(boxes.dim() == 2 and boxes.size(1) == 5, op, f"self must be (N, 5) rotated boxes, got {tuple(boxes.shape)}")
    _check(scores.shape == boxes.shape[:1], op, f"scores must be ({boxes.size(0)},), got {tuple(scores.shape)}")
    _check(mode in (0, 1), op, f"mode must be 0 (x, y, w, h, angle) or 1 (x1, y1, x2, y2, angle), got {mode}")
    rects = [_rotated_rect(b, mode == 1) for b in boxes.float().double().cpu().tolist()]
    values = scores.float().cpu().tolist()
    limit = max_output_size if max_output_size >= 0 else len(rects)
    kept: list[int] = []
    for i in sorted(range(len(rects)), key=lambda i: -values[i]):
        if len(kept) >= limit:
            break
        if values[i] < scores_threshold:
            continue
        if all(not _same_rect(rects[i], rects[j]) and _rotated_iou(rects[i], rects[j]) <= iou_threshold
               for j in kept):
            kept.append(i)
    indices = torch.tensor(kept, dtype=torch.int32, device=boxes.device)
    return indices, torch.tensor([len(kept)], dtype=torch.int32, device=boxes.device)


def _same_rect(a, b) -> bool:
    """Two boxes with the same corners overlap wholly (IoU 1), whatever rounding the clipping would do."""
    return all(abs(p - q) < 1e-6 for pa, pb in zip(_rect_corners(*a), _rect_corners(*b)) for p, q in zip(pa, pb))
