"""Builds torch_simhpu: codegen from the YAML files, then the C++ extension.

    python setup.py bdist_wheel      # dist/torch_simhpu-*.whl
"""
import glob
import hashlib
import os
import shutil
import subprocess

# An installed torch_simhpu is loaded by `import torch` (its torch.backends entry
# point); here, in the source tree, that would import the unbuilt package instead.
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import torch  # noqa: E402
from setuptools import setup  # noqa: E402
from setuptools.command.build_py import build_py  # noqa: E402
from torch.utils.cpp_extension import BuildExtension, CppExtension  # noqa: E402

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

    def build_extension(self, ext):
        # torch's BuildExtension has replaced compiler.compile with its ninja
        # driver by now; wrap it so every translation unit gets the
        # precompiled torch headers, built first with the very same flags.
        ninja_compile = self.compiler.compile

        def compile_with_pch(sources, output_dir=None, macros=None, include_dirs=None, debug=0,
                             extra_preargs=None, extra_postargs=None, depends=None):
            header = precompile_torch_headers(self.compiler, output_dir, macros, include_dirs, debug,
                                              extra_preargs, extra_postargs, depends)
            if header is not None:
                use_pch = ["-include", header]
                if isinstance(extra_postargs, dict):
                    extra_postargs = {**extra_postargs, "cxx": extra_postargs["cxx"] + use_pch}
                else:
                    extra_postargs = list(extra_postargs) + use_pch
            return ninja_compile(sources, output_dir, macros, include_dirs, debug, extra_preargs, extra_postargs,
                                 depends)

        self.compiler.compile = compile_with_pch
        try:
            super().build_extension(ext)
        finally:
            self.compiler.compile = ninja_compile


PCH_SOURCE = os.path.join("csrc", "pch", "torch_headers.h")


def precompile_torch_headers(compiler, output_dir, macros, include_dirs, debug, extra_preargs, extra_postargs,
                             depends):
    """Builds torch_headers.h.gch beside a copy of the header, with the flags torch's
    ninja driver gives every source; returns the header to -include (None: no PCH)."""
    _, _, postargs, pp_opts, _ = compiler._setup_compile(output_dir, macros, include_dirs, [], depends,
                                                         extra_postargs)
    post_cflags = postargs["cxx"] if isinstance(postargs, dict) else list(postargs)
    cflags = compiler.compiler_so[1:] + compiler._get_cc_args(pp_opts, debug, extra_preargs)
    if not any(flag.startswith("-std=") for flag in cflags + post_cflags):
        post_cflags.append("-std=c++20")  # what torch's ninja writer adds to every source
    pch_dir = os.path.join(os.path.abspath(output_dir), "pch")
    header = os.path.join(pch_dir, "torch_headers.h")
    # The compiler torch's ninja file names (it reads CXX the same way).
    command = [os.environ.get("CXX", "c++"), *cflags, "-x", "c++-header", header, "-o", header + ".gch", *post_cflags]

    text = open(os.path.join(ROOT, PCH_SOURCE)).read()
    stamp = hashlib.sha256("\n".join([text, torch.__version__, *command]).encode()).hexdigest()
    stamp_file = header + ".stamp"
    if os.path.exists(header + ".gch") and os.path.exists(stamp_file) and open(stamp_file).read() == stamp:
        return header  # unchanged: keep its timestamp, so ninja recompiles nothing for it
    os.makedirs(pch_dir, exist_ok=True)
    with open(header, "w") as f:
        f.write(text)
    print("precompiling torch headers:", " ".join(command), flush=True)
    if subprocess.run(command).returncode != 0:
        print("warning: precompiled header failed; compiling without it", flush=True)
        return None
    with open(stamp_file, "w") as f:
        f.write(stamp)
    return header


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
    # -Winvalid-pch: say so if the precompiled torch headers cannot be used.
    # -Wno-sign-compare: Python's flags turn it on, and torch's own headers trip it in every file.
    extra_compile_args=["-O2", "-g0", "-fvisibility=hidden", "-fopenmp", "-fno-trapping-math", "-Winvalid-pch",
                        "-Wno-sign-compare"],
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
    # `import torch` loads the device (unless TORCH_DEVICE_BACKEND_AUTOLOAD=0), before
    # any backward can size the autograd engine's device threads without it.
    entry_points={"torch.backends": ["torch_simhpu = torch_simhpu:_autoload"]},
    python_requires=">=3.10",
)
