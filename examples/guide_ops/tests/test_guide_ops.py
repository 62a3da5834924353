"""guide_ops: the PrivateUse1 guide's three autograd styles for custom operators."""
import pytest
import torch

import guide_ops


def _x(requires_grad=True):
    return torch.randn(3, 5, dtype=torch.float64, device="simhpu", requires_grad=requires_grad)


def test_forward_only_op_runs_and_refuses_backward_naming_itself():
    x = _x()
    out = guide_ops.scale(x, 2.5)
    torch.testing.assert_close(out.detach().cpu(), x.detach().cpu() * 2.5)
    with pytest.raises(RuntimeError, match=r"derivative for guide_ops::scale is not implemented"):
        out.sum().backward()
    torch.testing.assert_close(guide_ops.scale(x.detach(), 1.0).cpu(), x.detach().cpu())


def test_forward_and_backward_operators():
    x = _x()
    torch.testing.assert_close(guide_ops.square(x).detach().cpu(), x.detach().cpu() ** 2)
    assert torch.autograd.gradcheck(guide_ops.square, (x,))
    grad = torch.randn(3, 5, dtype=torch.float64, device="simhpu")
    torch.testing.assert_close(torch.ops.guide_ops.square_backward(grad, x.detach()).cpu(),
                               grad.cpu() * 2 * x.detach().cpu())


def test_autograd_function():
    x = _x()
    torch.testing.assert_close(guide_ops.cube(x).detach().cpu(), x.detach().cpu() ** 3)
    assert torch.autograd.gradcheck(guide_ops.cube, (x,))


@pytest.mark.parametrize("name", ["square", "cube"])
def test_compile_forward_and_backward(name):
    fn = getattr(guide_ops, name)
    x = _x()
    compiled = torch.compile(lambda t: fn(t).sum(), fullgraph=True, backend="aot_eager")
    compiled(x).backward()
    x_cpu = x.detach().cpu().requires_grad_()
    (x_cpu ** (2 if name == "square" else 3)).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), x_cpu.grad)


def test_opcheck_of_each_operator():
    x = _x(requires_grad=False)
    torch.library.opcheck(torch.ops.guide_ops.square.default, (x,))
    torch.library.opcheck(torch.ops.guide_ops.cube.default, (x,))
    torch.library.opcheck(torch.ops.guide_ops.square_backward.default, (x, x))
