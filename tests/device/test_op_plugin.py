"""npu_add_rms_norm: an operator whose adapter is written by hand in
op_plugin/ (two kernel launches), with everything around it generated."""
import pytest
import torch
from helpers import f64, tol
from torch.library import opcheck

import torch_simhpu


def reference(x, residual, gamma, eps=1e-6):
    total = x + residual
    rstd = torch.rsqrt(total.pow(2).mean(-1, keepdim=True) + eps)
    return total * rstd * gamma, rstd, total


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_matches_cpu(dtype):
    x, residual, gamma = torch.randn(5, 16), torch.randn(5, 16), torch.rand(16) + 0.5
    got = torch_simhpu.npu_add_rms_norm(*(t.to(dtype).simhpu() for t in (x, residual, gamma)), eps=1e-5)
    for g, e in zip(got, reference(x, residual, gamma, 1e-5)):
        assert g.dtype == dtype
        torch.testing.assert_close(g.cpu().float(), e, **tol(dtype))


def test_noncontiguous_inputs():
    x = torch.randn(16, 6)
    strided = x.simhpu().t()[:, :4]
    assert not strided.is_contiguous()
    residual, gamma = torch.randn(6, 4), torch.rand(4)
    y, _, total = torch_simhpu.npu_add_rms_norm(strided, residual.simhpu(), gamma.simhpu())
    expected = reference(x.t()[:, :4], residual, gamma)
    torch.testing.assert_close(y.cpu(), expected[0])
    torch.testing.assert_close(total.cpu(), expected[2])


def test_gradients():
    args = (f64(3, 6), f64(3, 6), f64(6, positive=True))
    assert torch.autograd.gradcheck(lambda *a: torch_simhpu.npu_add_rms_norm(*a)[0::2], args)
    # Only one output used: the other's gradient stands in as zeros.
    assert torch.autograd.gradcheck(lambda *a: torch_simhpu.npu_add_rms_norm(*a)[0], args)
    _, rstd, _ = torch_simhpu.npu_add_rms_norm(*args)
    assert not rstd.requires_grad


def test_opcheck_and_compile():
    args = tuple(torch.randn(*s).simhpu() for s in ((4, 8), (4, 8), (8,)))
    opcheck(torch.ops.npu.npu_add_rms_norm.default, args)
    compiled = torch.compile(lambda *a: torch_simhpu.npu_add_rms_norm(*a)[0] * 2, backend="aot_eager")
    torch.testing.assert_close(compiled(*args).cpu(), reference(*(a.cpu() for a in args))[0] * 2)


def test_out_variant():
    args = tuple(torch.randn(*s).simhpu() for s in ((2, 8), (2, 8), (8,)))
    outs = tuple(torch.empty(0, device="simhpu") for _ in range(3))
    torch_simhpu.npu_add_rms_norm(*args, out=outs)
    for o, e in zip(outs, reference(*(a.cpu() for a in args))):
        torch.testing.assert_close(o.cpu(), e)


@pytest.mark.parametrize("residual,gamma,error,message", [
    ((4, 4), (8,), ValueError, "npu_add_rms_norm: expected 'x' and 'residual' to have the same shape"),
    ((4, 8), (4,), ValueError, "npu_add_rms_norm: "),
])
def test_bad_input_names_the_op_and_leaves_the_device_usable(residual, gamma, error, message):
    x = torch.randn(4, 8).simhpu()
    with pytest.raises(error, match=message):
        torch_simhpu.npu_add_rms_norm(x, torch.randn(*residual).simhpu(), torch.randn(*gamma).simhpu())
    with pytest.raises(TypeError, match="npu_add_rms_norm: argument 'x' has dtype Long"):
        torch_simhpu.npu_add_rms_norm(x.long(), x.long(), torch.ones(8, dtype=torch.long).simhpu())
    torch.testing.assert_close((x + 1).cpu(), x.cpu() + 1)
