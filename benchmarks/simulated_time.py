"""Simulated time against a real part, and what simulating costs.

    python benchmarks/simulated_time.py [--profile h100-sxm]          predicted times on simhpu
    python benchmarks/simulated_time.py --device cuda [--profile ...]  the same set measured on a GPU
                                                                       beside the prediction, with the error

The set: elementwise adds of several sizes, sum reductions, GEMMs from 256^2 to
8192^2 in float32 and bfloat16, softmax, layer_norm, SDPA, the launch points
(an eager tiny add per launch, launch + synchronise, graph replay per kernel),
a tiny GPT-2 training step and a 64 MB all_reduce over two devices. Each row is
the simulated time per iteration of a loop run on simhpu with the profile on
(the host's time measured here, as a user's run would); GEMMs too large to run
on this CPU in reasonable time are priced by the same cost model without being
run ("priced"). The all_reduce row is the fabric model's figure for two devices.

With --device cuda the script runs the same loops on the GPU (torch.cuda
events, after warm-up) and prints measured, predicted and the error. Without a
GPU it prints the published reference points for the H100-class profile next
to the prediction instead (see issue 26 and docs/simulated_time.md).

The last rows are the cost of simulating: a 1-element launch and the tiny GPT-2
eager step with simulated time off against on, in alternating rounds.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

import torch

# Published and measured reference points for the H100-class profile (issue 26:
# an H100 host with torch 2.11 / CUDA 13, and the datasheet). Seconds per iteration.
H100_POINTS = {
    "eager tiny add, per launch": 10e-6,
    "launch + synchronise": 14.9e-6,
    "add 64M float32 (3 x 256 MB)": 3 * (64 << 20) * 4 / 2.98e12,
    "graph replay, per kernel": 1 / 1.03e6,
    "GEMM 8192^2 bfloat16": 2 * 8192 ** 3 / 989.4e12 / 0.75,  # the datasheet at 75 % (runtime_estimator's factor)
}

RUN_LIMIT_FLOPS = 2 * 2048 ** 3  # larger GEMMs are priced, not run, on this CPU


def gpt2(device):
    from tiny_gpt2 import training_step
    return training_step(device)


def workloads(device):
    """(name, make) pairs; make() returns (fn, iterations) or None to price instead of run."""
    def tensors(*shape, dtype=torch.float32):
        return torch.randn(*shape, device=device, dtype=dtype)

    rows = []
    x1 = torch.ones(1, device=device)
    rows.append(("eager tiny add, per launch", lambda: (lambda: x1.add_(1), 200)))
    rows.append(("launch + synchronise", lambda: (lambda: (x1.add_(1), sync(device)), 50)))
    for n in (1 << 20, 16 << 20, 64 << 20):
        def make(n=n):
            a = tensors(n)
            return (lambda: a + a), 3 if n >= 16 << 20 else 20
        label = f"add {n >> 20}M float32" + (" (3 x 256 MB)" if n == 64 << 20 else "")
        rows.append((label, make))
    for shape in ((1024, 1024), (64, 1 << 20)):
        def make(shape=shape):
            a = tensors(*shape)
            return (lambda: a.sum(-1)), 20
        rows.append((f"sum over the last dim of {shape[0]}x{shape[1]}", make))
    for dtype in (torch.float32, torch.bfloat16):
        for n in (256, 1024, 2048, 4096, 8192):
            def make(n=n, dtype=dtype):
                if 2 * n ** 3 > RUN_LIMIT_FLOPS and device != "cuda":
                    return None
                a, b = tensors(n, n, dtype=dtype), tensors(n, n, dtype=dtype)
                return (lambda: a @ b), 20 if n <= 1024 else 3
            rows.append((f"GEMM {n}^2 {str(dtype)[6:]}", make))
    rows.append(("softmax 4096x4096", lambda: ((lambda a: (lambda: a.softmax(-1)))(tensors(4096, 4096)), 3)))
    rows.append(("layer_norm 8192x1024", lambda: ((lambda a: (lambda: torch.nn.functional.layer_norm(
        a, (1024,))))(tensors(8192, 1024)), 3)))
    rows.append(("SDPA 8x16x1024x64", lambda: ((lambda q: (lambda: torch.nn.functional.scaled_dot_product_attention(
        q, q, q, is_causal=True)))(tensors(8, 16, 1024, 64)), 3)))
    rows.append(("graph replay, per kernel", lambda: graph_replay(device)))
    try:
        import transformers  # noqa: F401
        rows.append(("tiny GPT-2 eager training step", lambda: (gpt2(device), 3)))
    except ImportError:
        pass
    return rows


def graph_replay(device):
    x = torch.zeros(16, device=device)
    module = torch.cuda if device == "cuda" else torch.simhpu
    side = module.Stream()
    side.wait_stream(module.current_stream())
    g = module.CUDAGraph() if device == "cuda" else module.Graph()
    with module.stream(side):
        with module.graph(g):
            for _ in range(1000):
                x.add_(1)
    module.current_stream().wait_stream(side)
    return (lambda: g.replay()), 1, 1000  # per kernel: 1000 in a replay


def sync(device):
    (torch.cuda if device == "cuda" else torch.simhpu).synchronize()


def predicted(make, profile: str) -> tuple[float, float, str]:
    """Simulated seconds per iteration (per kernel for graph replay), with the host's
    time measured here and with it modelled."""
    made = make()
    if made is None:
        return math.nan, math.nan, "priced"
    fn, iterations, *per = made
    fn()
    sync("simhpu")
    spans = []
    for host_time in ("measured", "modelled"):
        with torch.simhpu.simulate(profile, host_time=host_time) as run:
            for _ in range(iterations):
                fn()
        spans.append(run.span / iterations / (per[0] if per else 1))
    return spans[0], spans[1], "run"


def priced_gemm(n: int, dtype, profile) -> float:
    a = torch.empty(n, n, dtype=dtype, device="meta")
    return torch.simhpu.price(torch.mm, a, a, profile=profile).seconds


def measured_cuda(make) -> float:
    made = make()
    fn, iterations, *per = made
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iterations):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / iterations / (per[0] if per else 1)


def cost_rows(Row, best_pair):
    """Simulated time off against on: a 1-element launch, and the tiny GPT-2 eager step."""
    import torch_simhpu

    def switched(on, fn, host_time="measured"):
        def run():
            if on:
                torch.simhpu.set_profile("h100-sxm", host_time=host_time)
            try:
                fn()
                torch.simhpu.synchronize()
            finally:
                torch.simhpu.set_profile(None)
        return run

    n = 100_000
    a, b = torch.ones(1, device="simhpu"), torch.ones(1, device="simhpu")

    def launches():
        for _ in range(n):
            torch_simhpu.npu_add_custom(a, b)
    off, on = best_pair(switched(False, launches), switched(True, launches), n)
    rows = [Row("launch of a 1-element op, simulated time off (left) / on", "us", off * 1e6, on * 1e6,
                "ratio <= 2.5")]
    off, on = best_pair(switched(False, launches), switched(True, launches, "modelled"), n)
    rows.append(Row("the same, host time modelled (no CPU clock read)", "us", off * 1e6, on * 1e6, "ratio <= 2.5"))
    try:
        step = gpt2("simhpu")
    except ImportError:
        return rows
    off, on = best_pair(switched(False, step), switched(True, step), 1)
    rows.append(Row("tiny GPT-2 eager training step, simulated time off (left) / on", "ms", off * 1e3, on * 1e3,
                    "ratio <= 1.2"))
    return rows


def print_priced(profile: str) -> None:
    """What the cost model answers for shapes it prices, through the public API (torch.simhpu.price)."""
    def meta(*shape, dtype=torch.bfloat16):
        return torch.empty(*shape, dtype=dtype, device="meta")

    print(f"\npriced on {profile} (torch.simhpu.price / price_collective):")
    for n in (1024, 8192):
        (mm,) = torch.simhpu.price(torch.mm, meta(n, n), meta(n, n), profile=profile).kernels
        print(f"  GEMM {n}^2 bfloat16{'':<24} {mm.duration * 1e6:>10.2f}us  {mm.peak_fraction:>6.1%} of peak")
    a8, scale = meta(8192, 8192, dtype=torch.float8_e4m3fn), meta((), dtype=torch.float32)
    fp8 = torch.simhpu.price(torch._scaled_mm, a8, a8.t(), scale, scale, out_dtype=torch.bfloat16, profile=profile)
    print(f"  GEMM 8192^2 float8_e4m3fn{'':<18} {fp8.seconds * 1e6:>10.2f}us")
    q = meta(2, 32, 8192, 128)
    for causal in (False, True):
        price = torch.simhpu.price(
            lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal),
            q, q, q, profile=profile)
        attention = max(price.kernels, key=lambda k: k.flops)
        print(f"  SDPA 2x32x8192x128 bfloat16{', causal' if causal else '':<16} {attention.duration * 1e6:>10.2f}us"
              f"  {attention.peak_fraction:>6.1%} of peak (FLOPs counted whole)")
    for ranks in (8, 16, 64, 1024):
        price = torch.simhpu.price_collective("all_reduce", 2 ** 30, ranks, profile=profile)
        print(f"  all_reduce 1 GiB over {ranks:>4} ({price.nodes:>3} node(s)){'':<6} {price.seconds * 1e6:>10.2f}us"
              f"  bus bandwidth {price.bus_bandwidth / 1e9:.1f} GB/s")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="h100-sxm")
    parser.add_argument("--device", choices=("simhpu", "cuda"), default="simhpu")
    parser.add_argument("--no-cost-rows", action="store_true", help="skip simulated time's own cost")
    options = parser.parse_args()
    import torch_simhpu  # noqa: F401

    cuda = options.device == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA device here")
    print(f"profile {options.profile}; times per iteration; predicted with the host's time measured here "
          "(host) and modelled (model); 'priced' rows are the cost model without a run")
    print(f"{'workload':<36} {'host':>11} {'model':>11}  {'how':<6} "
          f"{'measured' if cuda else 'reference':>11} {'err host':>8} {'err model':>9}")
    gpu_rows = dict(workloads("cuda")) if cuda else {}

    def us(seconds):
        return f"{seconds * 1e6:>9.2f}us" if seconds == seconds else f"{'':>11}"

    def error(seconds, reference):
        return f"{(seconds / reference - 1) * 100:+.1f}%" if reference == reference and seconds == seconds else ""

    for name, make in workloads("simhpu"):
        host, model, how = predicted(make, options.profile)
        if how == "priced":
            n, dtype = int(name.split()[1].split("^")[0]), getattr(torch, name.split()[-1])
            model = priced_gemm(n, dtype, options.profile)
        if cuda:
            reference = measured_cuda(gpu_rows[name])
        else:
            reference = H100_POINTS.get(name, math.nan) if options.profile == "h100-sxm" else math.nan
        print(f"{name:<36} {us(host)} {us(model)}  {how:<6} {us(reference)} {error(host, reference):>8} "
              f"{error(model, reference):>9}")
    mb64 = 64 << 20

    def all_reduce(n):
        return torch.simhpu.price_collective("all_reduce", mb64, n, profile=options.profile).seconds
    print(f"{'all_reduce 64 MB, 2 devices (model)':<40} {all_reduce(2) * 1e6:>10.2f}us  {'priced':<6}")
    for n in (8, 64, 1024):
        print(f"{f'  ... at {n} devices':<40} {all_reduce(n) * 1e6:>10.2f}us")
    print_priced(options.profile)
    if not options.no_cost_rows:
        from tables import Row, best_pair, print_table
        print()
        print_table(cost_rows(Row, best_pair))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(__file__))
    main()
