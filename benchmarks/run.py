"""torch_simhpu against PyTorch CPU, measured in one run: one table, every target.

    python benchmarks/run.py              every row (about 4 minutes: two builds)
    python benchmarks/run.py --no-build   without the build rows (under a minute)

Run it with the installed wheel (scripts/setup_env.sh), from any folder. Each row
gives the PyTorch CPU figure, ours, ours / PyTorch's, the target and whether
it is met. Times: lower is better; rates (GB/s, tasks/s): higher is better.
Every figure is the best of several rounds, since this machine is shared.
"""
import argparse
import math
import os
import subprocess
import sys

import torch
import torch.nn.functional as F

import torch_simhpu

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import copies_and_frees  # noqa: E402
import collectives  # noqa: E402
import sanitizer  # noqa: E402
import simulated_time  # noqa: E402
import graph_mode  # noqa: E402
import launch_conditions  # noqa: E402
import reference_path  # noqa: E402
from tables import Row, best_pair, best_seconds, print_table, repeat  # noqa: E402

# ---------------------------------------------------------------- launch path

def launch_rows() -> list[Row]:
    n = 200_000
    add = torch_simhpu.npu_add_custom
    a, b = torch.ones(1), torch.ones(1)
    da, db = a.simhpu(), b.simhpu()

    def ours():
        repeat(add, da, db, n)()
        torch.simhpu.synchronize()

    ref, mine = best_pair(repeat(torch.add, a, b, n), ours, n)
    rows = [Row("launch of a 1-element op, async, no grad", "us", ref * 1e6, mine * 1e6, "ratio <= 1.0")]

    ga, gb = a.clone().requires_grad_(), b.clone().requires_grad_()
    gda, gdb = da.clone().requires_grad_(), db.clone().requires_grad_()

    def ours_grad():
        repeat(add, gda, gdb, n)()
        torch.simhpu.synchronize()

    ref, mine = best_pair(repeat(torch.add, ga, gb, n), ours_grad, n)
    rows.append(Row("launch of a 1-element op, requires_grad", "us", ref * 1e6, mine * 1e6, "ratio <= 1.0"))

    chain = 10_000

    def reference_chain():
        x = a
        for _ in range(chain):
            x = torch.add(x, b)

    def ours_chain():
        x = da
        for _ in range(chain):
            x = add(x, db)
        torch.simhpu.synchronize()

    ref, mine = best_pair(reference_chain, ours_chain, 1)
    rows.append(Row("10,000 dependent tiny ops, then synchronize", "ms", ref * 1e3, mine * 1e3, "ratio <= 1.0"))

    trips = 20_000

    def round_trips():
        for _ in range(trips):
            add(da, db)
            torch.simhpu.synchronize()

    ref = best_seconds(repeat(torch.add, a, b, trips), trips)
    rows.append(Row("launch + synchronize round trip, tiny op", "us", ref * 1e6,
                    best_seconds(round_trips, trips) * 1e6, "value <= 5"))

    tasks = 2_000_000
    best = min(torch_simhpu._C._time_empty_launches(tasks) for _ in range(3))
    rows.append(Row("queue throughput, empty kernel, no arguments", "Mtasks/s", math.nan, tasks / best / 1e6,
                    "value >= 20"))
    return rows


def package_launch_row() -> list[Row]:
    """An operator package's op (examples/custom_ops, built against the installed
    SDK) against the in-tree npu_add_custom, both called through torch.ops: the
    reference column is the in-tree op here, not PyTorch CPU."""
    try:
        import custom_ops  # noqa: F401  (scripts/setup_env.sh test builds and installs it)
    except ImportError:
        print("skipped the operator-package row: examples/custom_ops is not installed (scripts/setup_env.sh test)")
        return []
    n = 200_000
    da, db = torch.ones(1).simhpu(), torch.ones(1).simhpu()

    def timed(op):
        def run():
            repeat(op, da, db, n)()
            torch.simhpu.synchronize()
        return run

    in_tree, package = best_pair(timed(torch.ops.npu.npu_add_custom), timed(torch.ops.custom_ops.add_custom), n)
    return [Row("launch of an operator package's op vs the in-tree op (torch.ops)", "us", in_tree * 1e6,
                package * 1e6, "ratio <= 1.1")]


def launch_blocking_row() -> Row:
    """The launch row in SIMHPU_LAUNCH_BLOCKING=1 mode, in a child (the mode is read at start)."""
    code = (
        "import tables, torch, torch_simhpu\n"
        "a, b = torch.ones(1), torch.ones(1)\n"
        "da, db = a.simhpu(), b.simhpu()\n"
        "n = 100000\n"
        "ref, ours = tables.best_pair(tables.repeat(torch.add, a, b, n), tables.repeat(torch_simhpu.npu_add_custom, da, db, n), n)\n"
        "print(ref * 1e6, ours * 1e6)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=HERE,
                         env=dict(os.environ, SIMHPU_LAUNCH_BLOCKING="1"))
    ref, ours = map(float, out.stdout.split())
    return Row("launch + run of a 1-element op, blocking mode", "us", ref, ours)


# ---------------------------------------------------------------- kernels

def gigabytes_per_second(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9


def synced(fn):
    def call():
        fn()
        torch.simhpu.synchronize()
    return call


def add_rows() -> list[Row]:
    n = 64 * 1024 * 1024
    a, b = torch.randn(n), torch.randn(n)
    da, db = a.simhpu(), b.simhpu()
    out = torch.empty(n)
    nbytes = 3 * n * 4
    new_output = best_seconds(lambda: torch.add(a, b), 1)
    into_out = best_seconds(lambda: torch.add(a, b, out=out), 1)
    ours = best_seconds(synced(lambda: torch_simhpu.npu_add_custom(da, db)), 1)
    ours_gb = gigabytes_per_second(nbytes, ours)
    return [
        Row("add, 64M float32, new output vs torch.add", "GB/s", gigabytes_per_second(nbytes, new_output), ours_gb,
            "ratio >= 2.0"),
        Row("add, 64M float32, new output vs torch.add(out=)", "GB/s", gigabytes_per_second(nbytes, into_out), ours_gb,
            "ratio >= 0.9"),
    ]


def elementwise_rows() -> list[Row]:
    """Kernels codegen wrote from `elementwise:` expressions, against ATen's own kernels."""
    n = 16 * 1024 * 1024
    rows = []
    for dtype, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        x, y = torch.randn(n, dtype=dtype), torch.randn(n, dtype=dtype)
        dx, dy = x.simhpu(), y.simhpu()
        size = x.element_size()
        ref, ours = best_pair(lambda: F.softplus(x, beta=2.0, threshold=20.0),
                              synced(lambda: torch_simhpu.npu_softplus_beta(dx, 2.0, 20.0)), 1)
        rows.append(Row(f"npu_softplus_beta vs F.softplus, 16M {name}", "GB/s",
                        gigabytes_per_second(2 * n * size, ref), gigabytes_per_second(2 * n * size, ours),
                        "ratio >= 1.0"))
        ref, ours = best_pair(lambda: torch.lerp(x, y, 0.3),
                              synced(lambda: torch_simhpu.npu_lerp_scalar(dx, dy, 0.3)), 1)
        rows.append(Row(f"npu_lerp_scalar vs torch.lerp, 16M {name}", "GB/s",
                        gigabytes_per_second(3 * n * size, ref), gigabytes_per_second(3 * n * size, ours),
                        "ratio >= 1.0"))
    return rows


def reduction_rows() -> list[Row]:
    rows_, cols = 4096, 4096  # 16M elements
    x, gamma = torch.randn(rows_, cols), torch.randn(cols)
    dx, dgamma = x.simhpu(), gamma.simhpu()
    nbytes = rows_ * cols * 4
    ref, ours = best_pair(lambda: torch.sum(x, [1]), synced(lambda: torch_simhpu.npu_sum_dims(dx, [1])), 1)
    result = [Row("npu_sum_dims vs torch.sum, 16M f32, last dim", "GB/s", gigabytes_per_second(nbytes, ref),
                  gigabytes_per_second(nbytes, ours), "ratio >= 0.9")]
    ref, ours = best_pair(lambda: torch.sum(x, [0]), synced(lambda: torch_simhpu.npu_sum_dims(dx, [0])), 1)
    result.append(Row("npu_sum_dims vs torch.sum, 16M f32, first dim", "GB/s", gigabytes_per_second(nbytes, ref),
                      gigabytes_per_second(nbytes, ours), "ratio >= 0.9"))
    # The stub route's sum (sum_stub): ATen's CPU sum run as the device's kernel, so the same
    # bits as the CPU; what it costs over the CPU is the launch.
    for dim, where in ((1, "last dim"), (0, "first dim")):
        ref, ours = best_pair(lambda: torch.sum(x, [dim]), synced(lambda: torch.sum(dx, [dim])), 1)
        result.append(Row(f"torch.sum on simhpu (sum_stub) vs CPU, 16M f32, {where}", "GB/s",
                          gigabytes_per_second(nbytes, ref), gigabytes_per_second(nbytes, ours), "ratio >= 0.9"))
    ref, ours = best_pair(lambda: F.rms_norm(x, (cols,), gamma, 1e-6),
                          synced(lambda: torch_simhpu.npu_rms_norm(dx, dgamma, 1e-6)), 1)
    result.append(Row("npu_rms_norm vs F.rms_norm, 16M f32", "GB/s", gigabytes_per_second(2 * nbytes, ref),
                      gigabytes_per_second(2 * nbytes, ours), "ratio >= 0.9"))
    return result


# ---------------------------------------------------------------- build and codegen

def build_rows() -> list[Row]:
    import build_times

    tree = build_times.copy_tracked_files()
    try:
        clean, _ = build_times.build(tree)
        build_times.edit_one_entry(tree)
        rebuild, units = build_times.build(tree)
        build_times.add_an_op(tree)
        added, added_units = build_times.build(tree)
    finally:
        build_times.remove(tree)
    return [
        Row("clean python setup.py bdist_wheel", "s", math.nan, clean, "value <= 120"),
        Row(f"rebuild after editing one YAML entry ({len(units)} TU)", "s", math.nan,
            rebuild if len(units) == 1 else math.inf, "value <= 15"),
        Row(f"rebuild after adding an op (`codegen new-op`, {len(added_units)} TUs)", "s", math.nan,
            added, "value <= 20"),
    ]


def codegen_row() -> Row:
    import codegen_scale
    return Row(f"codegen of a synthetic {codegen_scale.N_OPS}-operator YAML", "s", math.nan,
               codegen_scale.measure(), "value <= 2")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-build", action="store_true", help="skip the two build rows")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"CPU capability {torch.backends.cpu.get_cpu_capability()}", flush=True)
    print(launch_conditions.machine_description(), flush=True)
    rows = launch_rows() + launch_conditions.rows(Row, best_pair, best_seconds, torch)
    rows += package_launch_row() + [launch_blocking_row()] + add_rows() + elementwise_rows() + reduction_rows()
    rows += reference_path.rows(Row, best_pair, torch)
    rows += graph_mode.rows(Row, torch)
    rows += collectives.rows(Row, torch)
    rows += sanitizer.rows(Row, best_pair, torch)
    rows += copies_and_frees.rows(Row, best_pair, torch)
    rows += simulated_time.cost_rows(Row, best_pair)
    rows.append(codegen_row())
    if not args.no_build:
        rows += build_rows()
    print_table(rows)


if __name__ == "__main__":
    main()
