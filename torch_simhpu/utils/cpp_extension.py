"""Building operator packages outside torch_simhpu (as torch_npu's NpuExtension):

    from setuptools import setup
    from torch.utils.cpp_extension import BuildExtension
    from torch_simhpu.utils.cpp_extension import SimHPUExtension

    setup(name="custom_ops", packages=["custom_ops"],
          ext_modules=[SimHPUExtension("custom_ops._C", ["csrc/add_custom.cpp"])],
          cmdclass={"build_ext": BuildExtension})

Sources include <torch_simhpu/extension.h>. With yaml="op_plugin_functions.yaml"
(and derivatives="derivatives.yaml"), torch_simhpu's codegen runs on the
package's own YAML first: adapters, autograd, registrations, bindings, fake
kernels and stubs for the package, in the package's namespace.
"""
from __future__ import annotations

import os
import re

import torch.utils.cpp_extension as torch_cpp_extension

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Flags the backend's own kernels are built with; a package's kernels reach the
# same speed with them (elementwise loops use OpenMP and vectorise without
# trapping math). -fvisibility=hidden: a package exports its module init only,
# so its generated functions never interpose on the backend's.
COMPILE_FLAGS = ["-O2", "-g0", "-fopenmp", "-fno-trapping-math", "-fvisibility=hidden", "-Wno-sign-compare"]


def include_paths() -> list[str]:
    """torch_simhpu's SDK headers, then torch's."""
    return [os.path.join(_PACKAGE_DIR, "include"), *torch_cpp_extension.include_paths()]


def library_paths() -> list[str]:
    """The folder of libtorch_simhpu.so, then torch's."""
    return [os.path.join(_PACKAGE_DIR, "lib"), *torch_cpp_extension.library_paths()]


def SimHPUExtension(name: str, sources=(), *, yaml: str | None = None, derivatives: str | None = None,
                    **kwargs):
    """A setuptools Extension for an operator package, built with torch's
    BuildExtension: compiled against the SDK headers, linked with
    libtorch_simhpu.so. `name` is the module's full name ('my_ops._C').

    yaml/derivatives: run codegen on the package's op_plugin_functions.yaml and
    derivatives.yaml (in one folder, the package's root) now; the generated C++
    joins `sources`, and the generated Python goes into the package's
    `_generated/` folder, which `from my_ops._generated.ops import *` exposes."""
    sources = list(sources)
    include_dirs = list(kwargs.pop("include_dirs", []))
    if yaml is not None:
        generated = _run_codegen(name, yaml, derivatives)
        sources += _cpp_files(os.path.join(generated, "csrc"))
        include_dirs.append(os.path.join(generated, "include"))
    elif derivatives is not None:
        raise ValueError(f"SimHPUExtension({name!r}): derivatives= needs yaml= (the operators it differentiates)")
    if not sources:
        raise ValueError(f"SimHPUExtension({name!r}): no sources, and no yaml= to generate them from")
    kwargs["include_dirs"] = include_dirs + [os.path.join(_PACKAGE_DIR, "include")]
    kwargs["library_dirs"] = list(kwargs.pop("library_dirs", [])) + [os.path.join(_PACKAGE_DIR, "lib")]
    kwargs["libraries"] = list(kwargs.pop("libraries", [])) + ["torch_simhpu"]
    kwargs["extra_compile_args"] = _add_flags(kwargs.pop("extra_compile_args", None), COMPILE_FLAGS)
    # The library is found where this torch_simhpu is installed, whether or not
    # torch_simhpu was imported first.
    kwargs["extra_link_args"] = list(kwargs.pop("extra_link_args", [])) + [
        "-fopenmp", f"-Wl,-rpath,{os.path.join(_PACKAGE_DIR, 'lib')}"]
    extension = torch_cpp_extension.CppExtension(name, sources, **kwargs)
    # Read by torch_simhpu_packaging's setuptools hook: the package's version is
    # labelled with its sources' hash and the SDK's, so a rebuilt wheel reinstalls.
    extension.simhpu_sdk_stamp = sdk_stamp()
    if yaml is not None:
        # Read by the same hook: the generated Python ships even when setup()
        # lists only the package itself.
        extension.simhpu_generated_package = name.rpartition(".")[0] + "._generated"
    return extension


def sdk_stamp() -> str:
    """The hash of the SDK headers this torch_simhpu installed: what a package's
    kernels are checked against when they register."""
    with open(os.path.join(_PACKAGE_DIR, "include", "torch_simhpu", "sdk_stamp.h")) as f:
        return re.search(r'TORCH_SIMHPU_SDK_STAMP "([0-9a-f]+)"', f.read()).group(1)


def _add_flags(given, flags: list[str]):
    """Ours first, so the package's own flags win; torch's dict form ({'cxx': [...]}) too."""
    if isinstance(given, dict):
        return {**given, "cxx": flags + list(given.get("cxx", []))}
    return flags + list(given or [])


def _cpp_files(folder: str) -> list[str]:
    found = []
    for root, _, names in os.walk(folder):
        found += [os.path.join(root, n) for n in names if n.endswith(".cpp")]
    return sorted(found)


def _run_codegen(extension: str, yaml: str, derivatives: str | None) -> str:
    """Generates the package's sources under <root>/build/simhpu_codegen/<extension>/
    and its Python under <root>/<package>/_generated/; returns the former."""
    from torch_simhpu.codegen.errors import CodegenError
    from torch_simhpu.codegen.emit import write_tree
    from torch_simhpu.codegen.project import DERIVATIVES_YAML, OPS_YAML, generate
    from torch_simhpu.codegen.target import package

    root = os.path.dirname(os.path.abspath(yaml))
    if os.path.basename(yaml) != OPS_YAML:
        raise ValueError(f"SimHPUExtension({extension!r}): yaml= must name a file called {OPS_YAML} "
                         f"(got {yaml!r}); rename it")
    if derivatives is not None and os.path.abspath(derivatives) != os.path.join(root, DERIVATIVES_YAML):
        raise ValueError(f"SimHPUExtension({extension!r}): derivatives= must be {DERIVATIVES_YAML} beside "
                         f"{OPS_YAML} (got {derivatives!r})")
    target = package(extension)
    out = os.path.join(root, "build", "simhpu_codegen", extension)
    try:
        changed = generate(root, out, target)
    except CodegenError as e:
        raise SystemExit(f"codegen for {extension} failed:\n{e}") from None
    print(f"torch_simhpu codegen for {extension}: {len(changed)} file(s) changed")
    python_dir = os.path.join(out, "python", *target.package.split("."))
    files = {}
    for folder, _, names in os.walk(python_dir):
        for n in names:
            path = os.path.join(folder, n)
            with open(path, encoding="utf-8") as f:
                files[os.path.relpath(path, python_dir)] = f.read()
    write_tree(os.path.join(root, *target.package.split(".")), files)
    return out
