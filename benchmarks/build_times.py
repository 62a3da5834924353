"""Build times: a clean `python setup.py bdist_wheel`, a rebuild with nothing
changed, and rebuilds after editing one YAML entry, each with the number of
translation units ninja recompiled. Runs in a temporary copy of the tracked
files, with the current Python (which must have the build requirements).

    python benchmarks/build_times.py
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def copy_tracked_files() -> str:
    dest = tempfile.mkdtemp(prefix="simhpu-build-")
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for rel in files:
        os.makedirs(os.path.dirname(os.path.join(dest, rel)) or dest, exist_ok=True)
        shutil.copy2(os.path.join(ROOT, rel), os.path.join(dest, rel))
    return dest


def build(tree: str) -> tuple[float, list[str]]:
    """(seconds, translation units compiled) for one bdist_wheel."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "setup.py", "bdist_wheel"], cwd=tree, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(out.stdout[-3000:] + out.stderr[-3000:])
    # "[3/47] compiling csrc/x.cpp" (setup.py's quiet ninja output), or the command itself (verbose).
    compiled = re.findall(r"\[\d+/\d+\] (?:compiling |c\+\+ .* -c )(\S+\.cpp)", out.stdout + out.stderr)
    return elapsed, [os.path.relpath(p, tree) if os.path.isabs(p) else p for p in compiled]


def remove(tree: str) -> None:
    shutil.rmtree(tree)


def edit(tree: str, old: str, new: str) -> None:
    path = os.path.join(tree, "op_plugin_functions.yaml")
    text = open(path).read()
    assert old in text, old
    open(path, "w").write(text.replace(old, new, 1))


def edit_one_entry(tree: str) -> None:
    """Drops a dtype from npu_swish: its translation unit, and only it, must be rebuilt."""
    edit(tree, "    exec: swish, self, beta, out\n    out: {size: self, dtype: self}\n"
               "    dtypes: [float32, float64, float16, bfloat16]",
         "    exec: swish, self, beta, out\n    out: {size: self, dtype: self}\n"
         "    dtypes: [float32, float64, float16]")


def add_an_op(tree: str) -> None:
    """docs/own_ops.md's "Add your own op", by the scaffold: a kernel file, an entry and its backward."""
    subprocess.run([sys.executable, "-m", "codegen", "new-op", "npu_bench_added"], cwd=tree, check=True,
                   capture_output=True)


def main():
    tree = copy_tracked_files()
    try:
        rows = []
        rows.append(("clean build", *build(tree)))
        rows.append(("rebuild, nothing changed", *build(tree)))
        edit_one_entry(tree)
        rows.append(("rebuild after editing npu_swish's dtypes", *build(tree)))
        edit(tree, "doc: Swish activation", "doc: The swish activation")
        rows.append(("rebuild after editing npu_swish's doc", *build(tree)))
        add_an_op(tree)
        rows.append(("rebuild after adding an op (codegen new-op)", *build(tree)))
        print(f"{'build':45} {'seconds':>8}  translation units compiled")
        for name, seconds, units in rows:
            shown = ", ".join(units) if len(units) <= 3 else f"{len(units)} units"
            print(f"{name:45} {seconds:8.1f}  {len(units)}: {shown}")
    finally:
        remove(tree)


if __name__ == "__main__":
    main()
