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


def test_unpermute_keeps_for_its_backward_what_ascends_does_and_its_gradient_is_right():
    tokens, indices = torch.randn(6, 4, dtype=torch.float64), torch.tensor([[2, 0], [1, 2], [0, 0], [2, 1], [1, 0], [0, 2]])
    permuted, position = torch_npu.npu_moe_token_permute(tokens.npu(), indices.npu())
    permuted = permuted.detach().requires_grad_()
    probs = torch.rand(6, 2, dtype=torch.float64, device="npu", requires_grad=True)

    def saved_storages(probs_given):
        storages = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: storages.append(t.untyped_storage().data_ptr()) or t,
                                                      lambda t: t):
            torch_npu.npu_moe_token_unpermute(permuted, position, probs_given)
        return storages

    # With probs, each one's gradient needs the other: both are kept, not copies gathered from them.
    with_probs = saved_storages(probs)
    assert permuted.untyped_storage().data_ptr() in with_probs and probs.untyped_storage().data_ptr() in with_probs
    assert permuted.untyped_storage().data_ptr() not in saved_storages(None)
    dropped = torch.cat([position[:-1], torch.tensor([12], dtype=position.dtype, device="npu")])  # past the rows
    assert torch.autograd.gradcheck(lambda t, p: torch_npu.npu_moe_token_unpermute(t, dropped, p), (permuted, probs))


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
                 / torch.tensor(stds), atol=0.01, rtol=2e-3)  # at the kernel's half precision
    # Ascend's documented example: 13.3281, half's 4/3 / 0.1, in a float32 result
    example = torch_npu.npu_bounding_box_encode(torch.tensor([[1.0, 2.0, 3.0, 4.0]]).npu(),
                                                torch.tensor([[5.0, 6.0, 7.0, 8.0]]).npu(), 0, 0, 0, 0, 0.1, 0.1, 0.2, 0.2)
    assert example.dtype == torch.float32 and example.cpu()[0, 0].item() == 13.328125
    boxes = torch_npu.npu_bounding_box_decode(anchors.npu(), deltas, *means, *stds, (100, 100), 16 / 1000)
    assert_close(boxes.cpu(), truths, atol=0.02, rtol=0)  # (the deltas' half precision, nothing more)
    clipped = torch_npu.npu_bounding_box_decode(anchors.npu(), deltas, *means, *stds, (8, 6), 16 / 1000)
    assert_close(clipped.cpu(), torch.stack([truths[:, 0].clamp(0, 5), truths[:, 1].clamp(0, 7),
                                             truths[:, 2].clamp(0, 5), truths[:, 3].clamp(0, 7)], -1),
                 atol=0.02, rtol=0)
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


def test_iou_widens_each_area_by_a_hundredth_a_side_in_half_precision():
    boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [10.0, 10.0, 20.0, 20.0]])
    truths = torch.tensor([[0.0, 0.0, 10.0, 20.0], [10.0, 10.0, 20.0, 20.0], [30.0, 30.0, 31.0, 31.0]])
    area = lambda w, h: (w + 0.01) * (h + 0.01)  # noqa: E731
    iou = torch_npu.npu_iou(*npu(boxes, truths), 0).cpu()
    iof = torch_npu.npu_ptiou(*npu(boxes, truths), 1).cpu()
    assert iou.shape == (3, 2) and iou.dtype == torch.float32
    assert_close(iou[0, 0], torch.tensor(100 / (area(10, 10) + area(10, 20) - 100)).half().float())
    assert_close(iof[0, 0], torch.tensor(100 / area(10, 20)).half().float())
    assert_close(iou[1, 1], torch.tensor(100 / (2 * area(10, 10) - 100)).half().float())
    assert iou[2].eq(0).all() and iou[1, 0] == 0


def _overlap_by_hand(kind, a, b):
    """One pair of (x, y, w, h) boxes, as the formulas Ascend documents write it, with plain floats."""
    import math
    eps = 1e-9
    ax1, ay1, ax2, ay2 = a[0] - a[2] / 2, a[1] - a[3] / 2, a[0] + a[2] / 2, a[1] + a[3] / 2
    bx1, by1, bx2, by2 = b[0] - b[2] / 2, b[1] - b[3] / 2, b[0] + b[2] / 2, b[1] + b[3] / 2
    inter = max(0.0, min(ax2, bx2) - max(ax1, bx1)) * max(0.0, min(ay2, by2) - max(ay1, by1))
    cw, ch = max(ax2, bx2) - min(ax1, bx1), max(ay2, by2) - min(ay1, by1)
    if kind == "giou":
        union = a[2] * a[3] + b[2] * b[3] - inter
        return inter / union - (cw * ch - union) / (cw * ch)
    union = a[2] * (a[3] + eps) + b[2] * (b[3] + eps) - inter + eps
    iou = inter / union
    distance = ((a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2) / (cw ** 2 + ch ** 2 + eps)
    if kind == "diou":
        return iou - distance
    v = 4 / math.pi ** 2 * (math.atan(b[2] / (b[3] + eps)) - math.atan(a[2] / (a[3] + eps))) ** 2
    return iou - distance - v * v / (1 + eps - iou + v)


BOXES = torch.tensor([[1.0, 2.0, 3.0, 2.5], [1.5, 2.0, 9.0, 0.5], [0.5, 0.6, 1.0, 1.2]]).t()  # (4, n) of x, y, w, h
TRUTHS = torch.tensor([[1.2, 2.2, 2.0, 3.0], [5.0, 2.0, 2.0, 2.0], [3.0, 3.0, 1.0, 1.0]]).t()


@pytest.mark.parametrize("kind", ["giou", "diou", "ciou"])
def test_generalised_distance_and_complete_iou_of_aligned_boxes(kind):
    expected = torch.tensor([_overlap_by_hand(kind, BOXES[:, i].tolist(), TRUTHS[:, i].tolist()) for i in range(3)])
    got = getattr(torch_npu, f"npu_{kind}")(*npu(BOXES, TRUTHS), True, False, 0).cpu()
    assert got.shape == ((3, 1) if kind == "giou" else (1, 3))
    assert_close(got.reshape(-1), expected)
    assert_close(getattr(torch_npu, f"npu_{kind}")(*npu(BOXES.half(), TRUTHS.half()), True, False, 0).cpu(),
                 got.half(), atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("kind", ["diou", "ciou"])
def test_crossed_overlaps_pair_every_ground_truth_with_every_box(kind):
    got = getattr(torch_npu, f"npu_{kind}")(*npu(BOXES, TRUTHS[:, :2]), True, True, 0).cpu()
    assert got.shape == (2, 3)
    for j in range(2):
        for i in range(3):
            assert_close(got[j, i].item(), _overlap_by_hand(kind, BOXES[:, i].tolist(), TRUTHS[:, j].tolist()),
                         atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("kind", ["giou", "diou", "ciou"])
def test_overlap_gradients_and_their_backward_entries(kind):
    boxes, truths = (t.double().npu().requires_grad_() for t in (BOXES, TRUTHS))
    forward = getattr(torch_npu, f"npu_{kind}")
    assert torch.autograd.gradcheck(lambda a, b: forward(a, b, True, False, 0), (boxes, truths))
    out = forward(boxes, truths, True, False, 0)
    grads = torch.autograd.grad(out, (boxes, truths), torch.ones_like(out))
    backward = getattr(torch_npu, f"npu_{kind}_backward")
    extra = (None,) if kind == "ciou" else ()
    entry = backward(torch.ones_like(out), boxes.detach(), truths.detach(), *extra, True, False, 0)
    for a, b in zip(grads, entry):
        assert_close(a.cpu(), b.cpu())


def test_roi_align_as_documented_and_its_gradient_entry():
    image = torch.arange(1.0, 37.0).reshape(1, 1, 6, 6)
    rois = torch.tensor([[0, -2.0, -2.0, 22.0, 22.0]])
    out = torch_npu.npu_roi_align(*npu(image, rois), 0.25, 3, 3, 2, 0)
    assert_close(out.cpu(), torch.tensor([[[[4.5, 6.5, 8.5], [16.5, 18.5, 20.5], [28.5, 30.5, 32.5]]]]))
    # roi_end_mode 1 (the gradient's default) counts the end pixel: (22 + 1) * 0.25, the first sample
    # at -0.5 + 6.25 / 3 / 4 = 0.0208 of pixel 0, which takes (1 - 0.0208)^2 of the bin's quarter
    grad = torch_npu.npu_roi_alignbk(out, rois.npu(), [1, 1, 6, 6], 3, 3, 0.25, 2).cpu()
    first = -0.5 + 6.25 / 3 / 4
    assert_close(grad[0, 0, 0, 0], torch.tensor(4.5 / 4 * (1 - first) ** 2))
    x = image.double().npu().requires_grad_()
    assert torch.autograd.gradcheck(lambda t: torch_npu.npu_roi_align(t, rois.double().npu(), 0.25, 3, 3, 2, 1), (x,))


def test_ps_roi_pooling_averages_each_bins_own_channel():
    image = torch.randn(1, 2 * 4, 4, 4)  # output_dim 2, group 2
    rois = torch.tensor([[[0.0], [0.0], [0.0], [3.0], [3.0]]])  # the whole map
    out = torch_npu.npu_ps_roi_pooling(*npu(image, rois), 1.0, 2, 2).cpu()
    channels = image[0].reshape(2, 2, 2, 4, 4)
    for c in range(2):
        for i in range(2):
            for j in range(2):
                assert_close(out[0, c, i, j], channels[c, i, j, 2 * i:2 * i + 2, 2 * j:2 * j + 2].mean())
    x = image.double().npu().requires_grad_()
    assert torch.autograd.gradcheck(lambda t: torch_npu.npu_ps_roi_pooling(t, rois.double().npu(), 1.0, 2, 2), (x,))


def test_detection_helpers_as_their_formulas_say():
    boxes = torch.tensor([[0.0, 0.0, 3.0, 3.0], [9.0, 5.0, 11.0, 7.0], [-40.0, 0.0, -30.0, 2.0]])
    flags = torch_npu.npu_anchor_response_flags(boxes.npu(), [4, 6], [2, 2], 2).cpu()
    expected = torch.zeros(4 * 6, dtype=torch.uint8)
    expected[0 * 6 + 0] = expected[3 * 6 + 5] = 1  # centres (1.5, 1.5) and (10, 6); the third is off the map
    assert torch.equal(flags, expected.repeat_interleave(2))

    anchors = torch.tensor([[0.0, 0.0, 4.0, 2.0]])
    truths = torch.tensor([[1.0, 0.5, 3.0, 6.5]])
    encoded = torch_npu.npu_yolo_boxes_encode(*npu(anchors, truths), torch.tensor([8], dtype=torch.int32).npu()).cpu()
    assert_close(encoded, torch.tensor([[0.5, (3.5 - 1.0) / 8 + 0.5, torch.log(torch.tensor(0.5)).item(),
                                         torch.log(torch.tensor(3.0)).item()]]))

    sums = torch_npu.npu_stride_add(*npu(torch.ones(1, 3, 1, 1, 2), torch.full((1, 2, 1, 1, 2), 2.0)), 1, 0, 2).cpu()
    assert sums.shape == (1, 32, 1, 1, 2) and sums[:, :2].eq(3).all() and sums[:, 2:].eq(0).all()

    logits, labels = torch.tensor([[1.0, 2.0, 3.0, 4.0]]), torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    loss = torch_npu.npu_softmax_cross_entropy_with_logits(*npu(logits, labels)).cpu()
    assert_close(loss, torch.tensor([14.4019]), atol=1e-4, rtol=1e-4)  # Ascend's documented example
    # the backward is TensorFlow's backprop, softmax - labels: the gradient where labels are a distribution
    x, distribution = logits.double().npu().requires_grad_(), (labels / labels.sum()).double().npu()
    (auto,) = torch.autograd.grad(torch_npu.npu_softmax_cross_entropy_with_logits(x, distribution).sum(), x)
    assert_close(torch_npu.npu_softmax_cross_entropy_with_logits_backward(
        torch.ones(1, dtype=torch.float64).npu(), x.detach(), distribution), auto)


def test_grid_assign_positive_assigns_the_best_ground_truths():
    assigned = torch.tensor([0.03, 0.4, 0.26, 0.37])
    overlaps = torch.tensor([[0.06, 0.70, 0.05, 0.47], [0.67, 0.33, 0.78, 0.56]])
    flags = torch.tensor([1, 1, 1, 0], dtype=torch.uint8)
    max_overlaps = torch.tensor([0.67, 0.70, 0.78, 0.56])
    argmax = torch.tensor([1, 0, 1, 1], dtype=torch.int32)
    gt_max = torch.tensor([0.70, 0.78])
    gt_argmax = torch.tensor([1, 2], dtype=torch.int32)
    out = torch_npu.npu_grid_assign_positive(*npu(assigned, overlaps, flags, max_overlaps, argmax, gt_max, gt_argmax),
                                             2, 0.5, 0.0, True).cpu()
    # boxes 0-2 are responsible and over 0.5: their best ground truth (+1); box 3 is not responsible
    assert_close(out, torch.tensor([2.0, 1.0, 2.0, 0.37]))


def test_sign_bits_pack_and_random_choice_with_mask():
    import numpy as np
    x = torch.tensor([-1.0, 2.0, 0.0, -3.0, 4.0, 5.0, -6.0, 7.0, 8.0, -9.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    packed = torch_npu.npu_sign_bits_pack(x.npu(), 2).cpu()
    assert torch.equal(packed, torch.from_numpy(np.packbits((x >= 0).numpy(), bitorder="little")).reshape(2, 1))
    with pytest.raises(RuntimeError, match="npu::npu_sign_bits_pack: the 2 packed bytes must divide by size 3"):
        torch_npu.npu_sign_bits_pack(x.npu(), 3)

    mask = torch.tensor([[True, False, True], [False, True, False]])
    indices, valid = torch_npu.npu_random_choice_with_mask(mask.npu(), 5, 1, 2)
    assert indices.dtype == torch.int32 and indices.shape == (5, 2)
    assert valid.cpu().tolist() == [True, True, True, False, False]
    assert indices.cpu()[:3].tolist() == [[0, 0], [0, 2], [1, 1]]
    chosen, _ = torch_npu.npu_random_choice_with_mask(mask.npu(), 2, 1, 2)
    again, _ = torch_npu.npu_random_choice_with_mask(mask.npu(), 2, 1, 2)
    assert torch.equal(chosen.cpu(), again.cpu()) and all(mask[tuple(i)] for i in chosen.cpu().tolist())


@pytest.mark.parametrize("max_grad_norm,adam_mode", [(-1.0, 0), (0.5, 0), (-1.0, 1)])
def test_bert_apply_adam_is_adam_without_bias_correction(max_grad_norm, adam_mode):
    var, m, v, grad = torch.randn(4, 8), torch.randn(4, 8) * 0.1, torch.rand(4, 8) * 0.1, torch.randn(4, 8)
    lr, beta1, beta2, eps, global_norm, decay, step = 0.01, 0.9, 0.99, 1e-6, 2.0, 0.1, 0.003
    outs = tuple(t.clone().npu() for t in (var, m, v))
    result = torch_npu.npu_bert_apply_adam(lr, beta1, beta2, eps, grad.npu(), max_grad_norm, global_norm, decay,
                                           step, adam_mode, out=outs)
    assert all(r is o for r, o in zip(result, outs))
    g = grad * (max_grad_norm / global_norm) if max_grad_norm > 0 else grad
    m_t, v_t = beta1 * m + (1 - beta1) * g, beta2 * v + (1 - beta2) * g * g
    rate = step if adam_mode == 1 else lr
    for got, want in zip(outs, (var - rate * (m_t / (v_t.sqrt() + eps) + decay * var), m_t, v_t)):
        assert_close(got.cpu(), want)


def test_renorm_backward_is_renorms_gradient():
    x = torch.randn(4, 6, dtype=torch.float64).npu().requires_grad_()
    grad = torch.randn(4, 6, dtype=torch.float64).npu()
    (auto,) = torch.autograd.grad(torch.renorm(x, 1.5, 0, 0.8), x, grad)
    assert_close(torch_npu.npu_renorm_backward(grad, x.detach(), 1.5, 0, 0.8), auto)
    half = torch_npu.npu_renorm_backward(grad.half(), x.detach().half(), 2, 1, 0.8)
    assert half.dtype == torch.float16


@pytest.mark.parametrize("call,message", [
    (lambda: torch_npu.npu_giou(*npu(BOXES, TRUTHS), True, True, 0), "npu::npu_giou: only trans=True, is_cross=False"),
    (lambda: torch_npu.npu_diou(*npu(BOXES, TRUTHS), True, False, 1), "npu::npu_diou: mode 1 \\(iof\\) is not simulated"),
    (lambda: torch_npu.npu_ciou(*npu(BOXES, TRUTHS[:, :2]), True, False, 0), "n 3 and m 2 must be equal"),
    (lambda: torch_npu.npu_iou(*npu(torch.ones(2, 3), torch.ones(2, 4))), "npu::npu_iou: bboxes and gtboxes must be"),
    (lambda: torch_npu.npu_roi_align(*npu(torch.ones(1, 1, 4, 4), torch.ones(1, 4)), 1.0, 2, 2, 2, 0),
     "npu::npu_roi_align: rois must be \\(K, 5\\)"),
    (lambda: torch_npu.npu_yolo_boxes_encode(*npu(torch.ones(2, 4), torch.ones(2, 4), torch.ones(2, dtype=torch.int64))),
     "npu::npu_yolo_boxes_encode: stride must be int32"),
    (lambda: torch_npu.npu_random_choice_with_mask(torch.ones(3).npu(), 2), "npu::npu_random_choice_with_mask: x must be bool"),
    (lambda: torch_npu.npu_stride_add(*npu(torch.ones(1, 2, 1, 1, 1), torch.ones(1, 2, 1, 1, 1)), 1, 0, 2),
     "npu::npu_stride_add: c1_len 2 from offsets 1 and 0 must fit C1 2 and 2"),
])
def test_overlap_and_detection_operators_refuse_what_the_part_refuses(call, message):
    with pytest.raises(RuntimeError, match=message):
        call()
    assert torch.ones(3, device="npu").sum().item() == 3


def test_a_reference_refuses_tensors_on_two_devices():
    if torch.npu.device_count() < 2:
        pytest.skip("one device")
    image = torch.ones(1, 1, 4, 4, device="npu:0")
    rois = torch.tensor([[0, 0.0, 0.0, 3.0, 3.0]], device="npu:1")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device, but found at least two "
                                           "devices, npu:0 and npu:1! \\(npu::npu_roi_align, argument 'rois'\\)"):
        torch_npu.npu_roi_align(image, rois, 1.0, 2, 2, 2, 0)
    assert torch.ones(3, device="npu:1").sum().item() == 3


def test_non_maximum_suppressions_keep_the_best_of_each_overlapping_group():
    boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 11.0, 11.0], [20.0, 20.0, 30.0, 30.0],
                          [0.0, 0.0, 10.0, 9.0], [50.0, 50.0, 60.0, 60.0]])
    scores = torch.tensor([0.9, 0.95, 0.5, 0.3, 0.1])
    # box 1 (0.95) suppresses 0 (IoU 81/119) and 3; box 2 survives; box 4 scores under the threshold
    indices, count = torch_npu.npu_nms_v4(*npu(boxes, scores), 4, torch.tensor(0.5).npu(), torch.tensor(0.2).npu())
    assert indices.dtype == torch.int32 and indices.cpu().tolist() == [1, 2, 0, 0] and count.item() == 2

    rows = torch.cat([boxes, scores[:, None]], 1)
    ranked, places, mask = torch_npu.npu_nms_with_mask(rows.npu(), 0.5)
    assert places.cpu().tolist() == [1, 0, 2, 3, 4] and torch.equal(ranked.cpu(), rows[[1, 0, 2, 3, 4]])
    assert mask.dtype == torch.uint8 and mask.cpu().tolist() == [1, 0, 1, 0, 1]

    per_class = torch.stack([scores, scores.flip(0)], -1)[None]  # (1, 5, 2): class 1 ranks the boxes the other way
    nmsed_boxes, nmsed_scores, classes, num = torch_npu.npu_batch_nms(
        boxes[None, :, None].npu(), per_class.npu(), 0.2, 0.5, 2, 3)
    # class 0 keeps boxes 1 (0.95) and 2 (0.5); class 1 (scores reversed) keeps 3 (0.95) and 4 (0.9), its
    # third, box 2, past max_size_per_class: the best three of the four
    assert num.cpu().tolist() == [3]
    assert_close(nmsed_scores.cpu(), torch.tensor([[0.95, 0.95, 0.9]]))
    assert classes.cpu()[0].tolist() == [0.0, 1.0, 1.0]
    assert torch.equal(nmsed_boxes.cpu()[0], boxes[[1, 3, 4]])


def test_rotated_overlaps_iou_and_their_suppression():
    import math
    square = [0.0, 0.0, 2.0, 2.0, 0.0]
    turned = [0.0, 0.0, 2.0, 2.0, 45.0]  # the octagon they share: 8 (sqrt 2 - 1)
    apart = [10.0, 0.0, 2.0, 2.0, 30.0]
    shifted = [1.0, 0.0, 2.0, 2.0, 0.0]  # half the square
    boxes = torch.tensor([[square, turned]])
    queries = torch.tensor([[turned, apart, shifted]])
    overlaps = torch_npu.npu_rotated_overlaps(*npu(boxes, queries)).cpu()
    octagon = 8 * (math.sqrt(2) - 1)
    assert_close(overlaps, torch.tensor([[[octagon, 0.0, 2.0], [4.0, 0.0, overlaps[0, 1, 2].item()]]]))
    iou = torch_npu.npu_rotated_iou(*npu(boxes, queries)).cpu()
    assert iou.shape == (1, 2, 3)
    assert_close(iou[0, 0], torch.tensor([octagon / (8 - octagon), 0.0, 2.0 / 6.0]))
    # x1, y1, x2, y2 with the angle the other way (trans): the same two squares
    corners = torch.tensor([[[-1.0, -1.0, 1.0, 1.0, -45.0]]])
    assert_close(torch_npu.npu_rotated_overlaps(corners.npu(), torch.tensor([[[-1.0, -1.0, 1.0, 1.0, 0.0]]]).npu(),
                                                True).cpu(), torch.tensor([[[octagon]]]))

    dets = torch.tensor([square, turned, apart, shifted])
    scores = torch.tensor([0.9, 0.8, 0.7, 0.6])
    kept, count = torch_npu.npu_nms_rotated(*npu(dets, scores), 0.5)
    # the turned square overlaps the square by 0.707 > 0.5; the shifted one by 1/3; apart by nothing
    assert kept.dtype == torch.int32 and kept.cpu().tolist() == [0, 2, 3] and count.cpu().tolist() == [3]
    with pytest.raises(RuntimeError, match="npu::npu_rotated_iou: mode 1 \\(iof\\) is not simulated"):
        torch_npu.npu_rotated_iou(*npu(boxes, queries), False, 1)


def test_losses_take_int32_class_targets_as_ascends_kernels_do():
    logits = torch.randn(5, 4)
    target = torch.tensor([0, 3, 1, 2, 3])
    expected = F.cross_entropy(logits, target)
    assert_close(F.cross_entropy(logits.npu(), target.int().npu()).cpu(), expected)


def test_one_hot_takes_int32_indices_in_their_dtype_as_ascends_kernel_does():
    index = torch.tensor([[0, 3], [2, 1]])
    expected = F.one_hot(index, 5)
    got = F.one_hot(index.int().npu(), 5)
    assert got.dtype == torch.int32 and torch.equal(got.cpu(), expected.int())
    assert torch.equal(F.one_hot(index.npu()).cpu(), F.one_hot(index))  # num_classes read from the data
    with pytest.raises(RuntimeError, match="one_hot is only applicable to index tensor of type LongTensor"):
        F.one_hot(torch.ones(3).npu(), 3)
    compiled = torch.compile(lambda t: F.one_hot(t, 7), backend="aot_eager")
    assert compiled(index.npu()).shape == (2, 2, 7)


def test_renorm_as_the_cpus_and_with_p_zero_as_ascends_kernel_takes_it():
    x = torch.tensor([[0.0, 3.0, -4.0], [0.5, 0.0, 0.0], [1.0, 1.0, 1.0]])
    for p, dim, maxnorm in ((2, 0, 1.0), (1, 1, 2.0), (3, -1, 0.5)):
        assert_close(torch.renorm(x.npu(), p, dim, maxnorm).cpu(), torch.renorm(x, p, dim, maxnorm))
        out = torch.empty(3, 3).npu()
        torch.renorm(x.npu(), p, dim, maxnorm, out=out)
        assert_close(out.cpu(), torch.renorm(x, p, dim, maxnorm))
    # p = 0: a row's norm is its count of nonzero elements (2, 1 and 3 here), scaled down to maxnorm 1.5
    in_place = x.npu().renorm_(0, 0, 1.5)
    counts = torch.tensor([[2.0], [1.0], [3.0]])
    assert_close(in_place.cpu(), x * torch.where(counts > 1.5, 1.5 / (counts + 1e-7), torch.ones(1)))
    half = x.half()
    assert_close(torch.renorm(half.npu(), 2, 0, 1.0).cpu(), torch.renorm(x, 2, 0, 1.0).half(), atol=1e-3, rtol=1e-3)
    with pytest.raises(RuntimeError, match="renorm: non-positive-norm not supported"):
        torch.renorm(x.npu(), -1, 0, 1.0)
    assert torch.ones(3, device="npu").sum().item() == 3
