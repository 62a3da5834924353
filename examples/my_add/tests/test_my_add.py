"""my_add (kernel-direct: a package's kernel behind torch.ops.npu.my_add)."""
import pytest
import torch

import my_add


def test_is_in_the_npu_namespace_beside_the_backends_ops():
    assert hasattr(torch.ops.npu, "my_add") and hasattr(torch.ops.npu, "npu_swish")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_forward_and_backward_match_cpu(dtype):
    x = torch.randn(4, 6, dtype=dtype, requires_grad=True)
    y = torch.randn(1, 6, dtype=dtype, requires_grad=True)
    xd = x.detach().to("simhpu").requires_grad_()
    yd = y.detach().to("simhpu").requires_grad_()
    out = torch.ops.npu.my_add(xd, yd, 0.5)
    torch.testing.assert_close(out.cpu(), x + 0.5 * y)
    out.sum().backward()
    (x + 0.5 * y).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), x.grad)
    torch.testing.assert_close(yd.grad.cpu(), y.grad)


def test_gradcheck_opcheck_compile():
    x = torch.randn(3, 4, dtype=torch.float64, device="simhpu", requires_grad=True)
    y = torch.randn(4, dtype=torch.float64, device="simhpu", requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: my_add.my_add(a, b, 3.0), (x, y))
    torch.library.opcheck(torch.ops.npu.my_add.default, (x.detach(), y.detach(), 2.0))
    fn = torch.compile(lambda a, b: my_add.my_add(a, b) * 2, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(fn(x, y).cpu(), (x + y).detach().cpu() * 2)


def test_bad_input():
    x = torch.randn(3, device="simhpu")
    with pytest.raises(TypeError, match=r"npu::my_add: expected argument .y. to have the dtype of .x."):
        my_add.my_add(x, x.double())
    torch.testing.assert_close(my_add.my_add(x, x).cpu(), x.cpu() * 2)
