"""Measures torch_simhpu against PyTorch CPU in one run and prints the ratios.

    python benchmarks/run.py          (after scripts/setup_env.sh; uses the installed wheel)

Each row: the PyTorch CPU figure, ours, and ours / PyTorch's (for times lower
is better, for rates higher is better).
"""
import os
import subprocess
import sys
import time

import torch

import torch_simhpu

HERE = os.path.dirname(os.path.abspath(__file__))


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


def timed(fn, repeats):
    """Seconds per call of fn after one warm-up call."""
    fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def torch_add_tiny_us():
    a, b = torch.ones(1), torch.ones(1)
    return per_call_seconds(lambda: torch.add(a, b)) * 1e6


def launch_host_time():
    da, db = torch.ones(1).simhpu(), torch.ones(1).simhpu()
    ours = per_call_seconds(lambda: torch_simhpu.npu_add_custom(da, db))
    torch.simhpu.synchronize()
    return "host time per launch, 1 element, async", torch_add_tiny_us(), ours * 1e6, "us"


def launch_host_time_blocking():
    """The same in SIMHPU_LAUNCH_BLOCKING=1 mode, in a child process (the mode is read at start)."""
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "import run, torch, torch_simhpu\n"
        "da, db = torch.ones(1).simhpu(), torch.ones(1).simhpu()\n"
        "print(run.torch_add_tiny_us(), run.per_call_seconds(lambda: torch_simhpu.npu_add_custom(da, db)) * 1e6)\n"
    ) % HERE
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ, SIMHPU_LAUNCH_BLOCKING="1"))
    ref, ours = map(float, out.stdout.split())
    return "host time per launch, 1 element, blocking", ref, ours, "us"


def queue_throughput():
    """Tiny kernels launched back to back and drained: tasks per second, launch and execution."""
    n = 20000
    a, b = torch.ones(1), torch.ones(1)
    da, db = a.simhpu(), b.simhpu()

    def ours():
        for _ in range(n):
            torch_simhpu.npu_add_custom(da, db)
        torch.simhpu.synchronize()

    def reference():
        for _ in range(n):
            torch.add(a, b)

    return "queue throughput, tiny ops, launch + run", n / timed(reference, 3), n / timed(ours, 3), "ops/s"


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
    sys.path.insert(0, HERE)
    import codegen_scale
    return f"codegen, synthetic {codegen_scale.N_OPS}-operator YAML", float("nan"), codegen_scale.measure(), "s"


def main():
    rows = [launch_host_time(), launch_host_time_blocking(), queue_throughput(), elementwise_bandwidth(),
            codegen_time()]
    print(f"{'measure':45} {'PyTorch CPU':>12} {'simhpu':>12} {'simhpu/CPU':>11}")
    for name, ref, ours, unit in rows:
        ratio = ours / ref if ref == ref else float("nan")  # nan: no PyTorch counterpart
        print(f"{name:45} {ref:12.3f} {ours:12.3f} {ratio:11.2f}  {unit}")


if __name__ == "__main__":
    main()
