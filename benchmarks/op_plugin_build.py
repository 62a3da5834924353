"""A wheel built from op-plugin's own YAML, timed (issue: "Speak op-plugin's own YAML"):

    python benchmarks/op_plugin_build.py PATH/op_plugin_functions.yaml [PATH/derivatives.yaml]

copies this repository's sources to a scratch folder, replaces its two YAML files by the given
ones, and prints: codegen's time; a clean wheel build's time (codegen, every unit, the link);
the rebuild after one entry is edited; then, with the wheel installed in a scratch folder, what
serves each operator (torch_simhpu.op_plugin_kernels), a custom operator's error, and what op_db's
samples of the simulated ACLNN operators give on simhpu against the CPU. Takes 10-20 minutes on
a two-core machine; the scratch folder is removed unless --keep.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timed(what: str, command: list[str], cwd: str, **kwargs) -> float:
    start = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, **kwargs)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"{what} failed:\n{(result.stderr or result.stdout)[-4000:]}")
    print(f"{what}: {seconds:.1f} s")
    return seconds


def copy_sources(scratch: str) -> str:
    tree = os.path.join(scratch, "src")
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split("\0")
    for rel in filter(None, files):
        if os.path.isfile(os.path.join(ROOT, rel)):
            os.makedirs(os.path.dirname(os.path.join(tree, rel)), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, rel), os.path.join(tree, rel))
    return tree


def edit_one_entry(path: str) -> str:
    """Adds an argument with a default to the first custom entry's schema: one operator changes."""
    with open(path) as f:
        text = f.read()
    start = text.index("\ncustom:")
    func = text.index("- func: ", start)
    close = text.index(") ->", func)
    with open(path, "w") as f:
        f.write(text[:close] + ", int benchmark_edit=0" + text[close:])
    return text[func + 8:text.index("(", func)]


CHECK = r"""
import collections, sys, warnings
warnings.filterwarnings("ignore")
sys.path.insert(0, sys.argv[1])
import torch, torch_simhpu
from op_plugin_dialect import compare_on_op_db
kernels = torch_simhpu.op_plugin_kernels()
print("what serves the file's operators:", dict(collections.Counter(kernels.values())))
def operator(qualified):
    name, _, overload = qualified.removeprefix("npu::").partition(".")
    return getattr(getattr(torch.ops.npu, name), overload or "default")
def one_tensor(op):  # called with one tensor: its only required argument is a Tensor
    required = [a for a in op._schema.arguments if not a.has_default_value() and not a.kwarg_only]
    return len(required) == 1 and str(required[0].type) == "Tensor"
custom = next(n for n, k in sorted(kernels.items()) if k == "unprovided" and one_tensor(operator(n)))
try:
    operator(custom)(torch.ones(2, device="simhpu"))
except NotImplementedError as e:
    print(f"calling {custom}: NotImplementedError: {str(e)[:400]}")
compare_on_op_db({n.split(".")[0] for n, k in kernels.items() if k == "simulated"})
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ops", help="an op_plugin_functions.yaml in op-plugin's dialect")
    parser.add_argument("derivatives", nargs="?", help="its derivatives.yaml")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="op_plugin_build-")
    try:
        tree = copy_sources(scratch)
        shutil.copy(args.ops, os.path.join(tree, "op_plugin_functions.yaml"))
        if args.derivatives:
            shutil.copy(args.derivatives, os.path.join(tree, "derivatives.yaml"))
        else:
            os.remove(os.path.join(tree, "derivatives.yaml"))
        env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
        timed("codegen", [sys.executable, "-c", "from codegen.project import generate; "
                          "print(len(generate('.', 'build/generated')))"], tree, env=env)
        timed("clean wheel build (python setup.py bdist_wheel)", [sys.executable, "setup.py", "--quiet",
                                                                  "bdist_wheel"], tree, env=env)
        edited = edit_one_entry(os.path.join(tree, "op_plugin_functions.yaml"))
        timed(f"rebuild after editing one entry ({edited})", [sys.executable, "setup.py", "--quiet", "bdist_wheel"],
              tree, env=env)
        wheels = sorted(os.listdir(os.path.join(tree, "dist")), key=lambda w: os.path.getmtime(
            os.path.join(tree, "dist", w)))
        site = os.path.join(scratch, "site")
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", site,
                        os.path.join(tree, "dist", wheels[-1])], check=True)
        subprocess.run([sys.executable, "-c", CHECK, os.path.dirname(os.path.abspath(__file__))], cwd=scratch,
                       env=dict(os.environ, PYTHONPATH=site), check=True)
    finally:
        if args.keep:
            print(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
