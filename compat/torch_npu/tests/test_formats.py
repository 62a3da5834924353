"""Ascend's internal formats kept as a tensor's format: values and results unchanged, the format read back."""
import pytest
import torch
import torch_npu

from torch.testing import assert_close
from torch_npu import Format


@pytest.mark.parametrize("format_", [Format.ND, Format.NCHW, Format.NC1HWC0, Format.FRACTAL_Z, Format.FRACTAL_NZ])
def test_a_cast_keeps_values_and_results(format_):
    x = torch.randn(2, 3, 4, 5)
    cast = torch_npu.npu_format_cast(x.npu(), format_)
    assert torch_npu.get_npu_format(cast) == format_
    assert_close(cast.cpu(), x)
    assert_close(torch.nn.functional.relu(cast * 2).cpu(), torch.nn.functional.relu(x * 2))


def test_base_formats_follow_the_dimensions():
    assert torch_npu.get_npu_format(torch.ones(2, 3, device="npu")) == Format.ND
    assert torch_npu.get_npu_format(torch.ones(1, 2, 3, 4, device="npu")) == Format.NCHW
    assert torch_npu.get_npu_format(torch.ones(1, 2, 3, 4, 5, device="npu")) == Format.NCDHW


def test_casting_to_the_format_it_has_returns_the_tensor_itself_and_another_format_a_new_one():
    x = torch.ones(4, 4, device="npu")
    assert torch_npu.npu_format_cast(x, 2) is x
    nz = x.npu_format_cast(29)
    assert nz is not x and torch_npu.get_npu_format(nz) == 29 and torch_npu.get_npu_format(x) == 2
    nz.add_(1)
    assert x.sum().item() == 16  # a cast is a copy, as on the part


def test_in_place_casts_take_an_id_or_another_tensors_format():
    x = torch.ones(4, 4, device="npu")
    assert torch_npu.npu_format_cast_(x, 29) is x and torch_npu.get_npu_format(x) == 29
    y = torch.ones(4, 4, device="npu")
    y.npu_format_cast_(x)
    assert torch_npu.get_npu_format(y) == 29


def test_gradients_pass_through_a_cast():
    x = torch.randn(3, 4, dtype=torch.float64, device="npu", requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: torch_npu.npu_format_cast(t, 29) * 3, (x,))


def test_bad_casts_are_named_and_leave_the_device_usable():
    x = torch.ones(4, device="npu")
    with pytest.raises(RuntimeError, match=r"npu_format_cast: unknown format id 7; the formats are 0 \(NCHW\)"):
        torch_npu.npu_format_cast(x, 7)
    with pytest.raises(RuntimeError, match="npu_format_cast: cannot cast to format -1"):
        torch_npu.npu_format_cast(x, -1)
    with pytest.raises(RuntimeError, match="npu_format_cast: expected a tensor on npu, got one on cpu"):
        torch_npu.npu_format_cast(torch.ones(2), 2)
    with pytest.raises(TypeError, match="npu_format_cast_: acl_format must be an int"):
        torch_npu.npu_format_cast_(x, "ND")
    with pytest.raises(RuntimeError, match="get_npu_format: expected a tensor on npu, got cpu"):
        torch_npu.get_npu_format(torch.ones(2))
    assert (x + 1).sum().item() == 8


def test_nchws_blocked_layout_cast_to_nd_is_nchw_again():
    x = torch_npu.npu_format_cast(torch.ones(2, 2, 4, 4, device="npu"), Format.NC1HWC0)
    assert torch_npu.get_npu_format(torch_npu.npu_format_cast(x, Format.ND)) == Format.NCHW
    assert torch_npu.get_npu_format(torch_npu.npu_format_cast_(x, Format.ND)) == Format.NCHW
    nz = torch_npu.npu_format_cast(torch.ones(2, 2, 4, 4, device="npu"), Format.FRACTAL_NZ)
    assert torch_npu.get_npu_format(torch_npu.npu_format_cast(nz, Format.ND)) == Format.ND
