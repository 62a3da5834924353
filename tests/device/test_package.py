"""The installed wheel, not the source tree, is what the tests exercise."""
import os
import subprocess
import sys

import torch

import torch_simhpu
from torch_simhpu import _generated


def test_imported_from_installed_wheel():
    assert "site-packages" in torch_simhpu.__file__


def test_import_from_any_folder(tmp_path):
    code = "import torch, torch_simhpu; print(torch.randn(2).simhpu().device)"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "simhpu:0"


def test_stub_and_generated_modules_ship_in_the_wheel():
    package_dir = os.path.dirname(torch_simhpu.__file__)
    stub = open(os.path.join(package_dir, "__init__.pyi")).read()
    for name in _generated.CUSTOM_OPS:
        assert f"def {name}(" in stub
    assert "def npu_rms_norm(x: Tensor, gamma: Tensor, eps: float = 1e-06) -> tuple[Tensor, Tensor]" in stub
    assert os.path.exists(os.path.join(package_dir, "_generated", "fake.py"))


def test_every_custom_op_is_exposed_three_ways():
    for name in _generated.CUSTOM_OPS:
        assert callable(getattr(torch_simhpu, name))
        assert hasattr(torch.ops.npu, name)
        assert name in torch_simhpu.__all__
        assert torch_simhpu.__dict__[name].__doc__.startswith(f"{name}(")
