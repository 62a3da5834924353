"""op-plugin's custom operators run by their references (references.yaml): each against a computation
written here from Ascend's documented formula, its gradient, opcheck, and the calls the part refuses."""
import pytest
import torch
import torch.nn.functional as F
import torch_npu

from torch.testing import assert_close


def npu(*tensors):
    return [t.npu() for t in tensors]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_swiglu(dtype):
    x = torch.randn(3, 4, 10)
    a, b = x[..., :5], x[..., 5:]
    expected = (a * torch.sigmoid(a) * b).to(dtype)
    assert_close(torch_npu.npu_swiglu(x.to(dtype).npu()).cpu(), expected, atol=2e-2, rtol=2e-2)
    assert_close(torch_npu.npu_swiglu(x.npu(), dim=1).cpu(), F.silu(x[:, :2]) * x[:, 2:])


def test_rotary_mul_by_halves_interleaved_and_by_a_matrix():
    x, cos, sin = torch.randn(2, 3, 4, 8), torch.randn(1, 3, 1, 8), torch.randn(1, 3, 1, 8)
    half = torch.cat((-x[..., 4:], x[..., :4]), -1)
    assert_close(torch_npu.npu_rotary_mul(*npu(x, cos, sin)).cpu(), x * cos + half * sin)
    pairs = torch.empty_like(x)
    pairs[..., 0::2], pairs[..., 1::2] = -x[..., 1::2], x[..., 0::2]
    assert_close(torch_npu.npu_rotary_mul(*npu(x, cos, sin), "interleave").cpu(), x * cos + pairs * sin)
    rotate = torch.randn(8, 8)
    assert_close(torch_npu.npu_rotary_mul(*npu(x, cos, sin), rotate=rotate.npu()).cpu(), x * cos + (x @ rotate) * sin)


def test_gelu_family():
    x = torch.randn(64) * 4
    assert_close(torch_npu.npu_fast_gelu(x.npu()).cpu(), x / (1 + torch.exp(-1.702 * x)))
    assert_close(torch_npu.fast_gelu(x.npu()).cpu(), x / (1 + torch.exp(-1.702 * x)))
    assert_close(torch_npu.npu_gelu(x.npu()).cpu(), 0.5 * x * (1 + torch.erf(x / 2 ** 0.5)))
    assert_close(torch_npu.npu_gelu(x.npu(), approximate="tanh").cpu(), F.gelu(x, approximate="tanh"))


def test_layer_norm_eval():
    x, w, b = torch.randn(4, 5, 6), torch.randn(5, 6), torch.randn(5, 6)
    mean = x.mean((-2, -1), keepdim=True)
    var = x.var((-2, -1), unbiased=False, keepdim=True)
    expected = (x - mean) / torch.sqrt(var + 1e-5) * w + b
    assert_close(torch_npu.npu_layer_norm_eval(x.npu(), [5, 6], w.npu(), b.npu()).cpu(), expected, atol=1e-5, rtol=1e-5)


def test_confusion_transpose_as_documented():
    x = torch.rand(2, 3, 4, 6)
    y = torch_npu.npu_confusion_transpose(x.npu(), (0, 2, 1, 3), (2, 4, 18), True)
    assert y.shape == (2, 4, 18) and torch.equal(y.cpu(), x.transpose(1, 2).reshape(2, 4, 18))
    y2 = torch_npu.npu_confusion_transpose(x.npu(), (0, 2, 1), (2, 12, 6), False)
    assert y2.shape == (2, 6, 12) and torch.equal(y2.cpu(), x.reshape(2, 12, 6).transpose(1, 2))


def test_scaled_masked_softmax():
    x, mask = torch.randn(2, 2, 32, 32), torch.rand(2, 1, 32, 32) > 0.7
    logits = torch.where(mask, torch.tensor(-10000.0), x * 0.5)
    expected = logits.exp() / logits.exp().sum(-1, keepdim=True)
    assert_close(torch_npu.npu_scaled_masked_softmax(x.npu(), mask.npu(), 0.5).cpu(), expected)


def test_moe_gating_top_k_softmax():
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0], [0.0, 0.0, 5.0, 1.0], [2.0, 1.0, 0.0, 0.0]])
    finished = torch.tensor([False, True, False])
    y, expert, row = torch_npu.npu_moe_gating_top_k_softmax(x.npu(), finished.npu(), k=2)
    probabilities = x.exp() / x.exp().sum(-1, keepdim=True)
    assert expert.dtype == row.dtype == torch.int32
    assert expert.cpu().tolist() == [[1, 2], [4, 4], [0, 1]]  # ties to the lower expert; a finished row: 4 experts
    assert_close(y.cpu(), torch.stack([probabilities[0, [1, 2]], probabilities[1, [2, 3]], probabilities[2, [0, 1]]]))
    assert row.cpu().tolist() == [[0, 3], [1, 4], [2, 5]]


def test_dynamic_quant_int8_int4_and_groups():
    x = torch.randn(4, 16, dtype=torch.float16)
    y, scale = torch_npu.npu_dynamic_quant(x.npu())
    rowmax = x.float().abs().amax(-1)
    assert_close(scale.cpu(), rowmax / 127)
    assert torch.equal(y.cpu(), torch.round(x.float() / (rowmax / 127)[:, None]).to(torch.int8))
    packed, scale4 = torch_npu.npu_dynamic_quant(x.npu(), dst_type=torch.quint4x2)
    assert packed.dtype == torch.int32 and packed.shape == (4, 2)
    nibbles = packed.cpu().view(torch.uint8).reshape(4, -1, 1)
    low, high = (nibbles & 15).to(torch.int8), (nibbles >> 4).to(torch.int8)
    values = torch.cat([low, high], -1).reshape(4, 16)
    values = torch.where(values > 7, values - 16, values)
    assert torch.equal(values, torch.round(x.float() / (rowmax / 7)[:, None]).to(torch.int8))
    smooth = torch.rand(2, 16, dtype=torch.float16) + 0.5
    group_index = torch.tensor([1, 4], dtype=torch.int32)
    y, scale = torch_npu.npu_dynamic_quant(x.npu(), smooth_scales=smooth.npu(), group_index=group_index.npu())
    smoothed = x.float() * torch.cat([smooth[:1].float(), smooth[1:].float().expand(3, 16)])
    assert_close(scale.cpu(), smoothed.abs().amax(-1) / 127)


@pytest.mark.parametrize("call", [
    lambda t: torch_npu.npu_swiglu(t),
    lambda t: torch_npu.npu_rotary_mul(t, torch.ones_like(t) * 0.3, torch.ones_like(t) * 0.7),
    lambda t: torch_npu.npu_fast_gelu(t),
    lambda t: torch_npu.npu_layer_norm_eval(t, [6]),
    lambda t: torch_npu.npu_scaled_masked_softmax(t, torch.eye(4, 6, dtype=torch.bool, device="npu"), 0.3),
])
def test_gradients_through_the_references(call):
    x = torch.randn(4, 6, dtype=torch.float64, device="npu", requires_grad=True)
    assert torch.autograd.gradcheck(call, (x,))


@pytest.mark.parametrize("op,args", [
    ("npu_swiglu", (torch.randn(4, 6),)),
    ("npu_rotary_mul", (torch.randn(2, 4), torch.randn(2, 4), torch.randn(2, 4))),
    ("npu_moe_gating_top_k_softmax", (torch.randn(3, 8), None, 2)),
    ("npu_dynamic_quant", (torch.randn(3, 8, dtype=torch.float16),)),
])
def test_opcheck(op, args):
    args = tuple(a.npu() if isinstance(a, torch.Tensor) else a for a in args)
    torch.library.opcheck(getattr(torch.ops.npu, op).default, args)


def test_compiled_references_match_eager():
    x = torch.randn(4, 8, device="npu")
    compiled = torch.compile(lambda t: torch_npu.npu_swiglu(torch_npu.npu_fast_gelu(t)), fullgraph=True)
    assert_close(compiled(x).cpu(), torch_npu.npu_swiglu(torch_npu.npu_fast_gelu(x)).cpu())


@pytest.mark.parametrize("call,message", [
    (lambda: torch_npu.npu_swiglu(torch.randn(3, 5).npu()), "npu::npu_swiglu: input's size 5 along dim -1 must be even"),
    (lambda: torch_npu.npu_swiglu(torch.randn(3, 4)), "npu::npu_swiglu: argument 'self' is on cpu"),
    (lambda: torch_npu.npu_rotary_mul(*npu(torch.randn(2, 4), torch.randn(2, 4), torch.randn(2, 4)), "quarter"),
     "The rotary_mode of npu_rotary_mul should be half or interleave, but got quarter"),
    (lambda: torch_npu.npu_scaled_masked_softmax(*npu(torch.randn(2, 4), torch.ones(2, 4))),
     "npu::npu_scaled_masked_softmax: mask must be bool"),
    (lambda: torch_npu.npu_moe_gating_top_k_softmax(torch.randn(3, 4).npu(), k=5),
     "npu::npu_moe_gating_top_k_softmax: k must be in 1..4, got 5"),
    (lambda: torch_npu.npu_dynamic_quant(torch.randn(4, 12).npu(), dst_type=torch.quint4x2),
     "int4 needs x's last dimension to be a multiple of 8"),
    (lambda: torch_npu.npu_layer_norm_eval(torch.randn(4, 6).npu(), [5]), "normalized_shape [5] must be input's last"),
])
def test_calls_the_part_refuses_are_named_and_leave_the_device_usable(call, message):
    with pytest.raises(RuntimeError, match=message.replace("[", r"\[").replace("]", r"\]")):
        call()
    assert torch.ones(3, device="npu").sum().item() == 3


def reference_attention(q, k, v, scale, mask=None):
    """Attention written out over [B, N, S, D] in float64, keys repeated for grouped heads."""
    k = k.repeat_interleave(q.size(1) // k.size(1), 1)
    v = v.repeat_interleave(q.size(1) // v.size(1), 1)
    scores = (q.double() @ k.double().transpose(-1, -2)) * scale
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    return (scores.softmax(-1) @ v.double()).float()


@pytest.mark.parametrize("layout", ["BSH", "SBH", "BSND", "BNSD"])
def test_fusion_attention_layouts_grouped_heads_and_causal(layout):
    B, N, KV, S, D = 2, 4, 2, 6, 8
    q, k, v = torch.randn(B, N, S, D), torch.randn(B, KV, S, D), torch.randn(B, KV, S, D)
    to = {"BNSD": lambda t: t, "BSND": lambda t: t.transpose(1, 2),
          "BSH": lambda t: t.transpose(1, 2).reshape(B, S, -1),
          "SBH": lambda t: t.transpose(1, 2).reshape(B, S, -1).transpose(0, 1)}[layout]
    causal = torch.triu(torch.ones(S, S, dtype=torch.bool), 1)
    out, softmax_max, softmax_sum, softmax_out, *_ = torch_npu.npu_fusion_attention(
        *npu(to(q).contiguous(), to(k).contiguous(), to(v).contiguous()), N, layout,
        atten_mask=causal.npu(), scale=0.3, sparse_mode=0)
    assert_close(out.cpu(), to(reference_attention(q, k, v, 0.3, causal)), atol=1e-5, rtol=1e-5)
    assert softmax_max.shape == softmax_sum.shape == (B, N, S, 8) and softmax_out.numel() == 0
    rightdown = torch_npu.npu_fusion_attention(*npu(to(q).contiguous(), to(k).contiguous(), to(v).contiguous()), N,
                                               layout, atten_mask=torch.ones(2048, 2048, dtype=torch.bool).triu(1).npu(),
                                               scale=0.3, sparse_mode=3)[0]
    assert_close(rightdown.cpu(), out.cpu())


def test_fusion_attention_varlen_tnd_and_its_gradient():
    N, KV, D = 4, 2, 8
    q_lens, kv_lens = [2, 3], [3, 5]
    q, k, v = torch.randn(5, N, D), torch.randn(8, KV, D), torch.randn(8, KV, D)
    leaves = [t.double().npu().requires_grad_() for t in (q, k, v)]
    out = torch_npu.npu_fusion_attention(*leaves, N, "TND", scale=0.5, actual_seq_qlen=[2, 5],
                                         actual_seq_kvlen=[3, 8])[0]
    pieces = []
    for (q0, q1), (k0, k1) in zip([(0, 2), (2, 5)], [(0, 3), (3, 8)]):
        pieces.append(reference_attention(q[q0:q1].transpose(0, 1)[None], k[k0:k1].transpose(0, 1)[None],
                                          v[k0:k1].transpose(0, 1)[None], 0.5)[0].transpose(0, 1))
    assert_close(out.float().cpu(), torch.cat(pieces), atol=1e-5, rtol=1e-5)
    assert torch.autograd.gradcheck(
        lambda *t: torch_npu.npu_fusion_attention(*t, N, "TND", scale=0.5, actual_seq_qlen=[2, 5],
                                                  actual_seq_kvlen=[3, 8])[0], tuple(leaves))


def test_prompt_and_incremental_flash_attention():
    B, N, KV, S, D = 2, 4, 1, 5, 8
    q, k, v = torch.randn(B, N, S, D), torch.randn(B, KV, S, D), torch.randn(B, KV, S, D)
    causal = torch.triu(torch.ones(S, S, dtype=torch.bool), 1)
    out = torch_npu.npu_prompt_flash_attention(*npu(q, k, v), atten_mask=causal.npu(), num_heads=N, scale_value=0.25,
                                               input_layout="BNSD", num_key_value_heads=KV)
    assert_close(out.cpu(), reference_attention(q, k, v, 0.25, causal), atol=1e-5, rtol=1e-5)
    step = torch.randn(B, 1, N * D)  # BSH, one new token per batch over the first 3 and 5 keys
    got = torch_npu.npu_incre_flash_attention(step.npu(), *npu(k.transpose(1, 2).reshape(B, S, -1),
                                              v.transpose(1, 2).reshape(B, S, -1)), num_heads=N, scale_value=0.25,
                                              num_key_value_heads=KV, actual_seq_lengths=[3, 5])
    q_step = step.reshape(B, 1, N, D).transpose(1, 2)
    expected = torch.cat([reference_attention(q_step[:1], k[:1, :, :3], v[:1, :, :3], 0.25),
                          reference_attention(q_step[1:], k[1:], v[1:], 0.25)])
    assert_close(got.cpu(), expected.transpose(1, 2).reshape(B, 1, -1), atol=1e-5, rtol=1e-5)


def test_grouped_matmul_in_lists_and_split_by_group_list():
    x, w = torch.randn(7, 4), torch.randn(3, 4, 5)
    ys = torch_npu.npu_grouped_matmul([x.npu()], [w.npu()], group_list=torch.tensor([2, 2, 7]).npu(),
                                      group_type=0, split_item=0)
    assert [y.shape[0] for y in ys] == [2, 0, 5]
    assert_close(ys[2].cpu(), x[2:] @ w[2], atol=1e-5, rtol=1e-5)
    single = torch_npu.npu_grouped_matmul([x.npu()], [w.npu()], group_list=torch.tensor([2, 0, 5]).npu(),
                                          group_type=0, group_list_type=1, split_item=3)
    assert len(single) == 1 and single[0].shape == (7, 5)
    xs, ws = [torch.randn(3, 4), torch.randn(2, 6)], [torch.randn(4, 5), torch.randn(6, 2)]
    ys = torch_npu.npu_grouped_matmul(npu(*xs), npu(*ws), bias=npu(torch.ones(5), torch.ones(2)), group_type=-1)
    assert_close(ys[1].cpu(), xs[1] @ ws[1] + 1, atol=1e-5, rtol=1e-5)
    with pytest.raises(RuntimeError, match="Requires manual passing group_type"):
        torch_npu.npu_grouped_matmul(npu(*xs), npu(*ws))


def test_moe_routing_round_trip():
    rows, k, H = 4, 2, 3
    x = torch.randn(rows, H)
    experts = torch.tensor([[1, 0], [1, 2], [0, 2], [2, 1]], dtype=torch.int32)
    row_idx = torch.arange(rows * k, dtype=torch.int32).reshape(k, rows).t().contiguous()
    expanded, expanded_row_idx, sorted_experts = torch_npu.npu_moe_init_routing(*npu(x, row_idx, experts), rows)
    assert sorted_experts.cpu().tolist() == [0, 0, 1, 1, 1, 2, 2, 2]
    # expanded row j is token expanded_row's % rows; expanded_row_idx says where each (token, k) went
    for slot in range(rows * k):
        token = slot % rows
        assert torch.equal(expanded[expanded_row_idx[slot]].cpu(), x[token])
    scales = torch.rand(rows, k)
    out = torch_npu.npu_moe_finalize_routing(expanded, None, None, None, scales.npu(), expanded_row_idx, None)
    assert_close(out.cpu(), x * scales.sum(1, keepdim=True), atol=1e-5, rtol=1e-5)


def test_apply_rotary_pos_emb_updates_query_and_key_in_place():
    q, k = torch.randn(2, 5, 4, 8), torch.randn(2, 5, 1, 8)
    cos, sin = torch.randn(2, 5, 1, 8), torch.randn(2, 5, 1, 8)
    q_npu, k_npu = npu(q, k)
    out_q, out_k = torch_npu.npu_apply_rotary_pos_emb(q_npu, k_npu, *npu(cos, sin))
    half = lambda x: torch.cat((-x[..., 4:], x[..., :4]), -1)  # noqa: E731
    assert_close(out_q.cpu(), q * cos + half(q) * sin)
    assert_close(k_npu.cpu(), k * cos + half(k) * sin)  # in place, as on the part


def test_quant_matmul_scales_offsets_and_output_dtypes():
    x1, x2 = torch.randint(-128, 128, (3, 16), dtype=torch.int8), torch.randint(-128, 128, (16, 4), dtype=torch.int8)
    exact = x1.long() @ x2.long()
    scale, pertoken = torch.rand(4) / 1000, torch.rand(3)
    got = torch_npu.npu_quant_matmul(*npu(x1, x2, scale), pertoken_scale=pertoken.npu(), output_dtype=torch.bfloat16)
    assert got.dtype == torch.bfloat16
    assert_close(got.float().cpu(), (exact.double() * scale.double() * pertoken.double()[:, None]).float(),
                 atol=1e-2, rtol=1e-2)
    as_int8 = torch_npu.npu_quant_matmul(*npu(x1, x2, scale), bias=torch.arange(4, dtype=torch.int32).npu())
    expected = torch.round((exact + torch.arange(4)).double() * scale.double()).clamp(-128, 127).to(torch.int8)
    assert torch.equal(as_int8.cpu(), expected)
    with pytest.raises(RuntimeError, match="npu::npu_quant_matmul: x1 and x2 must be int8"):
        torch_npu.npu_quant_matmul(*npu(x1.float(), x2, scale))


X = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4) / 7 - 1


@pytest.mark.parametrize("call,expected", [
    (lambda t: torch_npu.npu_dtype_cast(t, torch.float16), lambda t: t.half()),
    (lambda t: torch_npu._npu_dtype_cast(t, torch.int32), lambda t: t.int()),
    (lambda t: torch_npu.npu_bmmV2(t, t.transpose(1, 2), []), lambda t: torch.bmm(t, t.transpose(1, 2))),
    (lambda t: torch_npu.npu_linear(t, torch.ones(5, 4, device=t.device), None), lambda t: t.sum(-1, keepdim=True).expand(2, 3, 5)),
    (lambda t: torch_npu.npu_transpose(t, (2, 0, 1)), lambda t: t.permute(2, 0, 1)),
    (lambda t: torch_npu.npu_mish(t), lambda t: t * torch.tanh(torch.log1p(torch.exp(t)))),
    (lambda t: torch_npu.npu_silu(t), lambda t: t / (1 + torch.exp(-t))),
    (lambda t: torch_npu.npu_sort_v2(t, 1, True), lambda t: t.flip(1)),
    (lambda t: torch_npu.npu_slice(t, [0, 1, 1], [2, 2, -1]), lambda t: t[:, 1:3, 1:]),
    (lambda t: torch_npu.npu_pad(t, [0, 0, 1, 0, 0, 2]),
     lambda t: torch.cat([torch.zeros(2, 1, 6), torch.cat([t, torch.zeros(2, 3, 2)], -1)], 1)),
    (lambda t: torch_npu.npu_indexing(t, [0, 0, 1], [2, 3, 4], [1, 2, 2]), lambda t: t[:, 0:3:2, 1:4:2]),
    (lambda t: torch_npu.npu_alloc_float_status(t), lambda t: torch.zeros(8)),
])
def test_small_operators(call, expected):
    got = call(X.npu()).cpu()
    assert_close(got, expected(X).to(got.dtype), atol=1e-5, rtol=1e-5)


def test_silu_in_place_writes_self_and_returns_it():
    x = X.npu()
    result = torch_npu.npu_silu_(x)
    assert result is x
    assert_close(x.cpu(), X / (1 + torch.exp(-X)), atol=1e-5, rtol=1e-5)


def test_one_hot_and_dropout_with_add_softmax():
    labels = torch.tensor([0, 3, 1], dtype=torch.int32)
    assert torch.equal(torch_npu.npu_one_hot(labels.npu(), depth=4).cpu(), torch.eye(4, dtype=torch.int32)[[0, 3, 1]])
    x, x1 = torch.rand(2, 2, 4, 8), torch.rand(2, 2, 4, 8)
    mask, softmax, dropped = torch_npu.npu_dropout_with_add_softmax(x.npu(), x1.npu(), 0.5, 0.0, -1)
    assert_close(softmax.cpu(), torch.softmax(x1 + 0.5 * x, -1))
    assert_close(dropped.cpu(), softmax.cpu())
    assert bool(mask.bool().all())
    mask, softmax, dropped = torch_npu.npu_dropout_with_add_softmax(x.npu(), x1.npu(), 0.5, 0.25, -1)
    kept = mask.bool().cpu()
    assert 0.6 < kept.float().mean() < 0.9
    assert_close(dropped.cpu()[kept], softmax.cpu()[kept] / 0.75)
    assert not dropped.cpu()[~kept].any()


def test_moe_token_permute_and_unpermute_round_trip():
    tokens, topk = torch.randn(6, 4), 2
    indices = torch.tensor([[2, 0], [1, 2], [0, 0], [2, 1], [1, 0], [0, 2]])
    permuted, position = torch_npu.npu_moe_token_permute(tokens.npu(), indices.npu())
    order = torch.argsort(indices.reshape(-1), stable=True)
    assert torch.equal(permuted.cpu(), tokens[order // topk])
    assert torch.equal(position.cpu(), torch.argsort(order).int())
    probs = torch.rand(6, topk)
    back = torch_npu.npu_moe_token_unpermute(permuted, position, probs.npu())
    assert_close(back.cpu(), tokens * probs.sum(1, keepdim=True), atol=1e-5, rtol=1e-5)
    dropped, _ = torch_npu.npu_moe_token_permute(tokens.npu(), indices.npu(), num_out_tokens=5)
    assert dropped.shape == (5, 4)


@pytest.mark.parametrize("mode", ["half", "interleave"])
def test_backward_operators_match_autograd_through_their_forwards(mode):
    x = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
    r1, r2 = torch.randn(1, 3, 8, dtype=torch.float64, requires_grad=True), torch.randn(1, 3, 8, dtype=torch.float64,
                                                                                        requires_grad=True)
    grad = torch.randn(2, 3, 8, dtype=torch.float64)
    out = torch_npu.npu_rotary_mul(*[t.npu() for t in (x, r1, r2)], mode)
    expected = torch.autograd.grad(out, (x, r1, r2), grad.npu())
    got = torch_npu.npu_rotary_mul_backward(grad.npu(), x.detach().npu(), r1.detach().npu(), r2.detach().npu(), mode)
    for g, e in zip(got, expected):
        assert_close(g.cpu(), e.cpu())
    y = torch_npu.npu_swiglu(x.npu())
    assert_close(torch_npu.npu_swiglu_backward(grad[..., :4].npu(), x.detach().npu()).cpu(),
                 torch.autograd.grad(y, x, grad[..., :4].npu())[0].cpu())
    z = torch_npu.npu_gelu(x.npu(), approximate="tanh")
    assert_close(torch_npu.npu_gelu_backward(grad.npu(), x.detach().npu(), approximate="tanh").cpu(),
                 torch.autograd.grad(z, x, grad.npu())[0].cpu())


def test_grouped_matmul_along_k():
    x, w = torch.randn(3, 10), torch.randn(10, 4)
    (stacked,) = torch_npu.npu_grouped_matmul([x.npu()], [w.npu()], group_list=torch.tensor([4, 10]).npu(),
                                             group_type=2, split_item=3)
    assert stacked.shape == (2, 3, 4)
    assert_close(stacked.cpu(), torch.stack([x[:, :4] @ w[:4], x[:, 4:] @ w[4:]]), atol=1e-5, rtol=1e-5)


def test_out_takes_a_tuple_for_named_outputs_and_says_how_many():
    """torch_npu's binding convention over an `.out` overload whose outputs have names (here one defined
    for the test: none of op-plugin's is served without its YAML)."""
    library = torch.library.Library("npu", "FRAGMENT")
    library.define("npu_test_pair(Tensor x) -> (Tensor, Tensor)")
    library.define("npu_test_pair.out(Tensor x, *, Tensor(a!) first, Tensor(b!) second) -> (Tensor(a!), Tensor(b!))")

    def pair_out(x, *, first, second):
        first.copy_(x + 1)
        second.copy_(x * 2)
        return first, second

    library.impl("npu_test_pair.out", pair_out, "CompositeExplicitAutograd")
    first, second = torch.empty(3, device="npu"), torch.empty(3, device="npu")
    torch_npu.npu_test_pair(torch.ones(3, device="npu"), out=(first, second))
    assert first.cpu().tolist() == [2.0] * 3 and second.cpu().tolist() == [2.0] * 3
    with pytest.raises(TypeError, match=r"torch_npu.npu_test_pair: out= takes 2 tensors \(first, second\), got 1"):
        torch_npu.npu_test_pair(torch.ones(3, device="npu"), out=(first,))


def test_max_and_min_along_a_dim_give_int32_indices_and_their_gradient():
    x = torch.randn(3, 5, 4, dtype=torch.float64)
    for op, torch_op in ((torch_npu.npu_max, torch.max), (torch_npu.npu_min, torch.min)):
        for keepdim in (False, True):
            values, indices = op(x.npu(), 1, keepdim)
            expected_values, expected_indices = torch_op(x, 1, keepdim)
            assert indices.dtype == torch.int32 and torch.equal(indices.cpu().long(), expected_indices)
            assert_close(values.cpu(), expected_values)
            leaf = x.npu().requires_grad_()
            assert torch.autograd.gradcheck(lambda t: op(t, 1, keepdim)[0], (leaf,))


def test_broadcast_batch_norm_reduce_and_masked_fill_range():
    row = torch.tensor([1, 2, 3])
    broadcast = torch_npu.npu_broadcast(row.npu(), (3, 3))
    assert torch.equal(broadcast.cpu(), row.expand(3, 3)) and broadcast.is_contiguous()
    x = torch.rand(2, 3, 4, 5, dtype=torch.float16) * 9 + 1
    total, squares = torch_npu.batch_norm_reduce(x.npu(), 1e-5)
    assert total.dtype == squares.dtype == torch.float32
    assert_close(total.cpu(), x.float().sum((0, 2, 3)))
    assert_close(squares.cpu(), (x.float() ** 2).sum((0, 2, 3)))
    # Along the last axis, range j fills row j; along another axis, every row; later ranges win.
    x = torch.zeros(3, 2, 6)
    start, end = torch.tensor([[0, 2, 1], [1, 0, 0]], dtype=torch.int32), torch.tensor([[2, 5, 2], [2, 1, 1]], dtype=torch.int32)
    value = torch.tensor([7.0, 9.0])
    expected = x.clone()
    for i in range(2):
        for j in range(3):
            expected[j, :, start[i, j]:end[i, j]] = value[i]
    assert torch.equal(torch_npu.npu_masked_fill_range(*npu(x, start, end, value), 2).cpu(), expected)
    expected = x.clone()
    for i in range(2):
        for j in range(3):
            expected[start[i, j]:end[i, j]] = value[i]
    assert torch.equal(torch_npu.npu_masked_fill_range(*npu(x, start, end, value), 0).cpu(), expected)


def test_bounding_box_encode_and_decode_are_inverses():
    anchors = torch.tensor([[1.0, 2.0, 3.0, 4.0], [3.0, 4.0, 9.0, 6.0], [0.0, 0.0, 20.0, 10.0]])
    truths = torch.tensor([[2.0, 2.5, 5.0, 7.0], [4.0, 3.0, 8.0, 9.0], [1.0, 2.0, 15.0, 12.0]])
    means, stds = [0.1, -0.1, 0.0, 0.05], [0.1, 0.1, 0.2, 0.2]
    deltas = torch_npu.npu_bounding_box_encode(*npu(anchors, truths), *means, *stds)
    # the first box by hand: centres (2, 3) and (3.5, 4.75), sizes counting both edge pixels (3, 3) and (4, 5.5)
    assert_close(deltas.cpu()[0], (torch.tensor([1.5 / 3, 1.75 / 3, torch.log(torch.tensor(4 / 3)).item(),
                                                 torch.log(torch.tensor(5.5 / 3)).item()]) - torch.tensor(means))
                 / torch.tensor(stds))
    boxes = torch_npu.npu_bounding_box_decode(anchors.npu(), deltas, *means, *stds, (100, 100), 16 / 1000)
    assert_close(boxes.cpu(), truths)
    clipped = torch_npu.npu_bounding_box_decode(anchors.npu(), deltas, *means, *stds, (8, 6), 16 / 1000)
    assert_close(clipped.cpu(), torch.stack([truths[:, 0].clamp(0, 5), truths[:, 1].clamp(0, 7),
                                             truths[:, 2].clamp(0, 5), truths[:, 3].clamp(0, 7)], -1))
    with pytest.raises(RuntimeError, match=r"npu::npu_bounding_box_decode: max_shape must be \(height, width\)"):
        torch_npu.npu_bounding_box_decode(anchors.npu(), deltas, *means, *stds, (8,), 0.016)
    with pytest.raises(RuntimeError, match=r"npu::batch_norm_reduce: the dim input tensor must be 2 or more"):
        torch_npu.batch_norm_reduce(torch.ones(3).npu(), 1e-5)
    assert torch.ones(3, device="npu").sum().item() == 3


def test_reduced_precision_is_computed_in_float32_in_an_npu_process():
    from torch_simhpu import _C
    assert _C._reduced_precision_in_float32()
    x = torch.randn(1, 2, 4, 4, 4, dtype=torch.float16)  # (the CPU has no half avg_pool3d)
    assert_close(F.avg_pool3d(x.npu(), 2).cpu(), F.avg_pool3d(x.float(), 2).half(), rtol=0, atol=0)


def test_dropout_with_byte_mask_keeps_its_mask_as_bytes_and_its_gradient_follows_it():
    torch.manual_seed(0)
    x = torch.rand(64, 128).npu().requires_grad_()
    out, mask = torch.ops.npu._dropout_with_byte_mask(x, 0.25)
    assert mask.dtype == torch.uint8 and set(mask.unique().cpu().tolist()) <= {0, 1}
    kept = mask.bool().cpu()
    assert 0.7 < kept.float().mean() < 0.8
    assert_close(out.detach().cpu(), torch.where(kept, x.detach().cpu() / 0.75, torch.zeros(())))
    out.sum().backward()
    assert_close(x.grad.cpu(), kept.float() / 0.75)
    assert_close(torch.ops.npu._dropout_with_byte_mask_backward(torch.ones(64, 128).npu(), mask, 0.25).cpu(),
                 kept.float() / 0.75)
    assert torch.equal(torch_npu.dropout_with_byte_mask(x.detach(), 0.25, False).cpu(), x.detach().cpu())
    with pytest.raises(RuntimeError, match=r"npu::_dropout_with_byte_mask_backward: mask must be uint8"):
        torch.ops.npu._dropout_with_byte_mask_backward(torch.ones(2).npu(), torch.ones(2).npu(), 0.5)


def test_batch_norm_gather_stats_update_from_the_ranks_sums():
    # Two ranks' halves of one batch: their sums and counts give the whole batch's statistics.
    x = torch.randn(6, 3, 4, 4, dtype=torch.float64)
    halves = x[:2], x[2:]
    sums = torch.stack([h.sum((0, 2, 3)) for h in halves])
    squares = torch.stack([(h * h).sum((0, 2, 3)) for h in halves])
    counts = torch.tensor([h.numel() // 3 for h in halves], dtype=torch.float64)
    running_mean, running_var = torch.zeros(3, dtype=torch.float64).npu(), torch.ones(3, dtype=torch.float64).npu()
    mean, invstd = torch_npu.batch_norm_gather_stats_update(*npu(x, sums, squares), running_mean, running_var, 0.1,
                                                             1e-5, counts.npu())
    whole_mean, whole_var = x.mean((0, 2, 3)), x.var((0, 2, 3), unbiased=False)
    assert_close(mean.cpu(), whole_mean)
    assert_close(invstd.cpu(), (whole_var + 1e-5).rsqrt())
    assert_close(running_mean.cpu(), 0.1 * whole_mean)
    assert_close(running_var.cpu(), 0.1 * whole_var + 0.9)
    with pytest.raises(RuntimeError, match=r"npu::batch_norm_gather_stats_update: counts must hold one count per rank \(2\)"):
        torch_npu.batch_norm_gather_stats_update(*npu(x, sums, squares), None, None, 0.1, 1e-5, torch.ones(3).npu())


@pytest.mark.parametrize("nesterov", [False, True])
def test_apply_adam_writes_one_step_into_its_out_tensors_and_returns_them(nesterov):
    torch.manual_seed(0)
    var, m, grad = (torch.randn(3, 5, dtype=torch.float64) for _ in range(3))
    v = torch.rand(3, 5, dtype=torch.float64)
    b1p, b2p, lr, b1, b2, eps = 0.9 ** 3, 0.999 ** 3, 0.01, 0.9, 0.999, 1e-8
    m_t = b1 * m + (1 - b1) * grad
    v_t = b2 * v + (1 - b2) * grad * grad
    step = lr * (1 - b2p) ** 0.5 / (1 - b1p)
    var_t = var - step * (b1 * m_t + (1 - b1) * grad if nesterov else m_t) / (eps + v_t.sqrt())
    out = npu(var, m, v)
    result = torch_npu.npu_apply_adam(b1p, b2p, lr, b1, b2, eps, grad.npu(), False, nesterov, out=tuple(out))
    assert all(r is o for r, o in zip(result, out))  # (Tensor(a!) returns: the out tensors themselves)
    for got, expected in zip(out, (var_t, m_t, v_t)):
        assert_close(got.cpu(), expected)
    with pytest.raises(RuntimeError, match=r"npu::npu_apply_adam: m must have grad's shape \[3, 5\]"):
        torch_npu.npu_apply_adam(b1p, b2p, lr, b1, b2, eps, grad.npu(), False, False,
                                 out=(var.npu(), torch.zeros(2).double().npu(), v.npu()))


@pytest.mark.parametrize("amsgrad,maximize", [(False, False), (False, True), (True, False)])
def test_apply_adam_w_is_torch_optims_adamw_step(amsgrad, maximize):
    """Three steps of torch.optim.AdamW, the third checked against npu_apply_adam_w from the state the
    second left (the powers given are the betas' powers before the step)."""
    torch.manual_seed(0)
    lr, betas, eps, decay = 0.01, (0.9, 0.99), 1e-6, 0.05
    param = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.AdamW([param], lr=lr, betas=betas, eps=eps, weight_decay=decay, amsgrad=amsgrad,
                                  maximize=maximize)
    for step in range(3):
        param.grad = torch.randn_like(param)
        if step == 2:
            state = optimizer.state[param]
            var, m, v = npu(param.detach().clone(), state["exp_avg"].clone(), state["exp_avg_sq"].clone())
            max_v = state["max_exp_avg_sq"].clone().npu() if amsgrad else None
            torch_npu.npu_apply_adam_w(betas[0] ** 2, betas[1] ** 2, lr, decay, *betas, eps, param.grad.npu(), max_v,
                                       amsgrad, maximize, out=(var, m, v))
        optimizer.step()
    assert_close(var.cpu(), param.detach())
    assert_close(m.cpu(), optimizer.state[param]["exp_avg"])
    assert_close(v.cpu(), optimizer.state[param]["exp_avg_sq"])
