"""yaml_ops: a package whose only source is its YAML (codegen run by SimHPUExtension)."""
import os
import subprocess
import sys

import pytest
import torch

import yaml_ops

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _reference(t, slope=0.1):
    return torch.where(t > 0, t * t, slope * t)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_forward_matches_cpu(dtype):
    x = torch.randn(6, 9, dtype=dtype)
    torch.testing.assert_close(yaml_ops.npu_leaky_square(x.to("simhpu"), 0.3).cpu(), _reference(x, 0.3),
                               atol=1e-2 if dtype == torch.bfloat16 else None,
                               rtol=1.6e-2 if dtype == torch.bfloat16 else None)


def test_generated_backward_out_inplace_opcheck_compile():
    x = torch.randn(4, 5, dtype=torch.float64, device="simhpu", requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: yaml_ops.npu_leaky_square(t, 0.3), (x,))
    torch.library.opcheck(torch.ops.yaml_ops.npu_leaky_square.default, (x.detach(), 0.2))
    out = torch.empty(4, 5, dtype=torch.float64, device="simhpu")
    assert yaml_ops.npu_leaky_square(x.detach(), out=out) is out
    y = x.detach().clone()
    yaml_ops.npu_leaky_square_(y)
    torch.testing.assert_close(y.cpu(), _reference(x.detach().cpu()))
    fn = torch.compile(lambda t: yaml_ops.npu_leaky_square(t).sum(), fullgraph=True, backend="aot_eager")
    fn(x).backward()
    x_cpu = x.detach().cpu().requires_grad_()
    _reference(x_cpu).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), x_cpu.grad)


def test_generated_checks_name_the_op():
    with pytest.raises(TypeError, match=r"npu_leaky_square: argument 'self' has dtype Int"):
        yaml_ops.npu_leaky_square(torch.ones(3, dtype=torch.int32, device="simhpu"))
    assert yaml_ops.npu_leaky_square(torch.ones(3, device="simhpu")).cpu().tolist() == [1.0, 1.0, 1.0]


def test_installed_codegen_checks_the_package_yaml():
    done = subprocess.run([sys.executable, "-m", "torch_simhpu.codegen", "check"], cwd=HERE,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "ok: 1 operators" in done.stdout


@pytest.mark.parametrize("check", ["forward", "variants", "gradcheck", "autograd", "opcheck", "compile",
                                   "refused_dtype", "declared_checks"])
def test_the_tests_its_reference_generates(check):
    from torch_simhpu.testing.reference_tests import RUNNERS
    from yaml_ops._generated.reference import OPS

    assert [op.name for op in OPS] == ["npu_leaky_square"]
    failures = RUNNERS[check](OPS[0])
    assert not failures, "\n".join(failures)
