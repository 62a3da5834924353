"""torch.distributed rows of benchmarks/run.py: simccl on simhpu against gloo on
the CPU, in process groups on loopback started here (one group per measurement).

    python benchmarks/collectives.py      these rows alone

- all_reduce of 64 MB float32 between 2 processes, as bus bandwidth
  (bytes * 2 (n - 1) / n / time, NCCL's convention);
- all_reduce of one float (latency), simccl with and without the check that
  the ranks' calls agree (SIMHPU_COLLECTIVE_CHECKS, on by default);
- a DDP training step of a small CNN (32 images per rank), in 1 and in 2
  processes, and how much longer the 2-process step is.
"""
import math
import os
import socket
import time

import torch
import torch.multiprocessing as mp

ALL_REDUCE_BYTES = 64 << 20
ROUNDS = 5


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _best_seconds(fn, sync, repeat):
    best = math.inf
    for _ in range(ROUNDS):
        sync()
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        sync()
        best = min(best, (time.perf_counter() - start) / repeat)
    return best


def _all_reduce_seconds(device):
    import torch.distributed as dist

    x = torch.ones(ALL_REDUCE_BYTES // 4, device=device)
    sync = (lambda: torch.simhpu.synchronize()) if device.type == "simhpu" else (lambda: None)
    dist.all_reduce(x)  # warm-up: connections, buffers

    def timed():
        dist.barrier()
        dist.all_reduce(x)

    return _best_seconds(timed, sync, repeat=3)


def _small_all_reduce_seconds(device):
    import torch.distributed as dist

    x = torch.ones(1, device=device)
    sync = (lambda: torch.simhpu.synchronize()) if device.type == "simhpu" else (lambda: None)
    dist.all_reduce(x)
    dist.barrier()
    return _best_seconds(lambda: dist.all_reduce(x), sync, repeat=200)


def _ddp_step_seconds(device):
    import torch.nn as nn
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
    ddp = DistributedDataParallel(model.to(device))
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x, y = torch.randn(32, 3, 32, 32, device=device), torch.randint(0, 10, (32,), device=device)

    def step():
        optimizer.zero_grad()
        nn.functional.cross_entropy(ddp(x), y).backward()
        optimizer.step()

    sync = (lambda: torch.simhpu.synchronize()) if device.type == "simhpu" else (lambda: None)
    step()
    dist.barrier()
    return _best_seconds(step, sync, repeat=5)


def _worker(rank, world, port, what, device_type, results, env):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), **env)
    import torch.distributed as dist

    import torch_simhpu  # noqa: F401

    device = torch.device("simhpu", rank % torch.simhpu.device_count()) if device_type == "simhpu" else torch.device("cpu")
    if device.type == "simhpu":
        torch.simhpu.set_device(device)
    dist.init_process_group("cpu:gloo,simhpu:simccl", rank=rank, world_size=world)
    seconds = {"all_reduce": _all_reduce_seconds, "small_all_reduce": _small_all_reduce_seconds,
               "ddp": _ddp_step_seconds}[what](device)
    if rank == 0:
        results.put(seconds)
    dist.destroy_process_group()


def measure(what, device_type, world, **env):
    context = mp.get_context("spawn")
    results = context.Queue()
    mp.start_processes(_worker, args=(world, _free_port(), what, device_type, results, env), nprocs=world,
                       start_method="spawn")
    return results.get(timeout=10)


def rows(Row, torch):
    bus_bytes = ALL_REDUCE_BYTES * 2 * (2 - 1) / 2
    gloo, simccl = (bus_bytes / measure("all_reduce", d, 2) / 1e9 for d in ("cpu", "simhpu"))
    result = [Row("all_reduce 64 MB float32, 2 processes (bus bandwidth)", "GB/s", gloo, simccl, "ratio >= 1.0")]
    gloo, checked = (measure("small_all_reduce", d, 2) * 1e6 for d in ("cpu", "simhpu"))
    unchecked = measure("small_all_reduce", "simhpu", 2, SIMHPU_COLLECTIVE_CHECKS="0") * 1e6
    result.append(Row("all_reduce of 1 float, 2 processes (latency)", "us", gloo, checked))
    result.append(Row("  the same without the ranks' agreement check", "us", gloo, unchecked))
    steps = {(d, n): measure("ddp", d, n) for d in ("cpu", "simhpu") for n in (1, 2)}
    for n in (1, 2):
        result.append(Row(f"DDP step, small CNN, 32 images per rank, {n} process{'es' if n > 1 else ''}", "ms",
                          steps["cpu", n] * 1e3, steps["simhpu", n] * 1e3))
    result.append(Row("DDP step, 2 processes / 1 process", "x", steps["cpu", 2] / steps["cpu", 1],
                      steps["simhpu", 2] / steps["simhpu", 1]))
    return result


if __name__ == "__main__":
    from tables import Row, print_table  # noqa: E402

    print_table(rows(Row, torch))
