"""Measures torch_simhpu against PyTorch CPU in one run and prints the ratios.

    python benchmarks/run.py          (after scripts/setup_env.sh; uses the installed wheel)
"""
import os
import sys
import time

import torch

import torch_simhpu


def per_call_seconds(fn, min_time=0.5):
    """Seconds per call, after a warm-up, over at least min_time."""
    for _ in range(100):
        fn()
    n, start = 0, time.perf_counter()
    while True:
        for _ in range(1000):
            fn()
        n += 1000
        elapsed = time.perf_counter() - start
        if elapsed > min_time:
            return elapsed / n


def launch_host_time():
    a, b = torch.ones(1), torch.ones(1)
    da, db = a.simhpu(), b.simhpu()
    ref = per_call_seconds(lambda: torch.add(a, b))
    ours = per_call_seconds(lambda: torch_simhpu.npu_add_custom(da, db))
    torch.simhpu.synchronize()
    return "host time per launch, 1 element, async", ref * 1e6, ours * 1e6, "us"


def timed(fn, repeats):
    """Seconds per call of fn after one warm-up call."""
    fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def elementwise_bandwidth():
    n = 16 * 1024 * 1024
    a, b = torch.randn(n), torch.randn(n)
    da, db = a.simhpu(), b.simhpu()

    def ours():
        torch_simhpu.npu_add_custom(da, db)
        torch.simhpu.synchronize()

    gigabytes = 3 * n * 4 / 1e9  # two reads and one write
    ref = timed(lambda: torch.add(a, b), 10)
    return "add, 16M float32, new output", gigabytes / ref, gigabytes / timed(ours, 10), "GB/s"


def codegen_time():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import codegen_scale
    return f"codegen, synthetic {codegen_scale.N_OPS}-operator YAML", float("nan"), codegen_scale.measure(), "s"


def main():
    rows = [launch_host_time(), elementwise_bandwidth(), codegen_time()]
    print(f"{'measure':45} {'PyTorch CPU':>12} {'simhpu':>10} {'simhpu/CPU':>11}")
    for name, ref, ours, unit in rows:
        ratio = ours / ref if ref == ref else float("nan")  # nan: no PyTorch counterpart
        print(f"{name:45} {ref:12.3f} {ours:10.3f} {ratio:11.2f}  {unit}")


if __name__ == "__main__":
    main()
