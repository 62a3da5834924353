"""A program's own Triton kernels on simhpu tensors: where Triton has no GPU, simhpu has
its interpreter run them (torch_simhpu/_triton.py), so a @triton.jit kernel launched on
device tensors computes what it computes over CPU tensors."""
import os
import subprocess
import sys

import pytest
import torch

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")


@triton.jit
def _scaled_add(x_ptr, y_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    x = tl.load(x_ptr + offsets, mask=inside)
    y = tl.load(y_ptr + offsets, mask=inside)
    tl.store(out_ptr + offsets, x * scale + y, mask=inside)


def scaled_add(x, y, scale):
    out = torch.empty_like(x)
    _scaled_add[(triton.cdiv(x.numel(), 16),)](x, y, out, x.numel(), scale, BLOCK=16)
    return out


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU, Triton compiles for it")
def test_a_triton_kernel_on_device_tensors_computes_what_it_does_on_the_cpu():
    assert os.environ.get("TRITON_INTERPRET") == "1"
    x, y = torch.randn(50), torch.randn(50)
    got = scaled_add(x.to("simhpu"), y.to("simhpu"), 3.0)
    assert got.device.type == "simhpu"
    torch.testing.assert_close(got.cpu(), scaled_add(x, y, 3.0))
    torch.testing.assert_close(got.cpu(), x * 3.0 + y)


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU, Triton compiles for it")
def test_torchtitans_moe_permutation_kernel_runs_on_the_device():
    kernels = pytest.importorskip("torchtitan.models.moe.kernels")
    counts = torch.tensor([4, 2, 1, 3, 1, 2, 3, 4], dtype=torch.int32)
    got = kernels.generate_permute_indices(counts.to("simhpu"), 4, 2, 64, 8)
    expected = kernels.generate_permute_indices(counts, 4, 2, 64, 8, use_cpu=True)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g.cpu(), e)


def test_a_program_that_sets_triton_interpret_keeps_its_setting(tmp_path):
    code = "import os, torch, torch_simhpu\nprint('setting', os.environ['TRITON_INTERPRET'])\n"
    env = dict(os.environ, TRITON_INTERPRET="0")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0 and "setting 0" in out.stdout, out.stderr[-2000:]
