#!/usr/bin/env python
"""torchtitan on simhpu, every configuration the tests do not run in CI, each against the CPU.

    .venv/bin/python scripts/torchtitan_e2e.py              # all of them (about 10 minutes on 2 cores)
    .venv/bin/python scripts/torchtitan_e2e.py fsdp tp2     # some
    .venv/bin/python scripts/torchtitan_e2e.py --list

Each configuration trains torchtitan's Llama-3 debug model with `torchrun -m torchtitan.train`
(torchtitan from its PyPI wheel, unchanged) on simhpu and, through tests/titan_runs/cpu_reference.py,
on the CPU, both from one seed checkpoint; it prints the losses and whether the final weights are
bit-identical. "debug-config" and "debug-config-compiled" run torchtitan's own debug
configuration as it is (sequences of 2048, batches of 8, 10 steps). Flex attention has no CPU
reference: PyTorch 2.13's flex_attention has no backward on the CPU.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from titan_runs import harness  # noqa: E402


# name: (processes, steps, extra arguments, compared with the CPU)
CONFIGURATIONS = {
    "one-process-float32": (1, 3, ["--training.mixed_precision_param", "float32"], True),
    "one-process-autocast-bf16": (1, 3, [], True),
    "fsdp": (2, 3, [], True),
    "tp2": (2, 3, ["--parallelism.tensor_parallel_degree", "2"], True),
    "compiled-one-process": (1, 3, ["--compile.enable"], True),
    "compiled-fsdp": (2, 3, ["--compile.enable"], True),
    "ac-none": (2, 3, ["--activation_checkpoint.mode", "none"], True),
    "ac-selective-op": (2, 3, ["--activation_checkpoint.selective_ac_option", "op"], True),
    "ac-full": (2, 3, ["--activation_checkpoint.mode", "full"], True),
    "checkpoint-resume": (2, 4, [], True),
    "flex-attention": (2, 3, ["--model.flavor", "debugmodel_flex_attn"], False),
    "flex-attention-compiled": (2, 3, ["--model.flavor", "debugmodel_flex_attn", "--compile.enable"], False),
    "debug-config": (2, 10, [], True),
    "debug-config-compiled": (2, 10, ["--compile.enable"], True),
}


def run_one(workdir: Path, name: str) -> str:
    nproc, steps, extra, with_cpu = CONFIGURATIONS[name]
    shape = () if name.startswith("debug-config") else harness.SHORT_RUN  # the configuration's own
    start = time.perf_counter()
    if name == "checkpoint-resume":
        device_run = harness.train_resumed(workdir, "simhpu", nproc, f"{name}-simhpu", steps, steps // 2, *extra)
    else:
        device_run = harness.train(workdir, "simhpu", nproc, f"{name}-simhpu", steps, *extra, shape=shape)
    device_seconds = time.perf_counter() - start
    losses = " ".join(f"{device_run.losses[s]:.5f}" for s in sorted(device_run.losses))
    if not with_cpu:
        return f"{name:<26} {nproc}  {device_seconds:7.1f} s        (no CPU reference)  losses {losses}"
    start = time.perf_counter()
    cpu_run = harness.train(workdir, "cpu", nproc, f"{name}-cpu", steps, *extra, shape=shape)
    cpu_seconds = time.perf_counter() - start
    same_losses = all(cpu_run.losses[s] == v for s, v in device_run.losses.items())
    differences = harness.weight_differences(device_run.weights(steps), cpu_run.weights(steps))
    verdict = "bit-identical" if same_losses and not differences else \
        f"DIFFERENT ({len(differences)} weights, max {max(differences.values(), default=0):.3g})"
    return (f"{name:<26} {nproc}  {device_seconds:7.1f} s  {cpu_seconds:7.1f} s  {verdict:<14}  losses {losses}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="configurations to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the configurations")
    parser.add_argument("--workdir", type=Path, help="where to make the working folder (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(CONFIGURATIONS))
        return 0
    unknown = [n for n in args.names if n not in CONFIGURATIONS]
    if unknown:
        parser.error(f"unknown configurations {unknown}; --list shows them")
    root = args.workdir or Path(tempfile.mkdtemp(prefix="torchtitan-e2e-"))
    workdir = harness.make_workdir(root)
    harness.seed_checkpoint(workdir)
    print(f"working folder {workdir}")
    print(f"{'configuration':<26} N   simhpu      cpu       result")
    failed = False
    for name in args.names or CONFIGURATIONS:
        try:
            line = run_one(workdir, name)
        except RuntimeError as error:
            line, failed = f"{name:<26} FAILED: {str(error)[-2000:]}", True
        failed = failed or "DIFFERENT" in line
        print(line, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
