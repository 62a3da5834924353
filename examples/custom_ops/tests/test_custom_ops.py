"""custom_ops (a C++-extension package built against the installed torch_simhpu):
forward against CPU, backward, gradcheck, opcheck, torch.compile, bad input."""
import pytest
import torch

import custom_ops


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_forward_and_backward_match_cpu(dtype):
    x = torch.randn(5, 7, dtype=dtype, requires_grad=True)
    y = torch.randn(7, dtype=dtype, requires_grad=True)
    xd = x.detach().to("simhpu").requires_grad_()
    yd = y.detach().to("simhpu").requires_grad_()
    out = custom_ops.add_custom(xd, yd)
    torch.testing.assert_close(out.cpu(), x + y)
    (out * out).sum().backward()
    ((x + y) * (x + y)).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), x.grad)
    torch.testing.assert_close(yd.grad.cpu(), y.grad)  # summed over the broadcast dim


def test_gradcheck_and_opcheck():
    x = torch.randn(3, 4, dtype=torch.float64, device="simhpu", requires_grad=True)
    y = torch.randn(3, 1, dtype=torch.float64, device="simhpu", requires_grad=True)
    assert torch.autograd.gradcheck(custom_ops.add_custom, (x, y))
    # opcheck with detached inputs: its autograd-registration check knows CPU/CUDA/XPU only.
    torch.library.opcheck(torch.ops.custom_ops.add_custom.default, (x.detach(), y.detach()))


def test_torch_compile_fullgraph():
    x = torch.randn(4, 4, device="simhpu")
    fn = torch.compile(lambda a, b: custom_ops.add_custom(a, b).relu(), fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(fn(x, x).cpu(), (x.cpu() * 2).relu())


def test_pybind_binding_is_the_same_operator():
    x = torch.randn(3, device="simhpu")
    torch.testing.assert_close(custom_ops._C.add_custom(x, x).cpu(), x.cpu() * 2)


def test_bad_input_names_the_op_and_leaves_the_device_usable():
    x = torch.randn(3, device="simhpu")
    with pytest.raises(RuntimeError, match=r"custom_ops::add_custom: expected argument 'other' on a simhpu device"):
        custom_ops.add_custom(x, torch.randn(3))
    with pytest.raises(TypeError, match=r"custom_ops::add_custom: argument 'self' has dtype Int"):
        custom_ops.add_custom(x.int(), x.int())
    torch.testing.assert_close(custom_ops.add_custom(x, x).cpu(), x.cpu() * 2)


def test_the_sanitizer_sees_the_package_kernel_race_and_its_synchronised_twin():
    """The package's kernel is launched like the backend's own: a side stream's
    add_custom read on the default stream without a wait is a race."""
    x = torch.ones(4, device="simhpu")
    torch.simhpu.synchronize()
    with torch.simhpu.sanitizer.enabled("record"):
        side = torch.simhpu.Stream()
        side.wait_stream(torch.simhpu.current_stream())
        with torch.simhpu.stream(side):
            out = custom_ops.add_custom(x, x)
        out.mul_(2)  # no wait for the side stream
        found = torch.simhpu.sanitizer.reports()
        torch.simhpu.sanitizer.clear_reports()
        with torch.simhpu.stream(side):
            twin = custom_ops.add_custom(x, x)
        torch.simhpu.current_stream().wait_stream(side)
        twin.mul_(2)
        clean = torch.simhpu.sanitizer.reports()
        torch.simhpu.synchronize()
    assert len(found) == 1 and "custom_ops::add_custom" in found[0] and "aten::mul.out" in found[0], found
    assert clean == [], clean
    torch.testing.assert_close(twin.cpu(), torch.full((4,), 4.0))
