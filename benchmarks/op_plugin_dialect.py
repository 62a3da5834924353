"""The figures docs/yaml.md gives for op-plugin's own YAML, on a file of that dialect (Ascend's
op_plugin/config/op_plugin_functions.yaml, which this repository does not hold):

    python benchmarks/op_plugin_dialect.py PATH/op_plugin_functions.yaml

prints the time and outcome of `codegen check` and `codegen check-rules` on its folder, of
torch_simhpu.load_op_plugin, and, with simulate_aclnn=True, what op_db's samples (float32, four an
OpInfo) of the simulated operators give on simhpu against the CPU.
"""
from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time
import warnings


def timed_command(*args) -> None:
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "torch_simhpu.codegen", *args], capture_output=True, text=True)
    lines = (result.stdout or result.stderr).splitlines()
    print(f"$ codegen {' '.join(args[2:])}: {time.perf_counter() - start:.1f} s, exit {result.returncode}")
    print("  " + "\n  ".join(lines[:3]))


def simulated_on_op_db(path: str) -> None:
    import torch_simhpu

    loaded = torch_simhpu.load_op_plugin(path, namespace="npu_benchmark", simulate_aclnn=True)
    print(loaded)
    compare_on_op_db({name.split(".")[0] for name in loaded.simulated})


def compare_on_op_db(bases: set[str]) -> None:
    """op_db's samples (float32, four an OpInfo) of the operators named `bases`, on simhpu and on the
    CPU: how many agree, how many fail on a rule mismatch (listed) or otherwise."""
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    outcome, mismatches = collections.Counter(), set()

    def move(value):
        return value.to("simhpu") if isinstance(value, torch.Tensor) else value

    for info in op_db:
        if info.name.split(".")[0] not in bases and getattr(info, "aten_name", "") not in bases:
            continue
        if torch.float32 not in info.supported_dtypes("cpu"):
            continue
        try:
            samples = list(info.sample_inputs("cpu", torch.float32))[:4]
        except Exception:  # a sample generator this machine cannot run
            continue
        for s in samples:
            try:
                expected = info.op(s.input, *s.args, **s.kwargs)
            except Exception:  # ATen refuses the sample itself
                continue
            try:
                got = info.op(move(s.input), *map(move, s.args), **{k: move(v) for k, v in s.kwargs.items()})
                got = torch.utils._pytree.tree_map(lambda v: v.cpu() if isinstance(v, torch.Tensor) else v, got)
                torch.testing.assert_close(got, expected, equal_nan=True)
                outcome["equal to the CPU"] += 1
            except RuntimeError as e:
                kind = "rule mismatch" if "gen_opapi's rule" in str(e) else "other error"
                outcome[kind] += 1
                if kind == "rule mismatch":
                    mismatches.add(str(e).split(": gen_opapi")[0])
            except AssertionError:
                outcome["different from the CPU"] += 1
    print(f"op_db samples of the simulated operators: {dict(outcome)}")
    for where in sorted(mismatches):
        print(f"  rule mismatch: {where}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", help="an op_plugin_functions.yaml in op-plugin's dialect")
    path = os.path.abspath(parser.parse_args().file)
    root = os.path.dirname(path)
    if os.path.basename(path) != "op_plugin_functions.yaml":
        sys.exit("the file must be named op_plugin_functions.yaml (codegen reads a folder)")
    timed_command("--root", root, "check")
    timed_command("--root", root, "check-rules")
    warnings.filterwarnings("ignore")
    import torch_simhpu
    start = time.perf_counter()
    print(torch_simhpu.load_op_plugin(path), f"({time.perf_counter() - start:.1f} s)")
    simulated_on_op_db(path)


if __name__ == "__main__":
    main()
