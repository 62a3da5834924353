"""Ascend's quantisation operators: npu_trans_quant_param's int64 scales, int4 tensors (eight nibbles to an int32)
from npu_quantize and npu_convert_weight_to_int4pack, and the quantised matmuls that read them; each against the
formula Ascend documents, written here."""
import struct

import pytest
import torch
import torch_npu

from torch.testing import assert_close


def float_bits(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


def nibbles(packed: torch.Tensor) -> torch.Tensor:
    """int4 values of int32s, the first in the low bits, written out one shift at a time."""
    words = packed.cpu().long() & 0xFFFFFFFF
    values = torch.stack([(words >> (4 * i)) & 15 for i in range(8)], -1)
    return torch.where(values > 7, values - 16, values).flatten(-2)


def test_trans_quant_param_packs_scale_and_offset_as_documented():
    scale, offset = torch.tensor([0.1, -2.7, 3.0e-5]), torch.tensor([-3.4, 300.0, 7.5])
    packed = torch_npu.npu_trans_quant_param(scale.npu()).cpu()
    assert packed.dtype == torch.int64
    assert packed.tolist() == [(float_bits(s) & 0xFFFFE000) | (1 << 46) for s in scale.tolist()]
    with_offset = torch_npu.npu_trans_quant_param(scale.npu(), offset.npu()).cpu().tolist()
    offsets = [-3, 255, 8]  # rounded (half to even) and clamped to [-256, 255]
    assert with_offset == [(float_bits(s) & 0xFFFFE000) | (1 << 46) | ((o & 0x1FF) << 37)
                           for s, o in zip(scale.tolist(), offsets)]
    rounded = torch_npu.npu_trans_quant_param(torch.tensor([1.0 + 2 ** -10 + 2 ** -11]).npu(), round_mode=1).item()
    assert rounded & 0xFFFFFFFF == float_bits(1.0 + 2 ** -9)  # to the nearest FP19, not cut
    with pytest.raises(RuntimeError, match="npu::npu_trans_quant_param: scale must be float32, got torch.float16"):
        torch_npu.npu_trans_quant_param(scale.half().npu())


def test_a8w8_with_an_int64_scale_uses_its_fp19_value_and_offset():
    x1, x2 = torch.randint(-5, 5, (6, 32), dtype=torch.int8), torch.randint(-5, 5, (32, 10), dtype=torch.int8)
    scale, offset = torch.rand(10) / 10, torch.full((10,), 4.0)
    packed = torch_npu.npu_trans_quant_param(scale.npu(), offset.npu())
    fp19 = torch.tensor([struct.unpack("<f", struct.pack("<I", float_bits(s) & 0xFFFFE000))[0] for s in scale.tolist()])
    exact = (x1.long() @ x2.long()).double()
    as_int8 = torch_npu.npu_quant_matmul(x1.npu(), x2.npu(), packed)
    assert torch.equal(as_int8.cpu(), torch.round(exact * fp19.double() + 4).clamp(-128, 127).to(torch.int8))
    as_half = torch_npu.npu_quant_matmul(x1.npu(), x2.npu(), torch_npu.npu_trans_quant_param(scale.npu()),
                                         output_dtype=torch.float16)
    assert_close(as_half.cpu(), (exact * fp19.double()).half())


def test_quantize_rounds_along_its_axis_into_each_dtype():
    x = torch.tensor([[0.4, 1.6, -2.5], [10.0, -300.0, 3.2]])
    scales, zero_points = torch.tensor([0.5, 2.0, 1.0]), torch.tensor([1, 0, -1], dtype=torch.int32)
    as_int8 = torch_npu.npu_quantize(x.npu(), scales.npu(), zero_points.npu(), torch.qint8, -1)
    assert as_int8.dtype == torch.int8
    assert as_int8.cpu().tolist() == [[2, 1, -4], [21, -128, 2]]  # -3.5 rounds to even
    as_uint8 = torch_npu.npu_quantize(x.npu(), scales.npu(), None, torch.quint8, -1)
    assert as_uint8.dtype == torch.uint8 and as_uint8.cpu().tolist() == [[1, 1, 0], [20, 0, 3]]
    per_row = torch_npu.npu_quantize(x.npu(), torch.tensor([1.0, 10.0]).npu(), None, torch.int32, 0)
    assert per_row.dtype == torch.int32 and per_row.cpu().tolist() == [[0, 2, -2], [1, -30, 0]]
    with pytest.raises(RuntimeError, match=r"npu::npu_quantize: dtype 16 is not one of"):
        torch_npu.npu_quantize(x.npu(), scales.npu(), None, torch.quint4x2, -1, True)


def test_int4_tensors_hold_eight_nibbles_an_int32_first_in_the_low_bits():
    values = torch.randint(-8, 8, (3, 16), dtype=torch.int32)
    packed = torch_npu.npu_quantize(values.float().npu(), torch.ones(1).npu(), None, torch.quint4x2, -1, False)
    assert packed.dtype == torch.int32 and packed.shape == (3, 2)
    assert torch.equal(nibbles(packed), values.long())
    assert torch.equal(torch_npu.npu_convert_weight_to_int4pack(values.npu()).cpu(), packed.cpu())
    with pytest.raises(RuntimeError, match=r"npu::npu_convert_weight_to_int4pack: weight's last dimension \(12\) "
                                           r"must be a multiple of 8"):
        torch_npu.npu_convert_weight_to_int4pack(torch.zeros(2, 12, dtype=torch.int32).npu())


def int4(values: torch.Tensor) -> torch.Tensor:
    return torch_npu.npu_convert_weight_to_int4pack(values.int().npu())


def test_a4w4_multiplies_the_nibbles_with_x2_packed_either_way():
    x1, x2 = torch.randint(-8, 8, (5, 32)), torch.randint(-8, 8, (32, 16))
    scale = torch.rand(1)
    expected = ((x1 @ x2).double() * scale.double()).half()
    got = torch_npu.npu_quant_matmul(int4(x1), int4(x2), scale.npu(), output_dtype=torch.float16)
    assert_close(got.cpu(), expected)
    # x2 as the transpose of a contiguous (n, k / 8): its nibbles run along k.
    transposed = int4(x2.t().contiguous()).t()
    assert_close(torch_npu.npu_quant_matmul(int4(x1), transposed, scale.npu(), output_dtype=torch.float16).cpu(),
                 expected)


def test_a8w4_multiplies_x_minus_8_by_each_groups_scaled_weights():
    M, K, N, group = 3, 64, 16, 16
    x1 = torch.randint(-128, 128, (M, K), dtype=torch.int8)
    weight = torch.randint(-8, 8, (K, N))
    scale, offset, token_scale = torch.rand(K // group, N), torch.randn(N), torch.rand(M, 1)
    got = torch_npu.npu_quant_matmul(x1.npu(), int4(weight), torch_npu.npu_trans_quant_param(scale.reshape(-1).npu())
                                     .reshape(K // group, N), offset=offset.npu(), pertoken_scale=token_scale.npu(),
                                     output_dtype=torch.float16, group_sizes=[0, 0, group])
    fp19 = torch.tensor([struct.unpack("<f", struct.pack("<I", float_bits(s) & 0xFFFFE000))[0]
                         for s in scale.reshape(-1).tolist()]).reshape(K // group, N).double()
    expected = sum((x1.double()[:, g * group:(g + 1) * group] - 8) @ weight.double()[g * group:(g + 1) * group]
                   * fp19[g] for g in range(K // group))
    assert_close(got.cpu(), ((expected + offset.double()) * token_scale.double()).half())


@pytest.mark.parametrize("output_dtype", [None, torch.float16, torch.bfloat16])
def test_grouped_matmul_quantised_per_group(output_dtype):
    x = torch.randint(-4, 4, (12, 32), dtype=torch.int8)
    weights = [torch.randint(-4, 4, (32, 8), dtype=torch.int8) for _ in range(3)]
    biases = [torch.randint(-50, 50, (8,), dtype=torch.int32) for _ in range(3)]
    scales = [torch.rand(8) / 20 for _ in range(3)]
    got = torch_npu.npu_grouped_matmul([x.npu()], [w.npu() for w in weights], bias=[b.npu() for b in biases],
                                       scale=[s.npu() for s in scales], group_list=torch.tensor([2, 7, 12]).npu(),
                                       split_item=3, group_type=0, output_dtype=output_dtype)[0]
    rows = x.split([2, 5, 5])
    exact = torch.cat([((r.long() @ w.long() + b).double() * s.double()) for r, w, b, s in
                       zip(rows, weights, biases, scales)])
    if output_dtype is None:
        assert torch.equal(got.cpu(), torch.round(exact).clamp(-128, 127).to(torch.int8))
    else:
        assert got.dtype == output_dtype
        assert_close(got.cpu(), exact.to(output_dtype))


def test_grouped_matmul_with_weights_quantised_alone():
    x = [torch.randn(4, 16, dtype=torch.float16), torch.randn(3, 16, dtype=torch.float16)]
    weights = [torch.randint(-8, 8, (16, 6), dtype=torch.int8) for _ in range(2)]
    scales, shifts = [torch.rand(6, dtype=torch.float16) for _ in range(2)], [torch.randn(6).half() for _ in range(2)]
    got = torch_npu.npu_grouped_matmul([t.npu() for t in x], [w.npu() for w in weights],
                                       antiquant_scale=[s.npu() for s in scales],
                                       antiquant_offset=[o.npu() for o in shifts], group_type=-1)
    for y, x_i, w_i, s_i, o_i in zip(got, x, weights, scales, shifts):
        assert_close(y.cpu(), (x_i.float() @ ((w_i.float() + o_i.float()) * s_i.float())).half())


@pytest.mark.parametrize("call,message", [
    (lambda: torch_npu.npu_trans_quant_param(torch.rand(4).npu(), torch.rand(3).npu()),
     r"offset's shape \[3\] does not broadcast with scale's \[4\]"),
    (lambda: torch_npu.npu_trans_quant_param(torch.rand(4).npu(), round_mode=2), "round_mode must be 0"),
    (lambda: torch_npu.npu_quantize(torch.rand(2, 3).npu(), torch.ones(4).npu(), None, torch.qint8, -1),
     "scales has 4 values; input's dimension 1 has 3"),
    (lambda: torch_npu.npu_quant_matmul(torch.ones(2, 8, dtype=torch.int8).npu(), int4(torch.zeros(8, 8)),
                                        torch.ones(8).npu(), output_dtype=torch.float16),
     "int4 weights with int8 activations need pertoken_scale and offset"),
    (lambda: torch_npu.npu_quant_matmul(int4(torch.zeros(2, 8)), int4(torch.zeros(8, 16))[:, ::2], torch.ones(1).npu()),
     r"x2 of int4s \(int32\) must be contiguous or the transpose"),
    (lambda: torch_npu.npu_grouped_matmul([torch.ones(2, 4).npu()], [torch.ones(4, 2).npu()],
                                          scale=[torch.ones(2).npu()], group_type=-1),
     "scale quantises int8 inputs only"),
])
def test_quantised_calls_the_part_refuses_are_named_and_leave_the_device_usable(call, message):
    with pytest.raises(RuntimeError, match=message):
        call()
    assert torch.ones(3, device="npu").sum().item() == 3
