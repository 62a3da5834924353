"""What `import torch` pays for the installed wheel (issue: "First impressions"; target: at most
0.15 s more than with TORCH_DEVICE_BACKEND_AUTOLOAD=0, which skips the backend entry point):

    python benchmarks/import_time.py [--pairs N]

runs `python -c "import torch"` with and without the entry point in turn, N pairs (default 15;
pairing keeps the difference meaningful while the machine's speed drifts), and prints each side's
median and the median of the pairs' differences, then what torch_simhpu's own modules cost
(python -X importtime). Graph mode's modules (torch._dynamo, torch._inductor) are imported by
torch.compile when it is first used (torch_simhpu/_after_import.py).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time


def one(autoload: bool) -> float:
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="1" if autoload else "0")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], env=env, check=True, cwd="/")
    return time.perf_counter() - start


def own_modules() -> list[tuple[int, str]]:
    """(microseconds, module) of torch_simhpu's modules and what only they import, from -X importtime."""
    result = subprocess.run([sys.executable, "-X", "importtime", "-c", "import torch"], capture_output=True,
                            text=True, check=True, cwd="/")
    rows = []
    for line in result.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            name = parts[2].rstrip()
            if len(name) - len(name.lstrip()) <= 3 and name.strip().startswith("torch_simhpu"):
                rows.append((int(parts[1]), name.strip()))
    return sorted(rows, reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=15)
    pairs = parser.parse_args().pairs
    one(True), one(False)  # warm the file cache
    with_wheel, without = [], []
    for _ in range(pairs):
        with_wheel.append(one(True))
        without.append(one(False))
    differences = [a - b for a, b in zip(with_wheel, without)]
    print(f"import torch, {pairs} pairs: with the wheel's entry point {statistics.median(with_wheel):.3f} s, "
          f"without {statistics.median(without):.3f} s (medians); the difference, pair by pair: median "
          f"{statistics.median(differences):+.3f} s, min {min(differences):+.3f}, max {max(differences):+.3f} "
          "(target: at most +0.15 s)")
    print("torch_simhpu's modules (inclusive, python -X importtime):")
    for microseconds, name in own_modules()[:8]:
        print(f"  {microseconds / 1000:7.1f} ms  {name}")


if __name__ == "__main__":
    main()
