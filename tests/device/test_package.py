"""The installed wheel, not the source tree, is what the tests exercise."""
import inspect
import os
import pydoc
import re
import subprocess
import sys

import pytest
import torch

import torch_simhpu
from helpers import run_python
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
        assert torch_simhpu.__dict__[name].__doc__.strip()


def test_help_and_inspect_show_each_op_as_python_would():
    # The signature once, in Python's terms, and no pybind11 internals.
    assert str(inspect.signature(torch_simhpu.npu_rms_norm)) == "(x, gamma, eps=1e-06)"
    assert str(inspect.signature(torch_simhpu.npu_mul_add)) == "(x, y, z, *, out=None)"
    assert inspect.signature(torch_simhpu.npu_softplus_beta_).parameters["beta"].default == 1.0
    text = pydoc.render_doc(torch_simhpu.npu_rms_norm, renderer=pydoc.plaintext)
    assert text.count("npu_rms_norm(x, gamma, eps=1e-06)") == 1, text
    assert "PyCapsule" not in text and "at::Tensor" not in text and "torch.Tensor" not in text, text
    for name in _generated.CUSTOM_OPS:
        inspect.signature(getattr(torch_simhpu, name))


def test_every_public_callable_of_torch_simhpu_says_what_it_does():
    missing = []
    for name in dir(torch.simhpu):
        value = getattr(torch.simhpu, name)
        if name.startswith("_") or inspect.ismodule(value) or not callable(value):
            continue
        doc = inspect.getdoc(value) or ""
        if not doc.strip() or (inspect.isclass(value) and doc == inspect.getdoc(type)):
            missing.append(name)
    assert not missing, missing


REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_installed_version_is_the_hash_of_this_tree():
    # What makes `pip install dist/*.whl` install a rebuilt wheel: its version
    # changes with its sources. Fails, too, when the tree was edited after the
    # wheel was built and installed (rebuild it: scripts/setup_env.sh).
    import importlib.metadata
    import re

    import torch_simhpu_packaging

    with open(os.path.join(REPOSITORY, "csrc", "torch_simhpu", "version.h")) as f:
        release = re.search(r'TORCH_SIMHPU_VERSION "([^"]+)"', f.read()).group(1)
    installed = importlib.metadata.version("torch_simhpu")
    assert installed.startswith(release + "+g")
    assert installed == torch_simhpu_packaging.backend_version(REPOSITORY, release)


def test_the_wheel_requires_what_an_import_needs():
    """`pip install` of the wheel alone brings numpy: without it, importing torch warns
    "Failed to initialize NumPy" and tensors have no .numpy() (issue 28, item 5)."""
    import importlib.metadata

    required = {re.split(r"[=<>!~ ;\[]", r, maxsplit=1)[0].lower() for r in importlib.metadata.requires("torch_simhpu")}
    assert {"torch", "numpy", "jinja2", "pyyaml"} <= required


PACKAGE_SETUP = """
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension
from torch_simhpu.utils.cpp_extension import SimHPUExtension

setup(name="reinstall_probe", version="0.1.0", packages=["reinstall_probe"],
      ext_modules=[SimHPUExtension("reinstall_probe._C", ["probe.cpp"])],
      cmdclass={"build_ext": BuildExtension})
"""


def test_a_rebuilt_operator_package_installs_with_the_plain_command(tmp_path):
    # README's loop for a package: edit, `python setup.py bdist_wheel`,
    # `pip install --no-deps dist/*.whl` — into a venv of its own, so this
    # suite's environment is untouched.
    package = tmp_path / "package"
    (package / "reinstall_probe").mkdir(parents=True)
    (package / "reinstall_probe" / "__init__.py").write_text("")
    (package / "setup.py").write_text(PACKAGE_SETUP)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)

    def build_and_install(answer: int):
        (package / "probe.cpp").write_text(f"int reinstall_probe_answer() {{ return {answer}; }}\n")
        subprocess.run([sys.executable, "setup.py", "--quiet", "bdist_wheel"], cwd=package, check=True,
                       capture_output=True)
        wheels = sorted(os.listdir(package / "dist"))
        assert len(wheels) == 1, wheels  # the older wheel is gone: dist/*.whl names one
        pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                              "--no-deps", "--no-index", str(package / "dist" / wheels[0])],
                             capture_output=True, text=True, check=True)
        installed = [p.name for p in venv.glob("lib/python*/site-packages/reinstall_probe-*.dist-info")]
        assert installed == [f"reinstall_probe-{wheels[0].split('-')[1]}.dist-info"], (installed, pip.stdout)
        return wheels[0].split("-")[1], pip.stdout

    first, _ = build_and_install(1)
    second, _ = build_and_install(2)
    assert first.startswith("0.1.0+g") and second.startswith("0.1.0+g") and first != second
    again, unchanged = build_and_install(2)
    assert again == second and "Successfully installed" not in unchanged


@pytest.mark.parametrize("package", ["custom_ops", "custom_topk", "guide_ops", "my_add", "yaml_ops"])
def test_python_started_in_a_package_folder_says_its_source_folder_shadows_the_wheel(package):
    folder = os.path.join(REPOSITORY, "examples", package)
    done = subprocess.run([sys.executable, "-c", f"import torch, {package}"], cwd=folder, capture_output=True,
                          text=True)
    assert done.returncode != 0
    assert f"{package} is being imported from {os.path.join(folder, package)}, its source folder" in done.stderr, \
        done.stderr[-3000:]
    assert "Run Python from another folder" in done.stderr


def test_python_started_in_the_repository_root_says_the_source_tree_shadows_the_wheel():
    # `python -c "import torch"` there would load the source folder as torch_simhpu.
    done = subprocess.run([sys.executable, "-c", "import torch"], cwd=REPOSITORY, capture_output=True, text=True)
    assert done.returncode != 0
    assert f"torch_simhpu is being imported from {os.path.join(REPOSITORY, 'torch_simhpu')}, the source folder" \
        in done.stderr
    assert "Run Python from another folder" in done.stderr


YAML_PACKAGE_SETUP = """
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension
from torch_simhpu.utils.cpp_extension import SimHPUExtension

setup(name="lean_yaml_pkg", version="0.1.0", packages=["lean_yaml_pkg"],  # _generated not listed
      ext_modules=[SimHPUExtension("lean_yaml_pkg._C", yaml="op_plugin_functions.yaml")],
      cmdclass={"build_ext": BuildExtension})
"""

YAML_PACKAGE_OPS = """backend: simhpu
namespace: lean_yaml_pkg
custom:
  - func: npu_twice_plus(Tensor self, float bias=1.0) -> Tensor
    elementwise: self * 2 + bias
    dtypes: [float32]
    doc: 2 * self + bias.
  # ATen's own argument names (target, dtype): the generated code's locals stay out of their way.
  - func: npu_towards(Tensor self, Tensor target, float weight=0.5, *, ScalarType? dtype=None) -> Tensor
    elementwise: self + weight * (target - self)
    dtypes: [float32, float64]
    variants: [out, inplace]
    doc: self moved towards target by weight.
  - func: npu_sum_as(Tensor self, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor
    composite: at::sum(self, dim, keepdim, dtype)
    doc: The sum of self over dim (None, all), in dtype.
  # ATen's optional sizes: None or a list, and None or a number.
  - func: npu_add_rows(Tensor self, Tensor other, SymInt[1]? rows=None, SymInt? pad=None, str? mode=None, float[]? scales=None) -> Tensor
    elementwise: self + other
    dtypes: [float32]
    doc: self + other; rows and pad are passed and unused.
"""


def test_a_yaml_package_listing_only_itself_ships_its_generated_python_and_compiles(tmp_path):
    # README's setup.py shape with packages=["mypkg"]: the codegen's Python must
    # still ship, and the extension module's functions must trace under
    # torch.compile(fullgraph=True) even when nothing imports the package's ops.
    package = tmp_path / "package"
    (package / "lean_yaml_pkg").mkdir(parents=True)
    (package / "lean_yaml_pkg" / "__init__.py").write_text("")  # imports nothing of its own
    (package / "setup.py").write_text(YAML_PACKAGE_SETUP)
    (package / "op_plugin_functions.yaml").write_text(YAML_PACKAGE_OPS)
    (package / "derivatives.yaml").write_text("- name: npu_twice_plus(Tensor self, float bias=1.0) -> Tensor\n"
                                              "  self: grad * 2\n")
    subprocess.run([sys.executable, "setup.py", "--quiet", "bdist_wheel"], cwd=package, check=True,
                   capture_output=True)
    wheel = next((package / "dist").glob("*.whl"))
    import zipfile
    shipped = zipfile.ZipFile(wheel).namelist()
    for module in ("ops.py", "fake.py", "compile.py", "__init__.py"):
        assert f"lean_yaml_pkg/_generated/{module}" in shipped, shipped
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site),
                    str(wheel)], check=True)
    code = """
import torch, torch_simhpu
from lean_yaml_pkg import _C
x = torch.randn(5, device="simhpu")
compiled = torch.compile(lambda t: _C.npu_twice_plus(t, 0.5).relu(), fullgraph=True)
torch.testing.assert_close(compiled(x).cpu(), (x.cpu() * 2 + 0.5).relu())
t = torch.randn(5, dtype=torch.float64, device="simhpu")
expected = torch.lerp(x.cpu().double(), t.cpu(), 0.25)
torch.testing.assert_close(_C.npu_towards(x, target=t, weight=0.25, dtype=torch.float16).cpu(), expected)
out = torch.empty(5, dtype=torch.float64, device="simhpu")
assert _C.npu_towards(x.double(), t, 0.25, out=out) is out
torch.testing.assert_close(out.cpu(), expected)
y = x.double()
_C.npu_towards_(y, t, 0.25)
torch.testing.assert_close(y.cpu(), expected)
towards = torch.compile(lambda a, b: _C.npu_towards(a, b, 0.25), fullgraph=True)
torch.testing.assert_close(towards(x, t).cpu(), expected)
torch.testing.assert_close(_C.npu_sum_as(x, dtype=torch.float64).cpu(), x.cpu().double().sum())
m = torch.randn(3, 4, device="simhpu")
torch.testing.assert_close(_C.npu_sum_as(m, [1], True).cpu(), m.cpu().sum(1, keepdim=True))
torch.testing.assert_close(_C.npu_sum_as(m, dim=[0, 1]).cpu(), m.cpu().sum())
torch.testing.assert_close(_C.npu_add_rows(m, m, [3], 2, "nearest", [2.0, 0.5]).cpu(), 2 * m.cpu())
torch.testing.assert_close(_C.npu_add_rows(m, m).cpu(), 2 * m.cpu())
print("OK")
"""
    done = run_python(code, tmp_path, PYTHONPATH=str(site))
    assert done.returncode == 0 and "OK" in done.stdout, done.stderr[-3000:]
