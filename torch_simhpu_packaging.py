"""Versions that follow what was built, so `pip install dist/*.whl` installs a rebuilt wheel.

pip skips a wheel whose version is already installed, so a wheel rebuilt after an
edit would be silently ignored. torch_simhpu's wheel, and every operator package
built with SimHPUExtension, therefore carry a local version label that is a hash
of their sources ("0.1.0+g3fa9c2d1e4b0"): a changed source is a new version, an
unchanged tree rebuilds to the same one. bdist_wheel also removes the
distribution's older wheels from dist/, where `pip install dist/*.whl` would
otherwise be given two versions of one package.

This is a top-level module, not part of the torch_simhpu package, because
setuptools loads its hook (`label_simhpu_package`) for every build in the
environment: it must not import torch.
"""
from __future__ import annotations

import glob
import hashlib
import os
import re

# Folders that hold build outputs, caches and environments, never sources.
_SKIPPED_FOLDERS = {"build", "dist", "__pycache__", ".git", ".venv", "venv", "node_modules"}
_SKIPPED_SUFFIXES = (".so", ".o", ".pyc", ".whl", ".log", ".egg-info")
_LARGEST_SOURCE = 1 << 20  # bigger files are data, not something a build reads


def tree_digest(root: str, paths: list[str], extra: str = "") -> str:
    """A hash of the files under `paths` (folders or files, relative to root):
    their relative names and contents, in a fixed order. `extra` joins it (for
    what the build depends on outside the tree)."""
    digest = hashlib.sha256(extra.encode())
    for rel in sorted(_source_files(root, paths)):
        with open(os.path.join(root, rel), "rb") as f:
            content = f.read()
        digest.update(rel.replace(os.sep, "/").encode() + b"\0" + len(content).to_bytes(8, "little") + content)
    return digest.hexdigest()


def _source_files(root: str, paths: list[str]):
    for path in paths:
        full = os.path.join(root, path)
        if os.path.isfile(full):
            yield path
            continue
        for folder, subfolders, names in os.walk(full):
            subfolders[:] = [s for s in subfolders if s not in _SKIPPED_FOLDERS and not s.startswith(".")
                             and not s.endswith(".egg-info") and s != "_generated"
                             and not os.path.exists(os.path.join(folder, s, "pyvenv.cfg"))]
            for name in names:
                file = os.path.join(folder, name)
                if name.endswith(_SKIPPED_SUFFIXES) or name.startswith(".") or \
                        os.path.getsize(file) > _LARGEST_SOURCE:
                    continue
                yield os.path.relpath(file, root)


# What torch_simhpu's own wheel is built from (setup.py): its label is their hash.
BACKEND_SOURCES = ["csrc", "op_plugin", "codegen", "build_tools", "torch_simhpu", "op_plugin_functions.yaml",
                   "derivatives.yaml", "setup.py", "pyproject.toml", "torch_simhpu_packaging.py"]


def backend_version(root: str, release: str) -> str:
    """torch_simhpu's version when built from the tree at `root`."""
    return labelled(release, tree_digest(root, BACKEND_SOURCES))


def labelled(version: str, digest: str) -> str:
    """`version` with the digest as its local label; a version that already has
    a label is the author's own scheme and is kept as it is."""
    if "+" in version:
        return version
    return f"{version}+g{digest[:12]}"


def label_simhpu_package(dist) -> None:
    """setuptools' finalize_distribution_options hook: for a distribution with a
    SimHPUExtension, a content-labelled version, a bdist_wheel that keeps one
    wheel of it in dist/, and the generated Python packaged. Other distributions
    are left alone."""
    stamps = [getattr(ext, "simhpu_sdk_stamp", None) for ext in dist.ext_modules or []]
    stamps = [s for s in stamps if s is not None]
    if not stamps:
        return
    # setup.py runs from its own folder (its paths are relative to it).
    digest = tree_digest(os.getcwd(), ["."], extra="\n".join(stamps))
    dist.metadata.version = labelled(dist.metadata.version or "0.0.0", digest)
    dist.cmdclass["bdist_wheel"] = keeping_one_wheel(dist.cmdclass.get("bdist_wheel") or default_bdist_wheel())
    # The codegen's Python (<package>._generated) is part of the package, whether
    # or not setup() lists it: without it the extension module cannot load.
    for ext in dist.ext_modules:
        generated = getattr(ext, "simhpu_generated_package", None)
        if generated is not None and dist.packages is not None and generated not in dist.packages:
            dist.packages.append(generated)


def default_bdist_wheel():
    from setuptools.command.bdist_wheel import bdist_wheel

    return bdist_wheel


def keeping_one_wheel(bdist_wheel):
    """bdist_wheel that removes this distribution's other wheels from dist/ once
    the new one is written."""

    class BdistWheelKeepingOne(bdist_wheel):
        def run(self):
            super().run()
            built = {os.path.abspath(path) for command, _, path in self.distribution.dist_files
                     if command == "bdist_wheel"}
            name = re.sub(r"[-_.]+", "_", self.distribution.get_name())
            for wheel in glob.glob(os.path.join(self.dist_dir, f"{glob.escape(name)}-*.whl")):
                if os.path.abspath(wheel) not in built:
                    os.remove(wheel)
                    print(f"removed the older wheel {wheel}")

    return BdistWheelKeepingOne
