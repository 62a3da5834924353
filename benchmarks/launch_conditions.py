"""The launch path under the conditions a user's machine has (issue 27).

- the machine itself: the CPU model and the measured core-to-core hand-off
  (a launch record crosses it on every launch, so it bounds the launch rows);
- a core kept busy by another process (a build, a data loader): a busy loop
  pinned to the last CPU while the launch rows run, both sides alike;
- a loop alternating a parallel CPU operator with a device launch (the host's
  OpenMP team and the device's meet there).

    python benchmarks/launch_conditions.py     these rows alone
"""
import math
import os
import platform
import subprocess
import sys
import time


def machine_description() -> str:
    """The CPU model and the core-to-core hand-off, for the line above the table."""
    import torch_simhpu
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return f"{model}, 1 CPU"
    latency = min(torch_simhpu._C._core_to_core_latency_ns(cpus[0], cpus[-1], 200_000) for _ in range(3))
    return f"{model}, {len(cpus)} CPUs, core-to-core hand-off {latency:.0f} ns (CPU {cpus[0]} <-> {cpus[-1]})"


class BusyCore:
    """A process spinning on the last CPU while the block runs."""

    def __enter__(self):
        cpu = max(os.sched_getaffinity(0))
        code = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass\n"
        self.process = subprocess.Popen([sys.executable, "-c", code])
        time.sleep(0.2)  # let it start spinning
        return self

    def __exit__(self, *exc):
        self.process.kill()
        self.process.wait()


def busy_core_rows(Row, best_pair, best_seconds, torch):
    import torch_simhpu
    add = torch_simhpu.npu_add_custom
    a, b = torch.ones(1), torch.ones(1)
    da, db = a.simhpu(), b.simhpu()
    n, chain, trips = 50_000, 10_000, 5_000

    def cpu_launches():
        for _ in range(n):
            torch.add(a, b)

    def device_launches():
        for _ in range(n):
            add(da, db)
        torch.simhpu.synchronize()

    def cpu_chain():
        x = a
        for _ in range(chain):
            x = torch.add(x, b)

    def device_chain():
        x = da
        for _ in range(chain):
            x = add(x, db)
        torch.simhpu.synchronize()

    def cpu_trips():
        for _ in range(trips):
            torch.add(a, b)

    def device_trips():
        for _ in range(trips):
            add(da, db)
            torch.simhpu.synchronize()

    with BusyCore():
        ref, ours = best_pair(cpu_launches, device_launches, n)
        rows = [Row("busy core: launch of a 1-element op", "us", ref * 1e6, ours * 1e6, "ratio <= 1.0")]
        ref, ours = best_pair(cpu_chain, device_chain, 1)
        rows.append(Row("busy core: 10,000 dependent tiny ops, then sync", "ms", ref * 1e3, ours * 1e3,
                        "ratio <= 1.0"))
        ref, ours = best_pair(cpu_trips, device_trips, trips)
        rows.append(Row("busy core: launch + synchronize round trip", "us", ref * 1e6, ours * 1e6, "value <= 10"))
    return rows


def alternating_row(Row, best_pair, torch):
    """Per iteration: a CPU operator that runs in parallel (exp of 64K floats on
    the host's OpenMP team), then one device launch. PyTorch's column is the
    same loop with the launch made on CPU tensors."""
    import torch_simhpu
    x = torch.randn(64 * 1024)
    y = torch.empty_like(x)
    a, b = torch.ones(1), torch.ones(1)
    da, db = a.simhpu(), b.simhpu()
    n = 2_000

    def cpu_loop():
        for _ in range(n):
            torch.exp(x, out=y)
            torch.add(a, b)

    def device_loop():
        for _ in range(n):
            torch.exp(x, out=y)
            torch_simhpu.npu_add_custom(da, db)
        torch.simhpu.synchronize()

    ref, ours = best_pair(cpu_loop, device_loop, n)
    return Row("loop: parallel CPU op, then a launch, per iteration", "us", ref * 1e6, ours * 1e6, "value <= 50")


def rows(Row, best_pair, best_seconds, torch):
    return busy_core_rows(Row, best_pair, best_seconds, torch) + [alternating_row(Row, best_pair, torch)]


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch
    import tables
    print(machine_description(), flush=True)
    tables.print_table(rows(tables.Row, tables.best_pair, tables.best_seconds, torch))
