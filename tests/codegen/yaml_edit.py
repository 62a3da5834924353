"""Copies of the project's YAML, kernels and op_plugin adapters to break, and edits of them (codegen tests)."""
import os
import shutil

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def copy_project(dest) -> None:
    for name in ("op_plugin_functions.yaml", "derivatives.yaml"):
        shutil.copy(os.path.join(ROOT, name), dest / name)
    shutil.copytree(os.path.join(ROOT, "csrc", "kernels"), dest / "csrc" / "kernels")
    shutil.copytree(os.path.join(ROOT, "csrc", "autograd"), dest / "csrc" / "autograd")
    shutil.copytree(os.path.join(ROOT, "op_plugin"), dest / "op_plugin")


def edit(path, old, new):
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def line_of(path, fragment):
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if fragment in line)
