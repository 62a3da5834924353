"""custom_topk (Gaudi-style registerUserCustomOp, loaded with torch.ops.load_library),
and torch_simhpu.library, its Python twin, over the same device kernel."""
import struct

import pytest
import torch

import custom_topk
import torch_simhpu


@pytest.mark.parametrize("axis,bottom", [(-1, False), (0, True), (1, False)])
def test_matches_cpu_topk_forward_and_backward(axis, bottom):
    x = torch.randn(5, 8, requires_grad=True)
    xd = x.detach().to("simhpu").requires_grad_()
    values, indices = custom_topk.custom_topk(xd, 3, axis, bottom)
    ref_values, ref_indices = torch.topk(x, 3, axis, largest=not bottom)
    torch.testing.assert_close(values.cpu(), ref_values)
    torch.testing.assert_close(indices.cpu(), ref_indices)
    values.sum().backward()
    ref_values.sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), x.grad)


def test_compile_fullgraph_uses_the_output_meta_function():
    x = torch.randn(4, 6, device="simhpu")
    fn = torch.compile(lambda t: custom_topk.custom_topk(t, 2, -1, False)[0] * 2, fullgraph=True,
                       backend="aot_eager")
    torch.testing.assert_close(fn(x).cpu(), torch.topk(x.cpu(), 2)[0] * 2)


def test_opcheck_static_shapes():
    # The C++ output-meta function reads concrete shapes: the dynamic-shape checks are left out.
    x = torch.randn(4, 6, device="simhpu")
    torch.library.opcheck(torch.ops.custom_op.custom_topk.default, (x, 2, 1, False),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static"))


def test_errors_name_the_op_and_leave_the_device_usable():
    x = torch.randn(4, 6, device="simhpu")
    with pytest.raises(ValueError, match=r"custom_op::custom_topk: its OutputMetaFn failed: .*k = 9 is out of range"):
        custom_topk.custom_topk(x, 9, -1, False)
    with pytest.raises(IndexError, match=r"custom_op::custom_topk: its OutputMetaFn failed: .*axis 5"):
        custom_topk.custom_topk(x, 2, 5, False)
    with pytest.raises(TypeError, match=r"custom_op::custom_topk: self must be float32"):
        custom_topk.custom_topk(x.double(), 2, -1, False)
    torch.testing.assert_close(custom_topk.custom_topk(x, 1, -1, False)[0].cpu(), x.cpu().max(-1, keepdim=True)[0])


def _topk_meta(x, k):
    return [(x.dtype, [*x.shape[:-1], k]), (torch.int64, [*x.shape[:-1], k])]


def _topk_params(x, k):
    return struct.pack("=qq?", k, x.dim() - 1, False) + b"\0" * 7  # TopkParams: k, axis, bottom, padding


torch_simhpu.library.register_user_custom_op("py_custom::topk(Tensor x, int k) -> (Tensor, Tensor)",
                                             kernel="custom_topk_f32", output_meta=_topk_meta, params=_topk_params)


def test_python_twin_runs_the_same_kernel_eager_and_compiled():
    x = torch.randn(3, 7, device="simhpu")
    values, indices = torch.ops.py_custom.topk(x, 4)
    ref_values, ref_indices = torch.topk(x.cpu(), 4)
    torch.testing.assert_close(values.cpu(), ref_values)
    torch.testing.assert_close(indices.cpu(), ref_indices)
    fn = torch.compile(lambda t: torch.ops.py_custom.topk(t, 2)[0] + 1, fullgraph=True, backend="aot_eager",
                       dynamic=True)
    torch.testing.assert_close(fn(x).cpu(), torch.topk(x.cpu(), 2)[0] + 1)


def test_python_twin_errors():
    with pytest.raises(ValueError, match=r"expected 'namespace::name\(args\) -> returns'"):
        torch_simhpu.library.register_user_custom_op("topk(Tensor x) -> Tensor", "k", _topk_meta)
    torch_simhpu.library.register_user_custom_op("py_custom::no_kernel(Tensor x) -> Tensor",
                                                 kernel="nobody_registers_this", output_meta=lambda x: [(x.dtype, x.shape)])
    x = torch.randn(3, device="simhpu")
    with pytest.raises(RuntimeError, match=r"py_custom::no_kernel: no device kernel named 'nobody_registers_this'"):
        torch.ops.py_custom.no_kernel(x)

    def failing_meta(x):
        raise ValueError("rank too small")
    torch_simhpu.library.register_user_custom_op("py_custom::bad_meta(Tensor x) -> Tensor",
                                                 kernel="custom_topk_f32", output_meta=failing_meta)
    with pytest.raises(RuntimeError, match=r"py_custom::bad_meta: its output_meta failed: ValueError: rank too small"):
        torch.ops.py_custom.bad_meta(x)
    torch.testing.assert_close((x + 1).cpu(), x.cpu() + 1)
