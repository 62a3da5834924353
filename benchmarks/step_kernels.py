"""Where a real part spends an eager training step: its kernels, by the operator that launched them.

Runs with torch alone (by path, on a machine lent a GPU; no simhpu build needed):

    python3 benchmarks/step_kernels.py --device cuda -o step-kernels.json --steps vit,resnet
    python3 benchmarks/step_kernels.py --device cpu -o step-kernels-cpu.json   # the CPU as the part

On the CPU, the part is its own host: each ATen operator's own time (not its callees') stands in for
its kernels' (one intra-op thread; the profiler's own overhead is in it).

For each model zoo step (torch_simhpu/model_zoo.py, "gpu" scale on a GPU) it records, from
torch.profiler over one step after three warm-ups:
- every ATen operator that launched kernels, with its input shapes and dtypes: calls, the device
  time of the kernels it launched itself, and their names;
- every kernel by name: launches and device time;
- the step's wall time (synchronised, no profiler), the kernels' summed time and the device's busy
  time (the union of kernel intervals), so a step's host-bound share is visible.

`benchmarks/step_attribution.py FILE PROFILE` holds simhpu's price of the same step against it,
class by class (`--ops`: operator by operator).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import sys
import time

import torch


def _by_path(name: str):
    """A torch-alone module of torch_simhpu (its path in the package, slashes between folders), loaded by
    path (no package import: no extension needed)."""
    path = pathlib.Path(__file__).resolve().parents[1] / "torch_simhpu" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _busy(intervals: list[tuple[float, float]]) -> float:
    busy, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        busy += stop - max(start, end)
        end = stop
    return busy


class _CpuKernel:
    """An ATen operator's own time on the CPU, standing in for a kernel the profiler would name."""

    def __init__(self, name: str, duration: float):
        self.name, self.duration = name, duration


def profile_step(name: str, device: str, scale: str) -> dict:
    from torch.profiler import ProfilerActivity, profile
    step = _by_path("model_zoo").training_step(name, device, scale=scale)
    wall, _ = _by_path("simulation/part_measure").time_step(step, device)  # (three warm-ups, the median of ten)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.device(device).type == "cuda" else [])
    with profile(activities=activities, record_shapes=True) as prof:
        step()
        _sync(device)
    operators: dict[tuple, dict] = {}
    kernels: dict[str, dict] = {}
    intervals = []
    on_cpu = torch.device(device).type == "cpu"
    for event in prof.events():
        if on_cpu and event.device_type == torch.autograd.DeviceType.CPU and event.name.startswith("aten::") \
                and event.self_cpu_time_total > 0:
            # The CPU is its own device: an ATen operator's own time (its callees' not counted) is its kernel.
            event_kernels = [_CpuKernel(event.name, event.self_cpu_time_total)]
            intervals.append((event.time_range.start, event.time_range.start + event.self_cpu_time_total))
        elif event.device_type != torch.autograd.DeviceType.CPU or not event.kernels:
            continue
        else:
            event_kernels = event.kernels
        key = (event.name, json.dumps(event.input_shapes), json.dumps(getattr(event, "input_dtypes", None) or []))
        entry = operators.setdefault(key, dict(op=event.name, shapes=event.input_shapes,
                                               dtypes=getattr(event, "input_dtypes", None), calls=0,
                                               device_us=0.0, kernels={}))
        entry["calls"] += 1
        for kernel in event_kernels:
            entry["device_us"] += kernel.duration
            entry["kernels"][kernel.name[:100]] = entry["kernels"].get(kernel.name[:100], 0) + 1
            k = kernels.setdefault(kernel.name[:160], dict(kernel=kernel.name[:160], launches=0, device_us=0.0))
            k["launches"] += 1
            k["device_us"] += kernel.duration
    for event in prof.events():
        # (the device's own work: a user annotation, record_function's range mirrored on the device's
        # timeline - the optimizer's step, a module's forward - spans the idle gaps between its kernels
        # and is the likeliest reason the files before 2026-12-07 say a step was busier than its
        # kernels' sum, which no set of kernels can be)
        if event.device_type == torch.autograd.DeviceType.CUDA and not getattr(event, "is_user_annotation", False):
            intervals.append((event.time_range.start, event.time_range.end))
    ops = sorted(operators.values(), key=lambda e: -e["device_us"])
    return dict(model=name, scale=scale, wall_seconds=wall,
                kernel_seconds=sum(k["device_us"] for k in kernels.values()) * 1e-6,
                busy_seconds=_busy(intervals) * 1e-6, launches=sum(k["launches"] for k in kernels.values()),
                operators=ops, kernels=sorted(kernels.values(), key=lambda k: -k["device_us"]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--steps", default="gpt,llama,vit,bert,resnet")
    parser.add_argument("--scale", choices=("cpu", "gpu"), help="model zoo scale (default: gpu on a GPU, else cpu)")
    args = parser.parse_args(argv)
    scale = args.scale or ("gpu" if torch.device(args.device).type == "cuda" else "cpu")
    if torch.device(args.device).type == "cpu":
        torch.set_num_threads(1)  # (as benchmarks/cpu_as_a_part.py's part: one intra-op thread)
    out = dict(measured=time.strftime("%Y-%m-%d"), software=f"torch {torch.__version__}", steps=[])
    if torch.device(args.device).type == "cuda":
        out["part"] = torch.cuda.get_device_name()
        out["software"] += f" (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()})"
    for name in [s for s in args.steps.split(",") if s]:
        try:
            result = profile_step(name, args.device, scale)
        except Exception as error:  # noqa: BLE001 - one model's failure is named; the others still run
            out["steps"].append(dict(model=name, failed=f"{type(error).__name__}: {error}"))
            print(f"{name}: failed: {error}")
            continue
        out["steps"].append(result)
        print(f"{name}: wall {result['wall_seconds'] * 1e3:.2f} ms, kernels {result['kernel_seconds'] * 1e3:.2f} ms, "
              f"busy {result['busy_seconds'] * 1e3:.2f} ms, {result['launches']} launches")
        for op in result["operators"][:12]:
            print(f"    {op['device_us'] / 1e3:9.3f} ms  {op['calls']:4d}x  {op['op']}  {op['shapes']}")
        if torch.device(args.device).type == "cuda":
            torch.cuda.empty_cache()
    with open(args.output, "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
