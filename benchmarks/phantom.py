"""Phantom execution and simulated ranks: what they cost on this machine.

    python benchmarks/phantom.py            all rows
    python benchmarks/phantom.py --quick    skip the 70B row

Rows (each in a fresh process, SIMHPU_DEVICE_PROFILE=h100-sxm SIMHPU_EXECUTE=0):
- the phantom launch path: launches per second of the runtime's own launch path
  (no Python, no dispatcher: _C._time_empty_launches), then of a 1-element
  torch.add from Python, and of an 8192^2 bfloat16 matmul from Python, which
  costs the same as the tiny one because nothing runs; beside each, the same
  launch with execution on (the CPU reference measured in the same run).
- Llama-3.1-70B (torchtitan's model definition, its 70B arguments with the
  Llama 3 vocabulary) on 256 simulated ranks, FSDP 32 x TP 8, built on the meta
  device and moved with to_empty: wall time for the build plus one training
  step, and the peak resident memory of the process. Target (issue 39): <= 2 min, <= 4 GB.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time

PHANTOM_ENV = {"SIMHPU_DEVICE_PROFILE": "h100-sxm", "SIMHPU_EXECUTE": "0"}

LAUNCH_RATES = textwrap.dedent("""
    import json, time, torch, torch_simhpu
    from torch_simhpu import _C
    out = {}
    n = 200000
    out["runtime launch path"] = n / min(_C._time_empty_launches(n) for _ in range(3))
    def rate(fn, n):
        fn(); torch.simhpu.synchronize()
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            for _ in range(n):
                fn()
            torch.simhpu.synchronize()
            best = min(best, time.perf_counter() - t)
        return n / best
    x = torch.ones(1, device="simhpu")
    out["torch.add, 1 element, from Python"] = rate(lambda: torch.add(x, x), 20000)
    if torch_simhpu.phantom.enabled():
        w = torch.empty(8192, 8192, device="simhpu", dtype=torch.bfloat16)
        out["matmul 8192^2 bfloat16, from Python"] = rate(lambda: w @ w, 20000)
    print(json.dumps(out))
""")

LLAMA_70B = textwrap.dedent("""
    import os, resource, sys, time, json
    start = time.perf_counter()
    import torch, torch_simhpu
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                                   PrepareModuleInput, parallelize_module)
    from torch.distributed.tensor import Shard, Replicate
    from torchtitan.models.llama3 import llama3_args
    from torchtitan.models.llama3.model.model import Transformer

    dist.init_process_group()
    mesh = init_device_mesh("simhpu", (32, 8), mesh_dim_names=("dp_shard", "tp"))
    args = llama3_args["70B"]
    args.vocab_size = 128256
    args.max_seq_len = 8192
    with torch.device("meta"):
        model = Transformer(args)
    tp = mesh["tp"]
    # torchtitan's own tensor-parallel plan for Llama (its parallelize_llama), written out
    parallelize_module(model, tp, {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=True),
    })
    for block in model.layers.values():
        parallelize_module(block, tp, {
            "attention_norm": SequenceParallel(),
            "attention": PrepareModuleInput(input_layouts=(Shard(1), None, None),
                                            desired_input_layouts=(Replicate(), None, None)),
            "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
            "feed_forward.w3": ColwiseParallel(),
        })
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.layers.values():
        fully_shard(block, mesh=mesh["dp_shard"], mp_policy=policy)
    fully_shard(model, mesh=mesh["dp_shard"], mp_policy=policy)
    model.to_empty(device="simhpu")
    with torch.no_grad():
        model.init_weights(buffer_device=torch.device("simhpu"))
    built = time.perf_counter()
    opt = torch.optim.AdamW(model.parameters(), lr=1.5e-4, foreach=True)
    tokens = torch.randint(0, 128256, (1, 8192), device="simhpu")
    with torch.simhpu.simulate() as sim:
        logits = model(tokens)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), tokens.flatten(0, 1))
        loss.backward()
        opt.step()
        opt.zero_grad()
    done = time.perf_counter()
    print(json.dumps({"build_s": built - start, "step_s": done - built, "wall_s": done - start,
                      "rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                      "simulated_step_s": sim.span, "launches": len(sim.launches),
                      "peak_gb": torch.simhpu.max_memory_allocated() / 1e9}))
""")


def run(code: str, env: dict, *command: str) -> dict:
    out = subprocess.run([sys.executable, *command, "-c", code] if not command else [sys.executable, *command],
                         capture_output=True, text=True, env=dict(os.environ, **env), timeout=1800, cwd="/tmp")
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-4000:])
    return json.loads(next(line for line in out.stdout.splitlines() if line.startswith("{")))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    options = parser.parse_args()
    phantom = run(LAUNCH_RATES, PHANTOM_ENV)
    executed = run(LAUNCH_RATES, {})
    print(f"{'launch rate (per second)':<44} {'phantom':>12} {'executed':>12} {'ratio':>7}")
    for name, rate in phantom.items():
        other = executed.get(name)
        print(f"{name:<44} {rate:>12,.0f} {other or float('nan'):>12,.0f} "
              f"{rate / other if other else float('nan'):>6.2f}x")
    print("target: the runtime launch path >= 200,000 phantom launches/s")
    if options.quick:
        return
    script = "/tmp/simhpu_llama70b.py"
    with open(script, "w") as f:
        f.write(LLAMA_70B)
    t = time.perf_counter()
    row = run("", {}, "-m", "torch_simhpu.simulation", "--profile", "h100-sxm", "--world", "256", "--rank", "0",
              script)
    wall = time.perf_counter() - t
    print(f"\nLlama-3.1-70B, 256 simulated ranks (FSDP 32 x TP 8), 1 x 8192 tokens per rank, phantom:")
    print(f"  process wall {wall:.1f} s (model build {row['build_s']:.1f} s, step {row['step_s']:.1f} s), "
          f"peak RSS {row['rss_gb']:.2f} GB; target <= 120 s and <= 4 GB")
    print(f"  simulated step {row['simulated_step_s']:.3f} s over {row['launches']} launches; "
          f"device memory peak {row['peak_gb']:.1f} GB of 80")


if __name__ == "__main__":
    main()
