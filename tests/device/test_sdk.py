"""The SDK operator packages build against: headers and library in the wheel,
and what the runtime refuses from a package built for another release."""
import glob
import os
import re
import shutil
import subprocess

import pytest
import torch
import torch.utils.cpp_extension

import torch_simhpu
from torch_simhpu.utils import cpp_extension


def test_wheel_ships_headers_library_and_codegen():
    include = cpp_extension.include_paths()[0]
    assert os.path.isfile(os.path.join(include, "torch_simhpu", "extension.h"))
    assert os.path.isfile(os.path.join(cpp_extension.library_paths()[0], "libtorch_simhpu.so"))
    assert set(torch.utils.cpp_extension.include_paths()) <= set(cpp_extension.include_paths())
    import torch_simhpu.codegen.project  # noqa: F401


def test_library_exports_the_simhpu_namespace_only():
    library = os.path.join(cpp_extension.library_paths()[0], "libtorch_simhpu.so")
    symbols = subprocess.run(["nm", "-D", "--defined-only", "-C", library], capture_output=True, text=True,
                             check=True).stdout.splitlines()
    names = [line.split(" ", 2)[2] for line in symbols if len(line.split(" ", 2)) == 3]
    assert any(n.startswith("simhpu::find_kernel(") for n in names)
    assert any(n.startswith("simhpu::custom_op::registerUserCustomOp(") for n in names)
    foreign = [n for n in names if "simhpu::" not in n and not n.startswith(("typeinfo", "vtable"))]
    assert foreign == [], foreign[:5]


def test_umbrella_header_compiles_on_its_own(tmp_path):
    source = tmp_path / "uses_sdk.cpp"
    source.write_text("#include <torch_simhpu/extension.h>\nint main() { return 0; }\n")
    flags = [f"-I{p}" for p in cpp_extension.include_paths()]
    done = subprocess.run([os.environ.get("CXX", "c++"), "-std=c++20", "-fsyntax-only", *flags, str(source)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


OLD_RELEASE_KERNEL = r"""
#include <torch_simhpu/extension.h>
#include <torch/library.h>

void old_release_kernel(const simhpu::DeviceTensor& x) {}
SIMHPU_KERNEL(old_release_kernel);

at::Tensor old_release_op(const at::Tensor& x) {
  EXEC_CMD_FOR("sdk_test::old_release_op", old_release_kernel, x);
  return x;
}

namespace custom_op = simhpu::custom_op;

custom_op::PartialOutputMetaDataVector same_as_input(const custom_op::Stack& inputs) {
  const at::Tensor x = inputs[0].toTensor();
  return {{x.scalar_type(), x.sizes().vec()}};
}

// Registrations with problems, made while the library loads: each must be kept
// as refused (an exception here would end the process), then raised on use.
const bool registered = [] {
  custom_op::registerUserCustomOp("no_namespace", "old_release_kernel", same_as_input);
  custom_op::registerUserCustomOp("sdk_test::no_meta", "old_release_kernel", nullptr);
  custom_op::registerUserCustomOp("sdk_test::twice", "old_release_kernel", same_as_input);
  custom_op::registerUserCustomOp("sdk_test::twice", "old_release_kernel", same_as_input);
  custom_op::registerUserCustomOp("sdk_test::old_custom", "old_release_kernel", same_as_input);
  return true;
}();

at::Tensor run_custom(c10::string_view name, const at::Tensor& x) {
  return custom_op::UserCustomOpDescriptor::getUserCustomOpDescriptor(std::string(name)).execute({x})[0];
}

TORCH_LIBRARY(sdk_test, m) {
  m.def("old_release_op(Tensor x) -> Tensor");
  m.def("run_custom(str name, Tensor x) -> Tensor");
}
TORCH_LIBRARY_IMPL(sdk_test, PrivateUse1, m) {
  m.impl("old_release_op", &old_release_op);
  m.impl("run_custom", &run_custom);
}
"""


def test_what_a_package_registers_wrongly_is_refused_on_use_naming_it(tmp_path):
    # The package is compiled against a copy of the SDK whose version.h says 0.0.1.
    include = tmp_path / "include"
    shutil.copytree(cpp_extension.include_paths()[0], include)
    version_h = include / "torch_simhpu" / "version.h"
    version_h.write_text(re.sub(r'"[^"]+"', '"0.0.1"', version_h.read_text()))
    source = tmp_path / "old_release.cpp"
    source.write_text(OLD_RELEASE_KERNEL)
    torch.utils.cpp_extension.load(
        "sdk_old_release", [str(source)], extra_include_paths=[str(include)],
        extra_ldflags=[f"-L{cpp_extension.library_paths()[0]}", "-ltorch_simhpu"],
        build_directory=str(tmp_path), is_python_module=False, verbose=False)
    x = torch.ones(2, device="simhpu")
    with pytest.raises(RuntimeError, match=r"sdk_test::old_release_op: kernel 'old_release_kernel' was built against "
                                           r"torch_simhpu 0\.0\.1 with torch 2\.13 \(SDK headers [0-9a-f]{12}\), "
                                           r"but this process runs torch_simhpu " + re.escape(_version())):
        torch.ops.sdk_test.old_release_op(x)
    refusals = {
        "sdk_test::old_custom": r"custom op 'sdk_test::old_custom' was built against torch_simhpu 0\.0\.1",
        "no_namespace": r"expected the operator as 'namespace::name'",
        "sdk_test::no_meta": r"an OutputMetaFn is required",
        "sdk_test::twice": r"'sdk_test::twice' is registered twice",
    }
    for name, why in refusals.items():
        with pytest.raises(RuntimeError, match=re.escape(name) + ": .*" + why):
            torch.ops.sdk_test.run_custom(name, x)
    torch.testing.assert_close((x + 1).cpu(), torch.full((2,), 2.0))


OTHER_HEADERS_KERNEL = r"""
#include <torch_simhpu/extension.h>
#include <torch/library.h>

void other_headers_kernel(const simhpu::DeviceTensor& x) {}
SIMHPU_KERNEL(other_headers_kernel);

at::Tensor other_headers_op(const at::Tensor& x) {
  EXEC_CMD_FOR("sdk_test2::other_headers_op", other_headers_kernel, x);
  return x;
}

TORCH_LIBRARY(sdk_test2, m) { m.def("other_headers_op(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(sdk_test2, PrivateUse1, m) { m.impl("other_headers_op", &other_headers_op); }
"""


def test_a_package_built_against_another_builds_headers_is_refused_not_run(tmp_path):
    # Same release, other headers (a struct's layout may differ: running it could
    # crash). The SDK copy's stamp stands for headers of another build.
    include = tmp_path / "include"
    shutil.copytree(cpp_extension.include_paths()[0], include)
    (include / "torch_simhpu" / "sdk_stamp.h").write_text('#define TORCH_SIMHPU_SDK_STAMP "0123456789ab"\n')
    source = tmp_path / "other_headers.cpp"
    source.write_text(OTHER_HEADERS_KERNEL)
    torch.utils.cpp_extension.load(
        "sdk_other_headers", [str(source)], extra_include_paths=[str(include)],
        extra_ldflags=[f"-L{cpp_extension.library_paths()[0]}", "-ltorch_simhpu"],
        build_directory=str(tmp_path), is_python_module=False, verbose=False)
    x = torch.ones(2, device="simhpu")
    ours = cpp_extension.sdk_stamp()[:12]
    with pytest.raises(RuntimeError, match=r"sdk_test2::other_headers_op: kernel 'other_headers_kernel' was built "
                                           r"against torch_simhpu .* \(SDK headers 0123456789ab\), but this process "
                                           r"runs .* \(SDK headers " + ours + r"\); rebuild the package"):
        torch.ops.sdk_test2.other_headers_op(x)
    torch.testing.assert_close((x + 1).cpu(), torch.full((2,), 2.0))


def _version():
    with open(os.path.join(cpp_extension.include_paths()[0], "torch_simhpu", "version.h")) as f:
        return re.search(r'"([^"]+)"', f.read()).group(1)


def test_launching_a_kernel_no_library_registered_names_the_op():
    x = torch.ones(2, device="simhpu")
    with pytest.raises(RuntimeError, match=r"my_op: no device kernel named 'not_loaded_kernel' is registered"):
        torch_simhpu._C._launch_user_kernel("my_op", "not_loaded_kernel", [x], [], b"")
    torch.testing.assert_close((x * 3).cpu(), torch.full((2,), 3.0))


WRITES_KERNEL = r"""
#include <torch_simhpu/extension.h>
#include <torch/library.h>
#include <ATen/ops/empty_like.h>

using simhpu::DeviceTensor;
using simhpu::Out;

// out = 2 * x and half = x / 2, for float32; a negative x[0] fails on the device.
void sdk_double(const DeviceTensor& x, const Out<DeviceTensor>& out, const Out<DeviceTensor>& half) {
  const float* in = x.data_as<const float>();
  TORCH_CHECK(in[0] >= 0, "negative x[0]");
  for (int64_t i = 0; i < out.numel(); ++i) {
    out.data_as<float>()[i] = 2 * in[i];
    half.data_as<float>()[i] = in[i] / 2;
  }
}
SIMHPU_KERNEL(sdk_double);

// Launches sdk_double as `how` says: with its outputs marked, unmarked, or marked wrongly; returns out.
at::Tensor launch(const at::Tensor& x, c10::string_view how) {
  at::Tensor out = at::empty_like(x);
  at::Tensor half = at::empty_like(x);
  const char* op = "sdk_writes::launch";
  using simhpu::written;
  if (how == "marked") EXEC_CMD_FOR(op, sdk_double, x, written(out), written(half));
  else if (how == "unmarked") EXEC_CMD_FOR(op, sdk_double, x, out, half);
  else if (how == "input marked") EXEC_CMD_FOR(op, sdk_double, written(x), written(out), written(half));
  else if (how == "output unmarked") EXEC_CMD_FOR(op, sdk_double, x, written(out), half);
  else EXEC_CMD_FOR(op, sdk_double, x, out);
  return out;
}

TORCH_LIBRARY(sdk_writes, m) { m.def("launch(Tensor x, str how) -> Tensor"); }
TORCH_LIBRARY_IMPL(sdk_writes, PrivateUse1, m) { m.impl("launch", &launch); }
"""


@pytest.fixture(scope="module")
def writes_package(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sdk_writes")
    source = folder / "sdk_writes.cpp"
    source.write_text(WRITES_KERNEL)
    torch.utils.cpp_extension.load(
        "sdk_writes", [str(source)], extra_include_paths=cpp_extension.include_paths(),
        extra_ldflags=[f"-L{cpp_extension.library_paths()[0]}", "-ltorch_simhpu"],
        build_directory=str(folder), is_python_module=False, verbose=False)
    return torch.ops.sdk_writes.launch


@pytest.mark.parametrize("how", ["marked", "unmarked"])
def test_a_launch_marking_its_outputs_or_none_runs(writes_package, how):
    x = torch.arange(5.0, device="simhpu")
    torch.testing.assert_close(writes_package(x, how).cpu(), torch.arange(5.0) * 2)


def test_an_unmarked_launch_writes_what_the_kernels_signature_says(writes_package):
    # The kernel fails: what it writes (its Out parameter) is undefined from
    # then on, and what it only reads stays data. Unmarked and without the
    # signature, the runtime would have to take every argument as written.
    x = torch.tensor([-1.0, 2.0], device="simhpu")
    out = writes_package(x, "unmarked")
    with pytest.raises(RuntimeError, match="sdk_double.*negative x"):
        torch.simhpu.synchronize()
    torch.testing.assert_close(x.cpu(), torch.tensor([-1.0, 2.0]))
    with pytest.raises(RuntimeError, match="left undefined by a kernel that failed earlier.*sdk_double"):
        out.cpu()


@pytest.mark.parametrize("how, message", [
    ("input marked", "sdk_writes::launch: argument 0 of kernel 'sdk_double' is marked written(), but the kernel only "
                     "reads its parameter 0; a parameter the kernel writes has type Out<DeviceTensor>"),
    ("output unmarked", "sdk_writes::launch: kernel 'sdk_double' writes its parameter 2 (an Out<T>), but the launch "
                        "passes argument 2 as a tensor it only reads; mark it written(t)"),
    ("too few", "sdk_writes::launch: kernel 'sdk_double' takes 3 argument(s), the launch passes 2"),
])
def test_a_launch_at_odds_with_the_kernels_outputs_is_refused_at_the_call(writes_package, how, message):
    x = torch.arange(3.0, device="simhpu")
    with pytest.raises(RuntimeError, match=re.escape(message)):
        writes_package(x, how)
    torch.testing.assert_close(writes_package(x, "marked").cpu(), torch.arange(3.0) * 2)
