"""A kernel or op_plugin adapter whose parameters do not fit its YAML entry is
a compile error naming the entry (generated/kernel_signatures.h and
generated/op_plugin.h). Needs a C++ compiler and torch's headers, no build."""
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest
import torch.utils.cpp_extension
from yaml_edit import ROOT, edit, line_of

COMPILER = shutil.which("g++") or shutil.which("c++")
pytestmark = pytest.mark.skipif(COMPILER is None, reason="no C++ compiler")


def syntax_check(project, generated, source):
    includes = [project / "csrc", generated / "include", os.path.join(ROOT, "csrc"), sysconfig.get_paths()["include"],
                *torch.utils.cpp_extension.include_paths()]
    command = [COMPILER, "-std=c++17", "-fsyntax-only", "-fopenmp", *(f"-I{i}" for i in includes), str(source)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def test_kernel_that_does_not_fit_its_exec_entry_names_the_entry(codegen, project_dir, monkeypatch):
    kernel = project_dir / "csrc" / "kernels" / "swish.cpp"
    edit(kernel, "void swish(const DeviceTensor& self, double beta,", "void swish(const DeviceTensor& self, bool beta,")
    entry_line = line_of(project_dir / "op_plugin_functions.yaml", "func: npu_swish(")
    # codegen's reading of the kernel file would refuse the entry first; the compiler must too.
    monkeypatch.setattr(sys.modules["codegen.kernel_signatures"], "mismatches", lambda *args: [])
    generated = project_dir / "generated"
    codegen.generate(str(project_dir), str(generated))
    result = syntax_check(project_dir, generated, kernel)
    assert result.returncode != 0
    assert f"op_plugin_functions.yaml:{entry_line} (npu_swish): exec: arguments do not fit the kernel" in result.stderr


def test_op_plugin_adapter_that_does_not_fit_its_entry_names_the_entry(codegen, project_dir):
    adapter = project_dir / "op_plugin" / "add_rms_norm.cpp"
    edit(adapter, "const at::Tensor& gamma, double eps,", "const at::Tensor& gamma, float eps,")
    entry_line = line_of(project_dir / "op_plugin_functions.yaml", "func: npu_add_rms_norm(")
    generated = project_dir / "generated"
    codegen.generate(str(project_dir), str(generated))
    result = syntax_check(project_dir, generated, adapter)
    assert result.returncode != 0
    assert (f"op_plugin_functions.yaml:{entry_line} (npu_add_rms_norm): the adapter must take the schema's "
            f"arguments, then the outputs") in result.stderr


def test_the_shipped_kernels_and_adapters_fit_their_entries(codegen, project_dir):
    generated = project_dir / "generated"
    codegen.generate(str(project_dir), str(generated))
    for source in (project_dir / "csrc" / "kernels" / "swish.cpp", project_dir / "op_plugin" / "add_rms_norm.cpp",
                   generated / "csrc" / "adapters" / "npu_rms_norm_scaled.cpp"):
        result = syntax_check(project_dir, generated, source)
        assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.parametrize("expression", ["42", "x.sizes()", "npu_rms_norm(x, gamma, eps)"])
def test_composite_giving_another_type_than_its_schema_names_the_entry(codegen, project_dir, expression):
    # Each is a valid expression of another type than the schema's Tensor.
    edit(project_dir / "op_plugin_functions.yaml", "composite: std::get<0>(npu_rms_norm(x, gamma, eps)) * scale",
         f'composite: "{expression}"')
    line = line_of(project_dir / "op_plugin_functions.yaml", f'composite: "{expression}"')
    generated = project_dir / "generated"
    codegen.generate(str(project_dir), str(generated))
    result = syntax_check(project_dir, generated, generated / "csrc" / "adapters" / "npu_rms_norm_scaled.cpp")
    assert result.returncode != 0
    assert (f"op_plugin_functions.yaml:{line} (npu_rms_norm_scaled): composite: the expression gives another type "
            f"than the schema returns (at::Tensor)") in result.stderr


def test_reading_kernel_files_passes_over_helpers_it_cannot_read(codegen, tmp_path):
    # A helper with a default argument or an unnamed parameter beside a kernel:
    # codegen reads the kernel and does not stop at the helper.
    kernel_parameters = sys.modules["codegen.kernel_signatures"].kernel_parameters

    source = tmp_path / "kernels.cpp"
    source.write_text('void check(int64_t i, const char* words = "") {\n}\n'
                      "void helper(int) {\n}\n"
                      "void my_kernel(const DeviceTensor& x, double s, const DeviceTensor& out) {\n}\n")
    assert kernel_parameters("my_kernel", str(source)) == [("DeviceTensor", "x"), ("double", "s"),
                                                          ("DeviceTensor", "out")]
    assert kernel_parameters("check", str(source)) == [("int64_t", "i"), ("char*", "words")]
