"""Where a training step's time goes, per thread (issue 27).

    python benchmarks/step_breakdown.py [--model gpt2|cnn] [--compiled] [--device simhpu|cpu] [--steps N]

Runs the step N times after a warm-up and reads, for every thread of the
process, the kernel's scheduler accounting (/proc/self/task/*/schedstat): the
time it ran on a CPU and the time it was runnable but waiting for one. Threads
are grouped by what they are: the launching (main) thread; the stream workers
and the OpenMP helpers their kernels start (named "simhpuD.sS", which helpers
inherit); the main thread's OpenMP helpers and other host threads. With
--device simhpu it then runs N more steps under the runtime's trace (which
slows them: its figures are for those steps) and reads how long the workers ran
kernels, and how long launches waited in their queues. --compiled (GPT-2 only)
runs forward+backward and the optimizer step under torch.compile.

Per step, against the wall time: a thread group's "ran" beyond the wall time
means it ran on both cores at once; "waited for a core" is time it could have
run but another thread held the CPU — on two cores the place to look first.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time

import torch


def threads() -> dict[int, tuple[str, int, int]]:
    """tid -> (name, ns on a CPU, ns waiting for one)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                ran, waited, _slices = (int(v) for v in f.read().split())
        except OSError:
            continue  # the thread ended meanwhile
        out[int(tid)] = (name, ran, waited)
    return out


def group_of(tid: int, name: str) -> str:
    if tid == os.getpid():
        return "main thread (launches)"
    if name.startswith("simhpu"):
        return "stream workers + their OpenMP helpers"
    return "other threads (host OpenMP helpers, autograd, ...)"


def cnn_step(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.BatchNorm2d(64), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(64 * 8 * 8, 10)).to(device)
    x = torch.randn(32, 3, 32, 32, generator=torch.Generator().manual_seed(1)).to(device)
    y = torch.randint(0, 10, (32,), generator=torch.Generator().manual_seed(2)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    return step


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=("gpt2", "cnn"), default="gpt2")
    parser.add_argument("--compiled", action="store_true", help="the GPT-2 step under torch.compile")
    parser.add_argument("--device", choices=("simhpu", "cpu"), default="simhpu")
    parser.add_argument("--steps", type=int, default=20)
    options = parser.parse_args()
    if options.device == "simhpu":
        import torch_simhpu  # noqa: F401
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if options.compiled and options.model != "gpt2":
        parser.error("--compiled: only the GPT-2 step has a compiled form here")
    if options.model == "gpt2":
        from tiny_gpt2 import compiled_training_step, training_step
        step = (compiled_training_step if options.compiled else training_step)(options.device)
    else:
        step = cnn_step(options.device)

    def sync():
        if options.device == "simhpu":
            torch.simhpu.synchronize()

    for _ in range(5):
        step()
    sync()
    before = threads()
    start = time.perf_counter()
    for _ in range(options.steps):
        step()
    sync()
    wall = (time.perf_counter() - start) / options.steps
    after = threads()

    ran, waited, count = collections.Counter(), collections.Counter(), collections.Counter()
    for tid, (name, r, w) in after.items():
        r0, w0 = before.get(tid, (name, 0, 0))[1:]
        group = group_of(tid, name)
        ran[group] += r - r0
        waited[group] += w - w0
        count[group] += 1
    kind = "compiled" if options.compiled else "eager"
    print(f"{options.model} {kind} training step on {options.device}, {os.cpu_count()} CPUs, "
          f"{torch.get_num_threads()} intra-op threads: {wall * 1e3:.2f} ms per step (wall)")
    print(f"{'threads':<52} {'count':>5} {'ran ms':>8} {'waited for a core ms':>21}")
    for group in sorted(ran):
        print(f"{group:<52} {count[group]:>5} {ran[group] / 1e6 / options.steps:>8.2f} "
              f"{waited[group] / 1e6 / options.steps:>21.2f}")
    if options.device == "simhpu":
        import json
        trace = tempfile.NamedTemporaryFile(suffix=".json", delete=False).name
        start = time.perf_counter()
        with torch.simhpu.trace(trace):
            for _ in range(options.steps):
                step()
            sync()
        traced_wall = (time.perf_counter() - start) / options.steps
        with open(trace) as f:
            events = json.load(f)["traceEvents"]
        os.unlink(trace)
        kernels = [e for e in events if e.get("cat") == "kernel"]
        queued = [e for e in events if e.get("cat") == "queue"]
        busy = sum(e["dur"] for e in kernels) / 1e3 / options.steps
        mean_wait = sum(e["dur"] for e in queued) / max(len(queued), 1) / 1e3
        print(f"traced ({traced_wall * 1e3:.2f} ms per step): kernels per step {len(kernels) / options.steps:.0f}, "
              f"workers ran kernels {busy:.2f} ms per step ({100 * busy / (traced_wall * 1e3):.0f}% of the wall "
              f"time); a launch waited {mean_wait:.2f} ms in its queue on average (how far the host ran ahead)")


if __name__ == "__main__":
    main()
