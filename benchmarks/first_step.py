"""The first eager training step of a small model, in a fresh process, on simhpu against the CPU
(issue: "First impressions"; target: at most 3x the CPU's first step):

    python benchmarks/first_step.py [--pairs N]

Each run is a new process that builds the tiny GPT-2 of benchmarks/tiny_gpt2.py on its device and
times its first training step (forward, backward, AdamW; the device synchronised at the end). The
two devices run in turn, N pairs (default 5), and the ratio is taken pair by pair (the machine's
speed drifts). The process's import of torch is timed too: with the wheel installed the CPU run
pays for torch_simhpu's import as well, so the two columns show what the device itself costs.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

RUN = r"""
import sys, time
start = time.perf_counter()
import torch
imported = time.perf_counter() - start
sys.path.insert(0, sys.argv[2])
from tiny_gpt2 import training_step
step = training_step(sys.argv[1])
begin = time.perf_counter()
step()
if sys.argv[1] != "cpu":
    torch.simhpu.synchronize()
print(imported, time.perf_counter() - begin)
"""


def one(device: str) -> tuple[float, float]:
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, "-c", RUN, device, here], capture_output=True, text=True, check=True,
                         cwd="/").stdout.split()
    return float(out[-2]), float(out[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=5)
    pairs = parser.parse_args().pairs
    cpu, device = [], []
    for _ in range(pairs):
        cpu.append(one("cpu"))
        device.append(one("simhpu"))
    ratios = [d[1] / c[1] for c, d in zip(cpu, device)]
    print(f"tiny GPT-2, first training step in a fresh process, {pairs} pairs: CPU "
          f"{statistics.median(c[1] for c in cpu) * 1e3:.0f} ms, simhpu {statistics.median(d[1] for d in device) * 1e3:.0f} ms; "
          f"ratio pair by pair: median {statistics.median(ratios):.2f}x, min {min(ratios):.2f}, max {max(ratios):.2f} "
          "(target: at most 3x)")
    print(f"import torch in those processes: median {statistics.median(c[0] for c in cpu + device):.2f} s")


if __name__ == "__main__":
    main()
