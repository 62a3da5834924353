"""A kernel or op_plugin adapter whose parameters do not fit its YAML entry is
a compile error naming the entry (generated/kernel_signatures/KERNEL.h and
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
    command = [COMPILER, "-std=c++20", "-fsyntax-only", "-fopenmp", *(f"-I{i}" for i in includes), str(source)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("old, new", [
    ("double beta,", "bool beta,"),  # a parameter of another type
    ("const Out<DeviceTensor>& out)", "const DeviceTensor& out)"),  # the output, read only: never written
    ("const DeviceTensor& self,", "const Out<DeviceTensor>& self,"),  # the input, written: overwritten
], ids=["type", "output-read-only", "input-written"])
def test_kernel_that_does_not_fit_its_exec_entry_names_the_entry(codegen, project_dir, monkeypatch, old, new):
    kernel = project_dir / "csrc" / "kernels" / "swish.cpp"
    edit(kernel, "void swish(const DeviceTensor& self, double beta, const Out<DeviceTensor>& out)",
         "void swish(const DeviceTensor& self, double beta, const Out<DeviceTensor>& out)".replace(old, new))
    entry_line = line_of(project_dir / "op_plugin_functions.yaml", "func: npu_swish(")
    # codegen's reading of the kernel file would refuse the entry first; the compiler must too.
    monkeypatch.setattr(sys.modules["codegen.model.kernel_signatures"], "mismatches", lambda *args: [])
    generated = project_dir / "generated"
    codegen.generate(str(project_dir), str(generated))
    result = syntax_check(project_dir, generated, kernel)
    assert result.returncode != 0
    assert f"op_plugin_functions.yaml:{entry_line} (npu_swish): exec: arguments do not fit the kernel" in result.stderr
    # That line is the error: the kernel's invoker, whose argument conversions
    # would add pages of std::variant errors, is not instantiated.
    assert result.stderr.count("error:") == 1, result.stderr
    assert "variant" not in result.stderr


def check_problems(codegen, project_dir) -> str:
    try:
        codegen.load_project(str(project_dir))
    except codegen.CodegenError as e:
        return str(e)
    raise AssertionError("codegen check passed")


def test_kernel_parameter_no_argument_is_passed_as_is_refused_by_check(codegen, project_dir):
    # A schema float arrives as a C++ double: a float parameter could never be launched.
    edit(project_dir / "csrc" / "kernels" / "swish.cpp", "void swish(const DeviceTensor& self, double beta,",
         "void swish(const DeviceTensor& self, float beta,")
    entry_line = line_of(project_dir / "op_plugin_functions.yaml", "exec: swish,")
    problems = check_problems(codegen, project_dir)
    assert f"op_plugin_functions.yaml:{entry_line}" in problems
    assert "the kernel's parameter 'beta' has type float" in problems
    assert "'beta' (float) needs double or std::optional<double>" in problems


def test_kernel_that_only_reads_its_output_parameter_is_refused_by_check(codegen, project_dir):
    # rms_norm writes y and rstd; declared read-only, rstd would never be written.
    edit(project_dir / "csrc" / "kernels" / "rms_norm.cpp", "const Out<DeviceTensor>& y, const Out<DeviceTensor>& rstd)",
         "const Out<DeviceTensor>& y, const DeviceTensor& rstd)")
    entry_line = line_of(project_dir / "op_plugin_functions.yaml", "exec: rms_norm,")
    problems = check_problems(codegen, project_dir)
    assert (f"op_plugin_functions.yaml:{entry_line}: npu_rms_norm: field 'exec': output 'rstd' is passed to the "
            f"kernel's parameter 'rstd' (DeviceTensor), which the kernel only reads") in problems


def test_kernel_file_without_its_signature_header_is_refused_by_check(codegen, project_dir):
    kernel = project_dir / "csrc" / "kernels" / "swish.cpp"
    edit(kernel, '#include "generated/kernel_signatures/swish.h"\n', "")
    problems = check_problems(codegen, project_dir)
    assert "csrc/kernels/swish.cpp registers kernel 'swish' without including generated/kernel_signatures/swish.h" \
        in problems
    assert 'add #include "generated/kernel_signatures/swish.h" to that file' in problems


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
    kernel_parameters = sys.modules["codegen.model.kernel_signatures"].kernel_parameters

    source = tmp_path / "kernels.cpp"
    source.write_text('void check(int64_t i, const char* words = "") {\n}\n'
                      "void helper(int) {\n}\n"
                      "void my_kernel(const DeviceTensor& x, double s, const Out<DeviceTensor>& out) {\n}\n")
    assert kernel_parameters("my_kernel", str(source)) == [("DeviceTensor", "x"), ("double", "s"),
                                                          ("Out<DeviceTensor>", "out")]
    assert kernel_parameters("check", str(source)) == [("int64_t", "i"), ("char*", "words")]


def test_dtypes_the_kernel_does_not_dispatch_on_are_refused_by_check(codegen, project_dir):
    # npu_swish's kernel dispatches with SIMHPU_DISPATCH_FLOATING: int64 would build and fail when called.
    yaml = project_dir / "op_plugin_functions.yaml"
    text = yaml.read_text()
    start = text.index("func: npu_swish(")
    at = text.index("dtypes: [float32, float64, float16, bfloat16]", start)
    yaml.write_text(text[:at] + "dtypes: [float32, float64, float16, bfloat16, int64]" +
                    text[at + len("dtypes: [float32, float64, float16, bfloat16]"):])
    line = line_of(yaml, "dtypes: [float32, float64, float16, bfloat16, int64]")
    problems = check_problems(codegen, project_dir)
    assert f"op_plugin_functions.yaml:{line}" in problems
    assert "kernel 'swish' dispatches on bfloat16, float16, float32, float64, not on int64" in problems


@pytest.mark.parametrize("dispatch, dtypes", [
    ("AT_DISPATCH_FLOATING_TYPES(t, \"k\", f)", {"float32", "float64"}),
    ("AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, c10::ScalarType::BFloat16, t, \"k\", f)",
     {"float32", "float64", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16"}),
    ("AT_DISPATCH_INTEGRAL_TYPES_AND(at::kBool, t, \"k\", f)", {"uint8", "int8", "int16", "int32", "int64", "bool"}),
    ("AT_DISPATCH_V2(t, \"k\", f)", None),  # a macro the reader does not know: nothing is compared
    ("f()", None),
])
def test_reading_the_dtypes_a_kernel_dispatches_on(codegen, tmp_path, dispatch, dtypes):
    source = tmp_path / "k.cpp"
    source.write_text(f"void my_kernel(const DeviceTensor& x) {{\n  {dispatch};\n}}\nSIMHPU_KERNEL(my_kernel);\n")
    dispatched = sys.modules["codegen.model.kernel_signatures"].dispatched_dtypes("my_kernel", str(source))
    assert (set(dispatched) if dispatched is not None else None) == dtypes
