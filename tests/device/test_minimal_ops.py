"""The native minimal ATen set, copies, and the CPU fallback."""
import pytest
import torch
from helpers import has_device_kernel



@pytest.mark.parametrize("op", [
    "aten::empty.memory_format", "aten::empty_strided", "aten::as_strided", "aten::view",
    "aten::_reshape_alias", "aten::resize_", "aten::_copy_from", "aten::_copy_from_and_resize",
    "aten::_local_scalar_dense", "aten::set_.source_Storage", "aten::set_.source_Storage_storage_offset",
    "aten::set_.source_Tensor", "aten::add.Tensor", "aten::mul.Tensor",
])
def test_minimal_and_official_ops_are_native(op):
    assert has_device_kernel(op)


def test_fallback_ops_have_no_device_kernel():
    assert not has_device_kernel("aten::mm")


def test_empty_and_empty_strided():
    a = torch.empty(2, 3, device="simhpu", dtype=torch.float16)
    assert a.shape == (2, 3) and a.dtype == torch.float16 and a.device.type == "simhpu"
    b = torch.empty_strided((2, 3), (1, 2), device="simhpu")
    assert b.stride() == (1, 2)
    with pytest.raises(RuntimeError, match="pin_memory"):
        torch.empty(2, device="simhpu", pin_memory=True)


def test_views_share_memory():
    x = torch.arange(12.).simhpu()
    v = x.view(3, 4)
    r = x.reshape(4, 3)
    s = x.as_strided((2, 2), (1, 3), 1)
    t = v.t()
    torch.testing.assert_close(v.cpu(), torch.arange(12.).view(3, 4))
    torch.testing.assert_close(s.cpu(), torch.arange(12.).as_strided((2, 2), (1, 3), 1))
    torch.testing.assert_close(t.cpu(), torch.arange(12.).view(3, 4).t())
    assert v.untyped_storage().data_ptr() == x.untyped_storage().data_ptr() == r.untyped_storage().data_ptr()


def test_resize_keeps_contents():
    x = torch.arange(4.).simhpu()
    x.resize_(2, 4)
    assert x.shape == (2, 4)
    torch.testing.assert_close(x.cpu().flatten()[:4], torch.arange(4.))
    x.resize_(1)
    torch.testing.assert_close(x.cpu(), torch.tensor([0.]))


def test_set_overloads():
    src = torch.arange(6.).simhpu()
    a = torch.empty(0, device="simhpu").set_(src)
    torch.testing.assert_close(a.cpu(), torch.arange(6.))
    b = torch.empty(0, device="simhpu").set_(src.untyped_storage(), 2, (2, 2), (2, 1))
    torch.testing.assert_close(b.cpu(), torch.tensor([[2., 3.], [4., 5.]]))
    c = torch.empty(0, device="simhpu").set_(src.untyped_storage())
    assert c.numel() == 6


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool])
def test_copies_in_every_direction(dtype):
    host = (torch.randn(5, 7) * 10).to(dtype)
    dev = host.to("simhpu")
    torch.testing.assert_close(dev.cpu(), host)
    dev2 = torch.empty_like(dev).copy_(dev)  # device to device
    torch.testing.assert_close(dev2.cpu(), host)
    strided = dev.t().contiguous()  # non-contiguous source
    torch.testing.assert_close(strided.cpu(), host.t().contiguous())
    back = torch.empty(7, 5, dtype=dtype).copy_(dev.t())  # non-contiguous D2H
    torch.testing.assert_close(back, host.t())


def test_dtype_conversion_on_device():
    x = torch.randn(10).simhpu()
    torch.testing.assert_close(x.half().cpu(), x.cpu().half())
    torch.testing.assert_close(x.to(torch.int32).cpu(), x.cpu().to(torch.int32))


def test_host_tensor_can_change_after_copy_to_device():
    host = torch.ones(1000)
    dev = host.to("simhpu")
    host.fill_(5)  # the copy was staged, so later host writes do not reach the device
    assert dev.cpu().sum().item() == 1000


def test_item_and_local_scalar():
    assert torch.tensor(3.5).simhpu().item() == 3.5
    assert torch.tensor([7]).simhpu().item() == 7


@pytest.mark.parametrize("op", [
    lambda a, b: torch.matmul(a, b.T),
    lambda a, b: torch.softmax(a, dim=-1),
    lambda a, b: torch.where(a > 0, a, b),
    lambda a, b: a.sum(dim=0),
    lambda a, b: torch.cat([a, b]),
    lambda a, b: a - b,
])
def test_fallback_ops_match_cpu(op):
    a, b = torch.randn(4, 6), torch.randn(4, 6)
    out = op(a.simhpu(), b.simhpu())
    assert out.device.type == "simhpu"
    torch.testing.assert_close(out.cpu(), op(a, b))


def test_inplace_fallback_mutates_device_tensor():
    a = torch.randn(3, 3)
    d = a.simhpu()
    d.exp_()
    torch.testing.assert_close(d.cpu(), a.exp())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((2, 3, 4), (4,)), ((), (5,))])
def test_official_add_mul_match_cpu(dtype, shapes):
    a = (torch.randn(shapes[0]) * 4).to(dtype)
    b = (torch.randn(shapes[1]) * 4).to(dtype)
    da, db = a.simhpu(), b.simhpu()
    torch.testing.assert_close((da + db).cpu(), a + b)
    torch.testing.assert_close(torch.add(da, db, alpha=2).cpu(), torch.add(a, b, alpha=2))
    torch.testing.assert_close((da * db).cpu(), a * b)


def _transposed(on, shape):  # a dense tensor laid out in another order (a conv output's flatten(2).transpose(1, 2))
    return on(torch.randn(*shape[:-2], shape[-1], shape[-2])).transpose(-1, -2)


@pytest.mark.parametrize("operands", [
    # (each takes `on`, which puts a fresh tensor where the call runs: the views are made there)
    lambda on: (_transposed(on, (2, 6, 5)), on(torch.randn(6, 5))),  # transposed, broadcast with a contiguous one
    lambda on: (on(torch.randn(6, 5)), _transposed(on, (2, 6, 5))),
    lambda on: (_transposed(on, (2, 6, 5)), _transposed(on, (2, 6, 5)).to(torch.bfloat16)),  # and promoted
    lambda on: (on(torch.randn(2, 3, 4, 5)).to(memory_format=torch.channels_last), on(torch.randn(3, 1, 1))),
    lambda on: (on(torch.randn(5, 1)).expand(5, 4), on(torch.randn(4, 5)).t()),
    lambda on: (on(torch.randn(4, 6))[:, ::2], on(torch.randn(4, 3))),
], ids=["transposed+broadcast", "broadcast+transposed", "promoted", "channels_last", "expanded+transposed", "sliced"])
def test_official_add_mul_lay_out_their_results_as_pytorch_does(operands):
    torch.manual_seed(0)
    a, b = operands(lambda t: t)
    torch.manual_seed(0)
    da, db = operands(lambda t: t.simhpu())
    for op in (torch.add, torch.mul):
        expected, actual = op(a, b), op(da, db)
        assert actual.stride() == expected.stride(), f"{op.__name__}: strides {actual.stride()}, expected {expected.stride()}"
        torch.testing.assert_close(actual.cpu(), expected)


def test_official_ops_promote_and_take_python_scalars():
    a, b = torch.randn(4), torch.randn(4, dtype=torch.float64)
    da, db = a.simhpu(), b.simhpu()
    assert (da + db).dtype == torch.float64
    torch.testing.assert_close((da + db).cpu(), a + b)
    torch.testing.assert_close((da * 3).cpu(), a * 3)
    torch.testing.assert_close((da + 0.5).cpu(), a + 0.5)
    assert (torch.randn(4, dtype=torch.float16).simhpu() * 2.5).dtype == torch.float16


def test_official_op_on_two_devices_is_an_error():
    with pytest.raises(RuntimeError, match=r"Expected all tensors to be on the same device, but found at least "
                                           r"two devices, simhpu:0 and simhpu:1! \(in aten::add.Tensor\)"):
        torch.randn(3).to("simhpu:0") + torch.randn(3).to("simhpu:1")
    torch.testing.assert_close((torch.ones(2).simhpu() + 1).cpu(), torch.full((2,), 2.0))


def test_autograd_through_official_and_fallback_ops():
    a = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    d = a.detach().simhpu().requires_grad_()
    ((d * d + d).softmax(-1).sum()).backward()
    ((a * a + a).softmax(-1).sum()).backward()
    torch.testing.assert_close(d.grad.cpu(), a.grad)
