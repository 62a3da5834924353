"""Builds torch_simhpu: codegen from the YAML files, then the C++ extension.

    python setup.py bdist_wheel      # dist/torch_simhpu-*.whl
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import warnings

# An installed torch_simhpu is loaded by `import torch` (its torch.backends entry
# point); here, in the source tree, that would import the unbuilt package instead.
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import torch  # noqa: E402
from setuptools import setup  # noqa: E402
from setuptools.command.build_py import build_py  # noqa: E402
from torch.utils.cpp_extension import BuildExtension, CppExtension  # noqa: E402

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, ROOT)  # pip runs this file with another working folder on sys.path

import torch_simhpu_packaging  # noqa: E402
from build_tools import ninja_output, precompiled_headers  # noqa: E402

ninja_output.install(ROOT)  # one line per translation unit (SIMHPU_VERBOSE_BUILD=1: the commands)
# bdist_wheel stages the wheel with setuptools' `install` command, which then
# warns, in an 18-line box, that running `setup.py install` is deprecated:
# advice about a command nobody typed.
warnings.filterwarnings("ignore", message="setup.py install is deprecated")

GENERATED = os.path.join("build", "generated")
CORE_LIBRARY = "torch_simhpu.lib.libtorch_simhpu"


def run_codegen() -> None:
    """Regenerate sources; unchanged files keep their timestamps, so ninja skips them."""
    from codegen.project import generate

    changed = generate(ROOT, os.path.join(ROOT, GENERATED))
    print(f"codegen: {len(changed)} generated file(s) changed")


class BuildPyWithCodegen(build_py):
    """Adds the generated Python files (fake kernels, stubs) to the package."""

    def run(self):
        run_codegen()
        _remove_python_files(os.path.join(self.build_lib, "torch_simhpu"))
        super().run()
        _install_headers(os.path.join(self.build_lib, "torch_simhpu", "include"))
        generated_python = os.path.join(GENERATED, "python", "torch_simhpu")
        for src in glob.glob(os.path.join(generated_python, "**", "*.py*"), recursive=True):
            dst = os.path.join(self.build_lib, "torch_simhpu", os.path.relpath(src, generated_python))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copyfile(src, dst)


def _remove_python_files(folder: str) -> None:
    """An earlier build's Python and package data: a module this tree has moved (into a package)
    would otherwise ship from build/ beside its new place. The compiled libraries stay."""
    for pattern in ("*.py", "*.pyi", "*.json", "*.html", "*.j2", "py.typed"):
        for path in glob.glob(os.path.join(folder, "**", pattern), recursive=True):
            os.remove(path)


def _sdk_headers() -> list[str]:
    """The SDK for operator packages: every header under csrc/ (as they include
    each other: runtime/, aten/, kernels/, ..., torch_simhpu/extension.h), not the PCH."""
    headers = glob.glob(os.path.join(ROOT, "csrc", "**", "*.h"), recursive=True)
    return sorted(os.path.relpath(h, ROOT) for h in headers if os.path.relpath(h, ROOT).split(os.sep)[1] != "pch")


def _sdk_stamp() -> str:
    """The hash of the SDK headers: a package compiled against other ones is
    refused by the runtime (runtime/build_info.h) instead of crashing it."""
    return torch_simhpu_packaging.tree_digest(ROOT, _sdk_headers())


def _install_headers(include_dir: str) -> None:
    for header in _sdk_headers():
        dst = os.path.join(include_dir, os.path.relpath(header, "csrc"))
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(os.path.join(ROOT, header), dst)
    with open(os.path.join(include_dir, "torch_simhpu", "sdk_stamp.h"), "w") as f:
        f.write("#pragma once\n// Written when the wheel was built: the hash of these headers.\n"
                f'#define TORCH_SIMHPU_SDK_STAMP "{_sdk_stamp()}"\n')


SDK_STAMP_SOURCE = os.path.join("build", "sdk_stamp", "sdk_stamp.cpp")


def _write_sdk_stamp_source() -> None:
    """The runtime's own copy of the stamp, in a translation unit of its own (a
    header edit recompiles only it); rewritten only when it changes."""
    text = ("// Written by setup.py: the hash of the SDK headers this library installs.\n"
            f'namespace simhpu {{\nconst char* runtime_sdk_stamp() {{\n  return "{_sdk_stamp()}";\n}}\n}}\n')
    path = os.path.join(ROOT, SDK_STAMP_SOURCE)
    if os.path.exists(path) and open(path).read() == text:
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def _version() -> str:
    """TORCH_SIMHPU_VERSION from csrc/torch_simhpu/version.h (the one place it is
    written), labelled with the hash of the sources: a rebuilt wheel whose sources
    changed is a new version, which `pip install dist/*.whl` installs."""
    with open(os.path.join(ROOT, "csrc", "torch_simhpu", "version.h")) as f:
        release = re.search(r'#define TORCH_SIMHPU_VERSION "([^"]+)"', f.read()).group(1)
    return torch_simhpu_packaging.backend_version(ROOT, release)


class BuildExtWithCodegen(BuildExtension):
    def run(self):
        run_codegen()
        _write_sdk_stamp_source()
        for ext in self.extensions:
            python = ext.name != CORE_LIBRARY
            ext.sources = sorted(set(ext.sources) | set(_generated_sources(python)))
            if not python:
                ext.sources.append(SDK_STAMP_SOURCE)
        if self.inplace:  # the library's folder is made by the build, not kept in git
            os.makedirs(os.path.join(ROOT, *CORE_LIBRARY.split(".")[:-1]), exist_ok=True)
        super().run()

    def get_ext_filename(self, fullname):
        # A plain shared library, not a Python module. distutils asks with the
        # last component of the name, setuptools with the whole of it.
        if fullname == CORE_LIBRARY:
            return os.path.join(*CORE_LIBRARY.split(".")[:-1], "libtorch_simhpu.so")
        if fullname == CORE_LIBRARY.split(".")[-1]:
            return "libtorch_simhpu.so"
        return super().get_ext_filename(fullname)

    def build_extension(self, ext):
        # torch's BuildExtension has replaced compiler.compile with its ninja
        # driver by now; wrap it so every translation unit gets the smallest
        # tier of precompiled torch headers that covers it (build_tools/).
        ninja_compile = self.compiler.compile

        def compile_with_pch(sources, output_dir=None, macros=None, include_dirs=None, debug=0,
                             extra_preargs=None, extra_postargs=None, depends=None):
            tiers = precompiled_header_tiers(self.compiler, output_dir, macros, include_dirs, debug,
                                             extra_preargs, extra_postargs, depends)
            by_tier = precompiled_headers.assign_tiers(sources, INCLUDE_DIRS, tiers)
            for name in precompiled_headers.TIERS:
                if by_tier[name]:
                    tiers[name].start()
            # Each tier compiles in a folder (and a ninja file) of its own; the
            # units without torch headers compile while the headers build.
            objects = []
            for name, tier_sources in by_tier.items():
                if not tier_sources:
                    continue
                postargs = extra_postargs
                header = tiers[name].finish() if name in tiers else None
                if header is not None:
                    use_pch = ["-include", header]
                    if isinstance(postargs, dict):
                        postargs = {**postargs, "cxx": postargs["cxx"] + use_pch}
                    else:
                        postargs = list(postargs) + use_pch
                objects += ninja_compile(tier_sources, os.path.join(output_dir, f"pch-{name}"), macros,
                                         include_dirs, debug, extra_preargs, postargs, depends)
            return objects

        if ext.name != CORE_LIBRARY:  # link against the library built just before
            ext.library_dirs = [os.path.dirname(self.get_ext_fullpath(CORE_LIBRARY)), *ext.library_dirs]
        self.compiler.compile = compile_with_pch
        try:
            super().build_extension(ext)
        finally:
            self.compiler.compile = ninja_compile


def precompiled_header_tiers(compiler, output_dir, macros, include_dirs, debug, extra_preargs, extra_postargs,
                             depends) -> dict:
    """The tiers' headers, with the flags torch's ninja driver gives every source."""
    _, _, postargs, pp_opts, _ = compiler._setup_compile(output_dir, macros, include_dirs, [], depends,
                                                         extra_postargs)
    post_cflags = postargs["cxx"] if isinstance(postargs, dict) else list(postargs)
    # The one flag that differs between the library and the module; torch's headers never read it.
    post_cflags = [flag for flag in post_cflags if not flag.startswith("-DTORCH_EXTENSION_NAME=")]
    cflags = compiler.compiler_so[1:] + compiler._get_cc_args(pp_opts, debug, extra_preargs)
    if not any(flag.startswith("-std=") for flag in cflags + post_cflags):
        post_cflags.append("-std=c++20")  # what torch's ninja writer adds to every source
    compiler_name = os.environ.get("CXX", "c++")  # the compiler torch's ninja file names (it reads CXX too)
    return precompiled_headers.make_tiers(ROOT, output_dir, compiler_name, cflags, post_cflags, torch.__version__)


def _generated_sources(python: bool):
    """Generated C++: the pybind11 bindings go into _C, everything else into the library."""
    sources = glob.glob(os.path.join(GENERATED, "csrc", "**", "*.cpp"), recursive=True)
    return [s for s in sources if (os.path.basename(s) == "python_bindings.cpp") == python]


def _handwritten_sources(python: bool):
    patterns = ["csrc/python/**/*.cpp"] if python else ["csrc/**/*.cpp", "op_plugin/**/*.cpp"]
    found = {p for pattern in patterns for p in glob.glob(pattern, recursive=True)}
    if not python:
        found -= set(glob.glob("csrc/python/**/*.cpp", recursive=True))
    return sorted(found)


# -g0: Python's default flags add -g, which costs build time and wheel size.
# -fopenmp: at::parallel_for is inline and only runs in parallel where the
# includer is built with OpenMP. The libgomp it links is torch's own at run
# time (torch loads its libgomp.so.1 first; the soname matches).
# -fno-trapping-math: lets the compiler turn `c ? a : b` on floats into
# vector blends (nothing here reads floating-point exception flags).
# -Winvalid-pch: say so if the precompiled torch headers cannot be used.
# -Wno-sign-compare: Python's flags turn it on, and torch's own headers trip it in every file.
# -fno-semantic-interposition: calls within a library may be inlined or bound
# directly (exports are chosen by version scripts, not by -fvisibility, so both
# libraries compile with the same flags and share one precompiled header).
COMPILE_FLAGS = ["-O2", "-g0", "-fopenmp", "-fno-trapping-math", "-Winvalid-pch", "-Wno-sign-compare",
                 "-fno-semantic-interposition"]
# A tuple: CppExtension appends torch's include folders to the list it is given.
INCLUDE_DIRS = (os.path.join(ROOT, "csrc"), os.path.join(ROOT, GENERATED, "include"))

# libtorch_simhpu.so: the device runtime, the ATen glue, the kernels and the
# generated operators; what out-of-tree operator packages link against. Its
# dynamic symbols are exactly namespace simhpu (exports.map): torch's inline
# code compiled into it stays local, as -fvisibility=hidden would keep it, and
# -Bsymbolic-functions binds its own calls at link time (no PLT on the launch path).
# Kineto's plugin headers (csrc/profiler/kineto_plugin.cpp) include each other by bare name.
KINETO_INCLUDE = os.path.join(os.path.dirname(torch.__file__), "include", "kineto")

core_library = CppExtension(
    name=CORE_LIBRARY,
    sources=_handwritten_sources(python=False),
    include_dirs=[*INCLUDE_DIRS, KINETO_INCLUDE],
    extra_compile_args=COMPILE_FLAGS,
    extra_link_args=["-fopenmp", f"-Wl,--version-script={os.path.join(ROOT, 'csrc', 'exports.map')}",
                     "-Wl,-Bsymbolic-functions", "-Wl,-soname,libtorch_simhpu.so"],
)

# torch_simhpu._C: the Python module, linked against the library beside it. Its
# symbols are hidden, as pybind11 asks of modules (it exports PyInit__C alone):
# pybind11's own types are hidden, and a binding of a visible class
# (ProcessGroupSimHPU) would otherwise warn of the mismatch on every build.
python_module = CppExtension(
    name="torch_simhpu._C",
    sources=_handwritten_sources(python=True),
    include_dirs=list(INCLUDE_DIRS),
    libraries=["torch_simhpu"],
    extra_compile_args=COMPILE_FLAGS + ["-fvisibility=hidden"],
    extra_link_args=["-fopenmp", "-Wl,-rpath,$ORIGIN/lib",
                     f"-Wl,--version-script={os.path.join(ROOT, 'csrc', 'python', 'exports.map')}"],
)

setup(
    name="torch_simhpu",
    version=_version(),
    description="A YAML-driven operator framework for a simulated PyTorch accelerator",
    # The codegen ships inside the wheel, for operator packages' own YAML.
    py_modules=["torch_simhpu_packaging"],
    packages=["torch_simhpu", "torch_simhpu.device", "torch_simhpu._inductor", "torch_simhpu.simulation", "torch_simhpu.utils",
              "torch_simhpu.testing",
              "torch_simhpu.codegen", "torch_simhpu.codegen.model", "torch_simhpu.codegen.simhpu_yaml",
              "torch_simhpu.codegen.op_plugin", "torch_simhpu.codegen.derivatives", "torch_simhpu.codegen.dest"],
    package_dir={"torch_simhpu.codegen": "codegen"},
    package_data={"torch_simhpu": ["*.pyi", "py.typed"], "torch_simhpu.simulation": ["profiles/*.json", "report.html"],
                  "torch_simhpu.codegen": ["templates/*.j2"]},
    ext_modules=[core_library, python_module],  # in this order: _C links the library
    cmdclass={"build_py": BuildPyWithCodegen, "build_ext": BuildExtWithCodegen.with_options(use_ninja=True),
              "bdist_wheel": torch_simhpu_packaging.keeping_one_wheel(torch_simhpu_packaging.default_bdist_wheel())},
    # jinja2 and pyyaml: torch_simhpu.codegen, run when an operator package with YAML builds.
    # numpy: torch's CPU wheel warns at every import without it ("Failed to initialize NumPy").
    install_requires=["torch==2.13.0", "jinja2>=3.1", "pyyaml>=6.0", "numpy"],
    # `import torch` loads the device (unless TORCH_DEVICE_BACKEND_AUTOLOAD=0), before
    # any backward can size the autograd engine's device threads without it.
    entry_points={"torch.backends": ["torch_simhpu = torch_simhpu:_autoload"],
                  # Operator packages built with SimHPUExtension get content-labelled versions too.
                  "setuptools.finalize_distribution_options": [
                      "torch_simhpu_packages = torch_simhpu_packaging:label_simhpu_package"]},
    python_requires=">=3.10",
)
