"""Phantom execution and simulated ranks: what they cost on this machine.

    python benchmarks/phantom.py            all rows
    python benchmarks/phantom.py --quick    skip the 70B row
    python benchmarks/phantom.py --405b     the Llama 3 405B pipeline rows only
    python benchmarks/phantom.py --experts  the DeepSeek-V3 expert-parallel rows only

Rows (each in a fresh process, SIMHPU_DEVICE_PROFILE=h100-sxm SIMHPU_EXECUTE=0):
- the phantom launch path: launches per second of the runtime's own launch path
  (no Python, no dispatcher: _C._time_empty_launches), then of a 1-element
  torch.add from Python, and of an 8192^2 bfloat16 matmul from Python, which
  costs the same as the tiny one because nothing runs; beside each, the same
  launch with execution on (the CPU reference measured in the same run).
- torchtitan's Llama-3.1 training (python -m torchtitan.train, unchanged) at
  the layouts of its published H100 tables, through the simulation command:
  wall time and peak resident memory of the process for the model build plus
  one step (target, issue 39: 70B on 256 ranks in <= 2 min and <= 4 GB), and
  the simulated step time (the span of 3 steps less that of 1, over 2: the
  first step's start-up left out), TPS/GPU and memory against the published
  row; then the planner's figures of the same runs from the simulation report
  (MFU, FLOP utilisation, exposed communication, the memory peak against the
  capacity by category). The working folder (tokenizer with Llama 3's 128,256
  entries, a C4-shaped dataset) is made by tests/titan_runs/harness.py.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

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
    if torch_simhpu.simulation.phantom.enabled():
        w = torch.empty(8192, 8192, device="simhpu", dtype=torch.bfloat16)
        out["matmul 8192^2 bfloat16, from Python"] = rate(lambda: w @ w, 20000)
    print(json.dumps(out))
""")

def run(code: str, env: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, **env), timeout=1800, cwd="/tmp")
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-4000:])
    return json.loads(next(line for line in out.stdout.splitlines() if line.startswith("{")))


# torchtitan's published rows (benchmarks/llama3_h100_202412_torchtitan.md in its repository,
# https://github.com/pytorch/torchtitan/blob/main/benchmarks/llama3_h100_202412_torchtitan.md):
# (name, flavor, ranks, tp, local batch, activation checkpointing, published TPS/GPU, GiB, comparable)
TITAN_ROWS = [
    ("Table 1, 8B FSDP, 8 GPUs", "8B", 8, 1, 2, ("selective", "op"), 5762, 82.4, True),
    ("Table 3, 8B FSDP, 128 GPUs", "8B", 128, 1, 2, ("selective", "op"), 5605, 67.0, True),
    # published with torch.compile and Float8, which this eager bfloat16 run does not use
    ("Table 4, 70B FSDP 32 x TP 8, 256 GPUs", "70B", 256, 8, 16, ("full", "op"), 829, 71.9, False),
]
SEQ_LEN = 8192
PROFILE = "h100-hbm2e-96gb"  # the published hardware (torch_simhpu/simulation/profiles/h100-hbm2e-96gb.json)
# ...and the published software: the PyTorch of 2024-12-23 took SDPA's flash backend first on an H100.
# cuDNN's was opt-in from 2.5.1 (pytorch/pytorch#138522; #142132 shows a 2.6 nightly of 2024-12-04 not
# taking it) until 2.9 made it the default on sm90 again (#162073), as the torch this project measured
# (2.11) does; torchtitan asked for it itself only in 2025-03 (pytorch/torchtitan#1000).
PUBLISHED_ATTENTION_PRIORITY = ["flash", "efficient", "math", "cudnn"]


def published_profile(folder: str) -> str:
    """PROFILE with the attention backends tried in the published run's order: a file in `folder`."""
    path = os.path.join(folder, f"{PROFILE}-torch-2024-12.json")
    with open(path, "w") as f:
        json.dump({"name": f"{PROFILE}-sdpa-as-torch-2024-12", "inherits": PROFILE,
                   "attention": {"priority": PUBLISHED_ATTENTION_PRIORITY}}, f)
    return path


def titan_config(folder, flavor, tp, batch, ac) -> str:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from tests.titan_runs.harness import DEBUG_MODEL_TOML

    toml = (DEBUG_MODEL_TOML.replace('flavor = "debugmodel"', f'flavor = "{flavor}"')
            .replace("tensor_parallel_degree = 1", f"tensor_parallel_degree = {tp}")
            .replace('mode = "selective"', f'mode = "{ac[0]}"').replace('selective_ac_option = "2"',
                                                                      f'selective_ac_option = "{ac[1]}"')
            .replace("local_batch_size = 8", f"local_batch_size = {batch}")
            .replace("seq_len = 2048", f"seq_len = {SEQ_LEN}"))
    path = os.path.join(folder, f"{flavor}_{tp}_{batch}.toml")
    with open(path, "w") as f:
        f.write(toml)
    return path


def titan(folder, profile, config, ranks, steps, tokens_per_step) -> dict:
    """One phantom run of rank 0: its simulated span, the last step's memory (torchtitan's), wall
    time and peak RSS, and the planner's figures from the simulation report."""
    command = [sys.executable, "-m", "torch_simhpu.simulation", "--profile", profile, "--host-time", "modelled",
               "--world", str(ranks), "--rank", "0", "--tokens-per-step", str(tokens_per_step),
               "-m", "torchtitan.train", "--job.config_file", config,
               "--training.steps", str(steps), "--metrics.log_freq", "1"]
    start = time.perf_counter()
    out = subprocess.run(["/usr/bin/env", *command], capture_output=True, text=True, cwd=folder, timeout=1800)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-4000:])
    span = float(re.search(r"simulated on \S+: ([0-9.]+) s from", out.stdout).group(1))
    memory = [float(m) for m in re.findall(r"memory:\s+([0-9.]+)GiB", re.sub(r"\x1b\[[0-9;]*m", "", out.stdout))]
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    report = {"mfu": r"MFU ([0-9.]+)%", "flop_use": r"FLOP utilisation over the steady step\(s\): ([0-9.]+)%",
              "exposed": r"exposed \(no compute beside it\) [^=]+= ([0-9.]+)% of the step",
              "peak": r"memory at its peak: ([0-9.]+ \S+) of",
              "capacity": r"memory at its peak: [0-9.]+ \S+ of ([0-9.]+ \S+)"}
    planner = {key: re.search(pattern, out.stdout).group(1) for key, pattern in report.items()}
    for name in ("parameters", "gradients", "optimizer state", "communication buffers", "activations and temporaries"):
        planner[name] = re.search(rf"^  {name} +([0-9.]+ \S+)", out.stdout, re.M).group(1)
    return {"span": span, "memory": memory[-1], "wall": wall, "rss_gb": rss, "planner": planner}


def titan_workdir(prefix: str) -> str:
    """A working folder for torchtitan's runs: a tokenizer of Llama 3's 128,256 entries and a
    C4-shaped dataset (tests/titan_runs/harness.py)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from tests.titan_runs.harness import make_workdir

    folder = tempfile.mkdtemp(prefix=prefix)
    make_workdir(Path(folder), reserved_to=128256)
    return folder


def titan_rows() -> None:
    folder = titan_workdir("simhpu-titan-")
    profile = published_profile(folder)
    print(f"\ntorchtitan (unchanged) under phantom execution on {PROFILE}, SDPA's backends tried as the published "
          f"run's torch did ({', '.join(PUBLISHED_ATTENTION_PRIORITY)}), rank 0 of each layout, seq {SEQ_LEN}:")
    print(f"{'published row':<40} {'wall 1 step':>11} {'RSS':>7} {'step (sim)':>10} {'TPS/GPU':>8} "
          f"{'published':>9} {'step err':>8} {'GiB':>6} {'published':>9} {'mem err':>7}")
    planners = []
    for name, flavor, ranks, tp, batch, ac, tps_published, gib_published, comparable in TITAN_ROWS:
        config = titan_config(folder, flavor, tp, batch, ac)
        tokens_per_gpu = batch * SEQ_LEN // tp
        one = titan(folder, profile, config, ranks, 1, tokens_per_gpu)
        three = titan(folder, profile, config, ranks, 3, tokens_per_gpu)
        planners.append((name, three["planner"]))
        step = (three["span"] - one["span"]) / 2
        tps = tokens_per_gpu / step
        step_published = tokens_per_gpu / tps_published
        note = "" if comparable else "  (published: compile + Float8)"
        print(f"{name:<40} {one['wall']:>9.1f} s {one['rss_gb']:>5.2f}GB {step:>8.3f} s {tps:>8,.0f} "
              f"{tps_published:>9,} {100 * (step / step_published - 1):>+7.1f}% {three['memory']:>6.1f} "
              f"{gib_published:>9.1f} {100 * (three['memory'] / gib_published - 1):>+6.1f}%{note}")
    print("targets: 70B at 256 ranks <= 120 s and <= 4 GB; within 15 % on step time and 5 % on memory")
    print("\nthe planner's report of the same runs (3 steps; MFU: 6 x parameters a token, attention's own left out; "
          "memory: the allocator's peak, by category):")
    print(f"{'published row':<40} {'MFU':>6} {'FLOPs':>6} {'exposed':>8} {'peak':>10} {'capacity':>10} "
          f"{'params':>10} {'grads':>10} {'optimizer':>10} {'comm':>10} {'activations':>11}")
    for name, p in planners:
        print(f"{name:<40} {p['mfu']:>5}% {p['flop_use']:>5}% {p['exposed']:>7}% {p['peak']:>10} {p['capacity']:>10} "
              f"{p['parameters']:>10} {p['gradients']:>10} {p['optimizer state']:>10} "
              f"{p['communication buffers']:>10} {p['activations and temporaries']:>11}")


# The Llama 3 paper's 405B pre-training layouts (Table 4 of "The Llama 3 Herd of Models",
# https://arxiv.org/abs/2407.21783): H100 SXM 80 GB at 700 W, bfloat16, 16M tokens a step.
# (name, GPUs, tp, cp, pp, dp, sequence, sequences a DP rank a step, published TFLOP/s a GPU)
LLAMA3_405B_ROWS = [
    ("8,192 GPUs, TP 8 x PP 16 x DP 64, seq 8k", 8192, 8, 1, 16, 64, 8192, 32, 430),
    ("16,384 GPUs, TP 8 x PP 16 x DP 128, seq 8k", 16384, 8, 1, 16, 128, 8192, 16, 400),
    ("16,384 GPUs, TP 8 x CP 16 x PP 16 x DP 8, seq 128k", 16384, 8, 16, 16, 8, 131072, 16, 380),
]
LLAMA3_405B = {"layers": 126, "dim": 16384, "parameters": 405.85e9}  # torchtitan's "405B" flavor, counted


def model_flops_per_token(seq: int) -> float:
    """6 x parameters plus causal attention's matmuls (forward and backward), per token."""
    m = LLAMA3_405B
    return 6 * m["parameters"] + 6 * m["layers"] * seq * m["dim"]


def pss_of_tree(pid: int) -> int:
    """Bytes the process and its descendants hold, each shared page counted once (their PSS summed)."""
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("Pss:")) * 1024
            with open(f"/proc/{p}/task/{p}/children") as f:
                stack += [int(c) for c in f.read().split()]
        except (OSError, StopIteration):
            continue
    return total


def pipeline_job(folder: str, name: str, gpus: int, tp: int, cp: int, pp: int, seq: int, sequences: int,
                 steps: int = 2) -> dict:
    """torchtitan's Llama 3 405B (unchanged) at a layout: one process a pipeline stage (the first rank
    of each), their clocks joined; wall time, the memory of all of them (PSS, sampled), each stage's
    step, bubble and memory."""
    import threading

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from tests.titan_runs.harness import DEBUG_MODEL_TOML

    toml = (DEBUG_MODEL_TOML.replace('flavor = "debugmodel"', 'flavor = "405B"')
            .replace("tensor_parallel_degree = 1",
                     f"tensor_parallel_degree = {tp}\ncontext_parallel_degree = {cp}\n"
                     f"pipeline_parallel_degree = {pp}\npipeline_parallel_schedule = \"Interleaved1F1B\"\n"
                     "pipeline_parallel_microbatch_size = 1")
            .replace('mode = "selective"', 'mode = "full"')  # (selective op AC runs out of the 80 GB at stage 0)
            .replace("local_batch_size = 8", f"local_batch_size = {sequences}")
            .replace("seq_len = 2048", f"seq_len = {seq}"))
    config = Path(folder) / f"405b_{gpus}_{cp}.toml"
    config.write_text(toml)
    ranks = ",".join(str(stage * gpus // pp) for stage in range(pp))
    command = [sys.executable, "-m", "torch_simhpu.simulation", "--profile", "h100-sxm", "--world", str(gpus),
               "--rank", ranks, "-m", "torchtitan.train", "--job.config_file", str(config),
               "--training.steps", str(steps), "--metrics.log_freq", "1"]
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0]

    def sample():
        while process.poll() is None:
            peak[0] = max(peak[0], pss_of_tree(process.pid))
            time.sleep(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = process.communicate(timeout=3600)
    wall = time.perf_counter() - start
    sampler.join()
    if process.returncode != 0:
        raise RuntimeError(f"{name}: {err[-4000:]}")
    step = [float(x) for x in re.findall(r"the step: ([0-9.]+) s", out)]
    bubble = [float(x) for x in re.findall(r"pipeline bubble a step: [^=]+= ([0-9.]+)% of the step", out)]
    memory = [float(m) for m in re.findall(r"memory:\s+([0-9.]+)GiB", re.sub(r"\x1b\[[0-9;]*m", "", out))]
    return {"wall": wall, "pss_gb": peak[0] / 1e9, "step": max(step),
            "bubble": (min(bubble), max(bubble)) if bubble else None, "memory": max(memory) if memory else None}


def llama3_405b_rows() -> None:
    folder = titan_workdir("simhpu-405b-")
    print("\ntorchtitan's Llama 3 405B (unchanged), Interleaved1F1B, full AC, bfloat16 (FSDP's mixed precision), "
          "on h100-sxm: a process a pipeline stage, clocks joined; 2 steps, the second's time")
    print(f"{'layout (Llama 3 paper, Table 4)':<46} {'wall':>7} {'memory':>7} {'step':>8} {'TFLOP/s':>8} "
          f"{'published':>9} {'error':>7} {'bubble':>12} {'GiB/GPU':>8}")
    for name, gpus, tp, cp, pp, dp, seq, sequences, published in LLAMA3_405B_ROWS:
        row = pipeline_job(folder, name, gpus, tp, cp, pp, seq, sequences)
        tokens = dp * sequences * seq  # a step, the whole job
        tflops = model_flops_per_token(seq) * tokens / gpus / row["step"] / 1e12
        bubble = f"{row['bubble'][0]:.1f}-{row['bubble'][1]:.1f}%" if row["bubble"] else "-"
        print(f"{name:<46} {row['wall']:>5.0f} s {row['pss_gb']:>5.2f}GB {row['step']:>6.2f} s {tflops:>8.0f} "
              f"{published:>9} {100 * (tflops / published - 1):>+6.1f}% {bubble:>12} {row['memory']:>8.1f}")
    print("targets (issue 55): each layout priced in <= 10 minutes and <= 8 GB on this machine; "
          "TFLOP/s a GPU: 6 x parameters + causal attention, as the paper's MFU")


# torchtitan's DeepSeek-V3 16B (64 routed experts, 6 a token, 2 shared; unchanged) at expert
# parallelism 64 over 64 ranks (FSDP over the same 64), 2 sequences of 4,096 tokens a rank:
# the routing stated by SIMHPU_PHANTOM_ROUTING, and the rank played (0 holds expert 0, the
# hottest under a Zipf skew; 63 the coldest).
DEEPSEEK_ROWS = [("balanced", 0), ("zipf:0.5", 0), ("zipf:0.5", 63)]


def deepseek_job(folder: str, routing: str, rank: int, steps: int = 3) -> dict:
    """One simulated rank of the expert-parallel job: its wall time, its step, and the time its
    all_to_alls and its GEMMs take a step."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from tests.titan_runs.harness import DEBUG_MODEL_TOML

    config = Path(folder) / "deepseek_v3_16b_ep64.toml"
    config.write_text(DEBUG_MODEL_TOML.replace('name = "llama3"', 'name = "deepseek_v3"')
                      .replace('flavor = "debugmodel"', 'flavor = "16B"')
                      .replace("tensor_parallel_degree = 1", "tensor_parallel_degree = 1\nexpert_parallel_degree = 64")
                      .replace("local_batch_size = 8", "local_batch_size = 2").replace("seq_len = 2048", "seq_len = 4096"))
    command = [sys.executable, "-m", "torch_simhpu.simulation", "--profile", "h100-sxm", "--world", "64",
               "--rank", str(rank), "-m", "torchtitan.train", "--job.config_file", str(config),
               "--training.steps", str(steps)]
    start = time.perf_counter()
    out = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=1800,
                         env=dict(os.environ, SIMHPU_PHANTOM_ROUTING=routing))
    wall = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(f"{routing} rank {rank}: {out.stderr[-4000:]}")
    step = float(re.search(r"the step: ([0-9.]+) s", out.stdout).group(1))
    seconds = {"s": 1.0, "ms": 1e-3, "us": 1e-6}

    def operator_time(name: str) -> float:
        match = re.search(rf"^{re.escape(name)} +\d+ +([0-9.]+) (s|ms|us)", out.stdout, re.M)
        return float(match.group(1)) * seconds[match.group(2)] / steps if match else 0.0

    return {"wall": wall, "step": step, "all_to_all": operator_time("all_to_all_single"),
            "mm": operator_time("aten::mm.out")}


def deepseek_rows() -> None:
    folder = titan_workdir("simhpu-deepseek-")
    print("\ntorchtitan's DeepSeek-V3 16B (unchanged), expert parallelism 64 on 64 ranks, 2 x 4,096 tokens a rank, "
          "h100-sxm, 3 steps (the step: the mean of the last 2)")
    print(f"{'routing':<10} {'rank':>5} {'wall':>7} {'step':>8} {'all_to_all a step':>18} {'GEMMs a step':>13}")
    for routing, rank in DEEPSEEK_ROWS:
        row = deepseek_job(folder, routing, rank)
        print(f"{routing:<10} {rank:>5} {row['wall']:>5.0f} s {row['step']:>6.3f} s {row['all_to_all']:>16.3f} s "
              f"{row['mm']:>11.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="the launch rates only")
    parser.add_argument("--405b", dest="llama405", action="store_true",
                        help="only torchtitan's Llama 3 405B at the Llama 3 paper's layouts (30 minutes)")
    parser.add_argument("--experts", action="store_true",
                        help="only torchtitan's DeepSeek-V3 16B at expert parallelism 64, balanced and skewed (5 minutes)")
    parser.add_argument("--titan", action="store_true",
                        help="only torchtitan's published H100 rows (8B and 70B, a few minutes)")
    options = parser.parse_args()
    if options.titan:
        titan_rows()
        return
    if options.llama405:
        llama3_405b_rows()
        return
    if options.experts:
        deepseek_rows()
        return
    phantom = run(LAUNCH_RATES, PHANTOM_ENV)
    executed = run(LAUNCH_RATES, {})
    print(f"{'launch rate (per second)':<44} {'phantom':>12} {'sim. off':>12} {'ratio':>7}")
    for name, rate in phantom.items():
        other = executed.get(name)
        print(f"{name:<44} {rate:>12,.0f} {other or float('nan'):>12,.0f} "
              f"{rate / other if other else float('nan'):>6.2f}x")
    print("target: the runtime launch path >= 200,000 phantom launches/s")
    if not options.quick:
        titan_rows()
        llama3_405b_rows()
        deepseek_rows()


if __name__ == "__main__":
    main()
