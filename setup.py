"""Builds torch_simhpu: codegen from the YAML files, then the C++ extension.

    python setup.py bdist_wheel      # dist/torch_simhpu-*.whl
"""
import glob
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = os.path.dirname(os.path.abspath(__file__))
GENERATED = os.path.join("build", "generated")


def run_codegen() -> None:
    """Regenerate sources; unchanged files keep their timestamps, so ninja skips them."""
    from codegen.project import generate

    changed = generate(ROOT, os.path.join(ROOT, GENERATED))
    print(f"codegen: {len(changed)} generated file(s) changed")


class BuildPyWithCodegen(build_py):
    """Adds the generated Python files (fake kernels, stubs) to the package."""

    def run(self):
        run_codegen()
        super().run()
        generated_python = os.path.join(GENERATED, "python", "torch_simhpu")
        for src in glob.glob(os.path.join(generated_python, "**", "*.py*"), recursive=True):
            dst = os.path.join(self.build_lib, "torch_simhpu", os.path.relpath(src, generated_python))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copyfile(src, dst)


class BuildExtWithCodegen(BuildExtension):
    def run(self):
        run_codegen()
        for ext in self.extensions:
            ext.sources = sorted(set(ext.sources) | set(_generated_sources()))
        super().run()


def _generated_sources():
    return glob.glob(os.path.join(GENERATED, "csrc", "**", "*.cpp"), recursive=True)


def _handwritten_sources():
    patterns = ["csrc/**/*.cpp", "op_plugin/**/*.cpp"]
    return sorted(p for pattern in patterns for p in glob.glob(pattern, recursive=True))


extension = CppExtension(
    name="torch_simhpu._C",
    sources=_handwritten_sources(),
    include_dirs=[os.path.join(ROOT, "csrc"), os.path.join(ROOT, GENERATED, "include")],
    # -g0: Python's default flags add -g, which costs build time and wheel size.
    # -fopenmp: at::parallel_for is inline and only runs in parallel where the
    # includer is built with OpenMP. The libgomp it links is torch's own at run
    # time (torch loads its libgomp.so.1 first; the soname matches).
    # -fno-trapping-math: lets the compiler turn `c ? a : b` on floats into
    # vector blends (nothing here reads floating-point exception flags).
    extra_compile_args=["-O2", "-g0", "-fvisibility=hidden", "-fopenmp", "-fno-trapping-math"],
    extra_link_args=["-fopenmp"],
)

setup(
    name="torch_simhpu",
    version="0.1.0",
    description="A YAML-driven operator framework for a simulated PyTorch accelerator",
    packages=["torch_simhpu"],
    package_data={"torch_simhpu": ["*.pyi", "py.typed"]},
    ext_modules=[extension],
    cmdclass={"build_py": BuildPyWithCodegen, "build_ext": BuildExtWithCodegen.with_options(use_ninja=True)},
    install_requires=["torch==2.13.0"],
    python_requires=">=3.10",
)
