"""codegen for an operator package (examples/yaml_ops): what it writes beyond
the backend's files, what it refuses, and where its formulas' helpers come from."""
import importlib
import os
import shutil
import sys

import pytest
from yaml_edit import ROOT

EXAMPLE = os.path.join(ROOT, "examples", "yaml_ops")


@pytest.fixture(scope="module")
def target():
    sys.path.insert(0, ROOT)
    try:
        return importlib.import_module("codegen.target")
    finally:
        sys.path.remove(ROOT)


@pytest.fixture
def package_dir(tmp_path):
    for name in ("op_plugin_functions.yaml", "derivatives.yaml"):
        shutil.copy(os.path.join(EXAMPLE, name), tmp_path / name)
    return tmp_path


def test_package_files_are_its_own(codegen, emit, target, package_dir):
    files = emit.render(codegen.load_project(str(package_dir), target.package("yaml_ops._C")))
    assert "csrc/module.cpp" in files and "python/yaml_ops/_generated/ops.py" in files
    assert "python/yaml_ops/_generated/ops.pyi" in files
    assert not any(path.startswith("python/torch_simhpu") for path in files)
    assert 'importlib.import_module("yaml_ops._C")' in files["python/yaml_ops/_generated/ops.py"]
    adapter = files["csrc/adapters/npu_leaky_square.cpp"]  # each operator registers itself
    assert "TORCH_LIBRARY_FRAGMENT(yaml_ops, m)" in adapter and "TORCH_LIBRARY_IMPL(yaml_ops, PrivateUse1, m)" in adapter
    assert "def is_available" not in files["python/yaml_ops/_generated/ops.pyi"]  # the backend's API is not theirs


def test_backend_files_are_unchanged_by_default(codegen, emit):
    files = emit.render(codegen.load_project(ROOT))
    assert "python/torch_simhpu/__init__.pyi" in files and "csrc/module.cpp" not in files


def test_a_package_may_not_declare_official_ops(codegen, target, package_dir):
    path = package_dir / "op_plugin_functions.yaml"
    path.write_text(path.read_text().replace("custom:", "official:\n  - func: abs(Tensor self) -> Tensor\n"
                                                       "    exec: abs, self, out\n\ncustom:"))
    line = path.read_text().splitlines().index("official:") + 1
    with pytest.raises(Exception) as info:
        codegen.load_project(str(package_dir), target.package("yaml_ops._C"))
    assert f"op_plugin_functions.yaml:{line}: (file): field 'official': an operator package cannot give aten operators" \
        in str(info.value)


def test_package_formulas_use_the_sdks_helpers(codegen, target, package_dir):
    # add_rms_norm_backward is a helper of csrc/autograd/formulas.h, which the package does not have.
    path = package_dir / "derivatives.yaml"
    path.write_text(path.read_text().replace("self: grad * where(", "self: grad * std::get<0>(add_rms_norm_backward("
                                                                   "grad, self, self, self, self)) * where("))
    project = codegen.load_project(str(package_dir), target.package("yaml_ops._C"))
    assert project.ops[0].derivative is not None


@pytest.mark.parametrize("name", ["yaml_ops", "1bad._C", "yaml ops._C", ""])
def test_extension_names_are_checked(target, name):
    with pytest.raises(ValueError, match="expected the extension module's full name"):
        target.package(name)
