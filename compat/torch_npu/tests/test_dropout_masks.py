"""Dropout masks as Ascend's operators keep them (a bit an element, 128-bit aligned), drawn from the device
generator: _npu_dropout_gen_mask at a seed and offset, npu_fusion_attention's dropout (v1 and v3), _npu_dropout
and its backward, and the same masks again when a graph replays."""
import math

import numpy as np
import pytest
import torch
import torch_npu

from torch.testing import assert_close


def unpack(mask: torch.Tensor, count: int) -> torch.Tensor:
    """The bits of a packed mask, as op-plugin's tests read them (numpy, little bit order)."""
    return torch.from_numpy(np.unpackbits(mask.cpu().numpy(), count=count, bitorder="little")).bool()


def attention(q, k, v, scale, kept=None, keep_prob=1.0):
    """Attention over [B, N, S, D] in float64, dropped probabilities zero and the rest scaled by 1 / keep_prob."""
    probs = ((q.double() @ k.double().transpose(-1, -2)) * scale).softmax(-1)
    if kept is not None:
        probs = probs * kept / keep_prob
    return probs @ v.double()


def bsh(t: torch.Tensor) -> torch.Tensor:
    return t.transpose(1, 2).reshape(t.size(0), t.size(2), -1).contiguous()


@pytest.mark.parametrize("numel", [1, 127, 128, 1000])
def test_a_mask_is_a_bit_an_element_in_whole_128_bit_blocks(numel):
    mask = torch_npu._npu_dropout_gen_mask(torch.ones(1, device="npu"), [numel], p=0.0, seed=1, offset=0)
    assert mask.dtype == torch.uint8 and mask.numel() == math.ceil(numel / 128) * 16
    bits = unpack(mask, mask.numel() * 8)
    assert bits[:numel].all() and not bits[numel:].any()  # p = 0 keeps every element; the padding is zero
    dropped = torch_npu._npu_dropout_gen_mask(torch.ones(1, device="npu"), [numel], p=1.0, seed=1, offset=0)
    assert not unpack(dropped, numel).any()


def test_a_mask_is_a_function_of_its_seed_and_offset_and_keeps_one_minus_p():
    x = torch.ones(1, device="npu")
    first = torch_npu._npu_dropout_gen_mask(x, [64, 512], p=0.3, seed=7, offset=0)
    assert torch.equal(first.cpu(), torch_npu._npu_dropout_gen_mask(x, [64, 512], p=0.3, seed=7, offset=0).cpu())
    assert not torch.equal(first.cpu(), torch_npu._npu_dropout_gen_mask(x, [64, 512], p=0.3, seed=8, offset=0).cpu())
    assert not torch.equal(first.cpu(), torch_npu._npu_dropout_gen_mask(x, [64, 512], p=0.3, seed=7, offset=4).cpu())
    kept = unpack(first, 64 * 512).float().mean().item()
    assert 0.68 < kept < 0.72
    with pytest.raises(RuntimeError, match=r"npu::_npu_dropout_gen_mask: dropout probability has to be between 0 "
                                           r"and 1, but got 1.5"):
        torch_npu._npu_dropout_gen_mask(x, [8], p=1.5, seed=0, offset=0)


def test_fusion_attention_drops_with_the_mask_its_seed_and_offset_name():
    B, N, S, D, keep_prob = 1, 2, 16, 8, 0.8
    q, k, v = (torch.randn(B, N, S, D, dtype=torch.float64) for _ in range(3))
    torch.npu.manual_seed(11)
    generator = torch.npu.default_generators[0]
    before = generator.get_offset()
    leaves = [bsh(t).npu().requires_grad_() for t in (q, k, v)]
    out, _, _, _, seed, offset, numels = torch_npu.npu_fusion_attention(*leaves, N, "BSH", scale=0.4,
                                                                        keep_prob=keep_prob)
    assert (seed, offset, numels) == (11, before, B * N * S * S)
    assert generator.get_offset() > before  # the next draw is another mask
    mask = torch_npu._npu_dropout_gen_mask(leaves[0], [numels], p=1 - keep_prob, seed=seed, offset=offset)
    kept = unpack(mask, numels).reshape(B, N, S, S).double()
    assert 0.5 < kept.mean() < 1.0
    qs, ks, vs = (t.clone().requires_grad_() for t in (q, k, v))
    expected = attention(qs, ks, vs, 0.4, kept, keep_prob)
    assert_close(out.cpu(), bsh(expected))
    # The gradient follows the same mask.
    grad = torch.randn_like(expected)
    out.backward(bsh(grad).npu())
    expected.backward(grad)
    for leaf, written in zip(leaves, (qs, ks, vs)):
        assert_close(leaf.grad.cpu(), bsh(written.grad))


def test_fusion_attention_takes_a_dropout_mask_given_and_refuses_one_too_short():
    B, N, S, D = 1, 2, 8, 4
    q, k, v = (torch.randn(B, N, S, D) for _ in range(3))
    numels = B * N * S * S
    mask = torch_npu._npu_dropout_gen_mask(torch.ones(1, device="npu"), [numels], p=0.5, seed=3, offset=0)
    out = torch_npu.npu_fusion_attention(*(bsh(t).npu() for t in (q, k, v)), N, "BSH", scale=0.5, keep_prob=0.5,
                                         dropout_mask=mask, seed=3, offset=0)
    kept = unpack(mask, numels).reshape(B, N, S, S).double()
    assert_close(out[0].cpu(), bsh(attention(q, k, v, 0.5, kept, 0.5)).float())
    assert (out[4], out[5]) == (3, 0)
    with pytest.raises(RuntimeError, match=r"npu::npu_fusion_attention: the dropout mask holds 16 bits, fewer than "
                                           r"the 128 elements it masks"):
        torch_npu.npu_fusion_attention(*(bsh(t).npu() for t in (q, k, v)), N, "BSH", keep_prob=0.5,
                                       dropout_mask=torch.ones(2, dtype=torch.uint8, device="npu"))
    dropped_all = torch_npu.npu_fusion_attention(*(bsh(t).npu() for t in (q, k, v)), N, "BSH", keep_prob=0.0)[0]
    assert not dropped_all.cpu().any()


def test_fusion_attention_v3_takes_host_lengths_and_returns_seed_and_offset_tensors():
    N, D = 2, 4
    q, k, v = torch.randn(5, N, D), torch.randn(7, N, D), torch.randn(7, N, D)
    torch.npu.manual_seed(5)
    out, _, _, _, seed, offset = torch_npu.npu_fusion_attention_v3(
        q.npu(), k.npu(), v.npu(), N, "TND", scale=0.5, keep_prob=0.9,
        actual_seq_qlen=torch.tensor([2, 5]), actual_seq_kvlen=torch.tensor([3, 7]))
    assert seed.device.type == "cpu" and seed.dtype == torch.int64 and seed.tolist() == [5]
    numels = N * (2 * 3 + 3 * 4)  # each batch's [N, Sq, Skv], one after another
    mask = torch_npu._npu_dropout_gen_mask(q.npu(), [numels], p=0.1, seed=5, offset=offset.item())
    kept = unpack(mask, numels).double().split([N * 2 * 3, N * 3 * 4])
    pieces = []
    for (q0, q1), (k0, k1), kept_b in zip([(0, 2), (2, 5)], [(0, 3), (3, 7)], kept):
        pieces.append(attention(q[q0:q1].transpose(0, 1), k[k0:k1].transpose(0, 1), v[k0:k1].transpose(0, 1), 0.5,
                                kept_b.reshape(N, q1 - q0, k1 - k0), 0.9).transpose(0, 1))
    assert_close(out.cpu(), torch.cat(pieces).float())
    with pytest.raises(RuntimeError, match=r"npu::npu_fusion_attention_v3: actual_seq_kvlen must hold integers"):
        torch_npu.npu_fusion_attention_v3(q.npu(), k.npu(), v.npu(), N, "TND", actual_seq_qlen=torch.tensor([2, 5]),
                                          actual_seq_kvlen=torch.tensor([3.0, 7.0]))
    with pytest.raises(RuntimeError, match=r"npu::npu_fusion_attention_v3: argument 'actual_seq_qlen' is on npu:0; "
                                           r"the kernel reads it on the host"):
        torch_npu.npu_fusion_attention_v3(q.npu(), k.npu(), v.npu(), N, "TND", actual_seq_qlen=torch.tensor(
            [2, 5], device="npu"), actual_seq_kvlen=torch.tensor([3, 7]))


def test_a_graph_replay_draws_the_masks_the_generator_gives_then():
    """As a CUDA graph's Philox offset moves at each replay: replayed from the same generator state, the
    captured attention draws the masks the eager calls drew."""
    torch.npu.manual_seed(558)
    q, k, v = (torch.randn(1, 16, 32, device="npu") for _ in range(3))
    state = torch.npu.get_rng_state()

    def call():
        return torch_npu.npu_fusion_attention(q, k, v, 4, "BSH", scale=0.3, keep_prob=0.7)[0]

    eager = [call().clone(), call().clone()]
    assert not torch.equal(eager[0].cpu(), eager[1].cpu())  # two calls, two masks
    graph = torch_npu.npu.NPUGraph()
    with torch_npu.npu.graph(graph):
        captured = call()
    torch.npu.set_rng_state(state)
    for expected in eager:
        graph.replay()
        assert torch.equal(captured.cpu(), expected.cpu())


def test_npu_dropout_its_mask_and_its_backward():
    torch.npu.manual_seed(2)
    x = torch.rand(40, 50).npu().requires_grad_()
    out, mask = torch_npu._npu_dropout(x, 0.25)
    assert mask.dtype == torch.uint8 and mask.numel() == math.ceil(2000 / 128) * 16
    kept = unpack(mask, 2000).reshape(40, 50)
    assert 0.7 < kept.float().mean() < 0.8
    assert_close(out.detach().cpu(), torch.where(kept, x.detach().cpu() / 0.75, torch.zeros(())))
    out.sum().backward()
    assert_close(x.grad.cpu(), kept.float() / 0.75)
    assert_close(torch_npu.npu_dropout_backward(torch.ones(40, 50, device="npu"), mask, 0.25).cpu(), kept.float() / 0.75)
    masked, same_mask = torch_npu.npu_dropout_do_mask(x.detach(), mask, 0.25)
    assert_close(masked.cpu(), out.detach().cpu())
    assert torch.equal(same_mask.cpu(), mask.cpu())
    assert torch_npu.npu_dropout_gen_mask([300], 0.5, device="npu").numel() == 48
