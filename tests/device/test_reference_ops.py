"""The tests op_plugin_functions.yaml's `reference:` entries generate
(torch_simhpu/testing/reference_tests.py), for every shipped operator that has
one, and proof that they catch a broken kernel: a scratch package whose three
operators are wrong in the forward, in the derivative, and for non-contiguous
inputs only."""
import os
import subprocess
import sys

import pytest
import torch

import torch_simhpu
from torch_simhpu._generated.reference import OPS
from torch_simhpu.testing.reference_tests import CHECKS, RUNNERS, samples


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("op", OPS, ids=[op.name for op in OPS])
def test_generated(op, check):
    failures = RUNNERS[check](op)
    torch.simhpu.synchronize()
    assert not failures, f"{op.where} ({op.name}): {check}:\n" + "\n".join(failures)


def test_every_custom_op_with_a_kernel_states_a_reference():
    without = set(torch_simhpu._generated.CUSTOM_OPS) - {op.name for op in OPS}
    # The two whose reference is not an expression (a backward, a list reduction), and a deprecated alias.
    assert without == {"npu_rms_norm_backward", "npu_weighted_sum", "npu_add_custom_v0"}, without


def test_samples_cover_broadcasting_non_contiguous_zero_size_and_keywords():
    labels = {s.label for s in samples(next(op for op in OPS if op.name == "npu_lerp_scalar"))}
    assert {"base", "base, non-contiguous", "zero-size", "broadcast"} <= labels, labels
    assert "beta=0.75" in {s.label for s in samples(next(op for op in OPS if op.name == "npu_swish"))}
    softplus = {s.label for s in samples(next(op for op in OPS if op.name == "npu_softplus_beta"))}
    assert {"beta=0.75", "threshold=0.75"} <= softplus, softplus
    non_contiguous = next(s for s in samples(OPS[0]) if "non-contiguous" in s.label)
    assert not non_contiguous.values["x"].is_contiguous()


BROKEN_SETUP = """
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension
from torch_simhpu.utils.cpp_extension import SimHPUExtension

setup(name="broken_pkg", version="0.1.0", packages=["broken_pkg"],
      ext_modules=[SimHPUExtension("broken_pkg._C", ["csrc/kernels/linear_copy.cpp"], yaml="op_plugin_functions.yaml",
                                   derivatives="derivatives.yaml")],
      cmdclass={"build_ext": BuildExtension})
"""
BROKEN_OPS = """backend: simhpu
namespace: broken_pkg
custom:
  - func: npu_wrong_forward(Tensor x) -> Tensor
    elementwise: x * 2
    dtypes: [float32, float64]
    reference: x * 3
  - func: npu_wrong_grad(Tensor x) -> Tensor
    elementwise: x * x
    dtypes: [float32, float64]
    reference: x * x
  - func: npu_ignores_strides(Tensor x) -> Tensor
    exec: linear_copy, x, out
    out: {size: x, dtype: x}
    dtypes: [float32, float64]
    reference: x + 0
"""
BROKEN_DERIVATIVES = """- name: npu_wrong_forward(Tensor x) -> Tensor
  x: grad * 2
- name: npu_wrong_grad(Tensor x) -> Tensor
  x: grad * x
- name: npu_ignores_strides(Tensor x) -> Tensor
  x: grad
"""
LINEAR_COPY = """#include <torch_simhpu/extension.h>
#include "generated/kernel_signatures/linear_copy.h"
namespace simhpu::kernels {
// Deliberately wrong: reads x as if it were contiguous.
void linear_copy(const DeviceTensor& x, const Out<DeviceTensor>& out) {
  SIMHPU_DISPATCH_FLOATING(out.dtype, "linear_copy", [&] {
    for (int64_t i = 0; i < out.numel(); ++i) out.data_as<scalar_t>()[i] = x.data_as<const scalar_t>()[i];
  });
}
SIMHPU_KERNEL(linear_copy);
}  // namespace simhpu::kernels
"""


def test_the_generated_tests_catch_broken_kernels(tmp_path):
    package = tmp_path / "broken_pkg"
    (package / "broken_pkg").mkdir(parents=True)
    (package / "csrc" / "kernels").mkdir(parents=True)
    (package / "broken_pkg" / "__init__.py").write_text("from broken_pkg._generated.ops import *  # noqa\n")
    (package / "setup.py").write_text(BROKEN_SETUP)
    (package / "op_plugin_functions.yaml").write_text(BROKEN_OPS)
    (package / "derivatives.yaml").write_text(BROKEN_DERIVATIVES)
    (package / "csrc" / "kernels" / "linear_copy.cpp").write_text(LINEAR_COPY)
    built = subprocess.run([sys.executable, "setup.py", "--quiet", "bdist_wheel"], cwd=package, capture_output=True,
                           text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    site = tmp_path / "site"
    wheel = next((package / "dist").glob("*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), str(wheel)],
                   check=True)
    done = subprocess.run([sys.executable, "-m", "torch_simhpu.codegen", "test"], cwd=package, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(site)}, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines() if line.startswith("npu_")}
    assert "forward:FAIL" in rows["npu_wrong_forward"], done.stdout
    assert "forward:ok" in rows["npu_wrong_grad"] and "gradcheck:FAIL" in rows["npu_wrong_grad"], done.stdout
    assert "forward:FAIL" in rows["npu_ignores_strides"], done.stdout
    entry = next(n for n, line in enumerate(BROKEN_OPS.splitlines(), 1) if "npu_ignores_strides" in line)
    strides = [line for line in done.stdout.splitlines() if f"op_plugin_functions.yaml:{entry}: forward:" in line]
    assert strides and all("non-contiguous" in line for line in strides), done.stdout  # contiguous inputs pass
    assert "0 of 3 operators pass" in done.stdout


def test_each_reference_op_is_also_a_pytorch_opinfo():
    for op in OPS:
        info = op.opinfo()
        assert info.name == op.name and info.supports_out == ("out" in op.variants)
        checked = 0
        for sample in info.sample_inputs("simhpu", torch.float32):
            if "non-contiguous" in sample.name or "zero" in sample.name:
                continue
            checked += 1
            result = info(sample.input, **sample.kwargs)
            expected = info.ref(sample.input.cpu().double(), **{
                k: v.cpu().double() if isinstance(v, torch.Tensor) else v for k, v in sample.kwargs.items()})
            for r, e in zip(result if isinstance(result, tuple) else (result,),
                            expected if isinstance(expected, tuple) else (expected,)):
                torch.testing.assert_close(r.cpu(), e.float(), rtol=1e-5, atol=1e-5)
        assert checked, op.name
