"""The host CPU as a part: profile it, then price the model zoo's eager training steps on that
profile and hold the prices to the steps' real CPU time.

    python benchmarks/cpu_as_a_part.py                 # 3 passes, 1 thread, every zoo model
    python benchmarks/cpu_as_a_part.py --markdown      # the table docs/figures.md quotes
    python benchmarks/cpu_as_a_part.py --quick         # a few calls, one model, one pass (the suite's check)

What it does, all in this process:
1. times the calls `python -m torch_simhpu.profile_part --device cpu` times (GEMMs, attention,
   memory-bound classes, launches, optimizer steps: torch_simhpu/simulation/part_measure.py) and the zoo's
   training steps at "cpu" scale, in --passes passes one after another, each call and step keeping
   its fastest pass: this machine's speed drifts by a third over tens of seconds (another tenant,
   its clock), and the fastest pass is the one state all rows share;
2. fits the cpu-host profile on half of the calls (torch_simhpu/simulation/part_fit.py; the CPU is its own
   host, so a launch returns when its kernel ends: the profile's synchronous_launches) and reports
   the errors on the other half;
3. prices each step end to end under phantom execution on the fitted profile (float32, as the CPU
   ran it) and prints priced / measured. No constant is fitted on a step: every step is held out.

The part is this CPU at --threads intra-op threads (default 1: on a small virtual machine two
threads wait on each other at every parallel region, and a step's time doubles at random).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch

MODELS = ("gpt", "llama", "bert", "vit", "resnet")
TARGET = 0.20  # the issue's: each step's price within 20 % of its real time


def _quick_cases() -> list[dict]:
    from torch_simhpu.simulation import part_measure
    keep = {part_measure.GEMM, "x + y", "torch.softmax(x, -1)", *part_measure.HOST_CALLS}
    return [c for c in part_measure.cpu_cases() if c["call"] in keep]


class SpeedProbe:
    """This machine's speed now, against the fastest it was seen at: a fixed mix of a GEMM, an
    elementwise add and a softmax, timed beside every call and step. A measurement taken while the
    machine ran at 70 % of its best is scaled by 0.7, so every row is of the same machine."""

    def __init__(self):
        self.a, self.x = torch.randn(192, 192), torch.randn(1 << 18)
        self.best = float("inf")

    def seconds(self) -> float:
        import time
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            self.a @ self.a
            self.x + self.x
            torch.softmax(self.a, -1)
            times.append(time.perf_counter() - t0)
        now = statistics.median(times)
        self.best = min(self.best, now)
        return now


def measure(passes: int, models: list[str], cases: list[dict], time_limit: float, log) -> dict:
    """Every call, then every step (all built first), in each pass, each beside the speed probe;
    each keeps its fastest pass after scaling to the machine's best speed."""
    from torch_simhpu import model_zoo
    from torch_simhpu.simulation import part_measure
    probe = SpeedProbe()
    taken: dict[str, list[tuple[dict, float]]] = {}  # (row, the probe's seconds around it)
    result = None
    steps = {name: model_zoo.training_step(name, "cpu", scale="cpu") for name in models}
    for number in range(passes):
        log(f"pass {number + 1} of {passes}")
        for case in cases:
            before = probe.seconds()
            result = part_measure.measure("cpu", [case], time_limit=time_limit, log=lambda *_: None)
            if result["failures"]:
                raise SystemExit(f"cpu_as_a_part: a measurement failed: {result['failures'][0]}")
            around = (before + probe.seconds()) / 2
            for row in result["rows"]:
                key = part_measure.describe({k: v for k, v in row.items() if k not in ("seconds", "timing", "kernels")})
                taken.setdefault(key, []).append((row, around))
        for name, step in steps.items():
            before = probe.seconds()
            seconds, how = part_measure.time_step(step, "cpu", repeats=5)
            row = dict(kind="step", call=f"eager training step of {name}", model=name, scale="cpu", autocast=False,
                       seconds=seconds, timing=how)
            taken.setdefault(name, []).append((row, (before + probe.seconds()) / 2))
    rows = []
    for measured in taken.values():
        scaled = [dict(row, seconds=row["seconds"] * probe.best / around) for row, around in measured]
        rows.append(min(scaled, key=lambda r: r["seconds"]))
    result["rows"] = rows
    result["method"] += (f" Each call and step: the fastest of {passes} passes, each scaled by this machine's "
                         "speed beside it (a fixed GEMM, add and softmax, against the fastest it ran).")
    return result


def price_steps(rows: list[dict], profile: dict) -> list[dict]:
    from torch_simhpu.simulation import part_fit
    return part_fit.evaluate([r for r in rows if r["kind"] == "step"], profile)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="the CPU's intra-op threads (the part)")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--time-limit", type=float, default=300.0, help="seconds one pass's calls may take")
    parser.add_argument("--keep", help="a folder to keep the measured rows and the fitted profile in")
    parser.add_argument("--quick", action="store_true", help="a few calls, one model, one pass")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)

    from torch_simhpu.simulation import part_measure, profile_part
    from torch_simhpu.simulation import load_profile

    torch.set_num_threads(args.threads)
    part_measure.keep_the_heap()  # (the part keeps the memory it freed, as a device's caching allocator does)
    models = [m for m in args.models.split(",") if m]
    cases = part_measure.cpu_cases()
    if args.quick:
        models, cases, args.passes = models[:1], _quick_cases(), 1
    log = (lambda *a: print(*a, file=sys.stderr)) if args.markdown else print
    measured = measure(args.passes, models, cases, args.time_limit, log)
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="cpu_as_a_part-"))
    folder.mkdir(parents=True, exist_ok=True)
    rows_file, profile_file = folder / "cpu-rows.json", folder / "cpu-part.json"
    rows_file.write_text(json.dumps(measured, indent=1))
    report = profile_part.profile_part(None, str(profile_file), rows_file=str(rows_file), name="cpu-part",
                                       log=log if not args.markdown else (lambda *_: None))
    profile = load_profile(str(profile_file))
    results = price_steps(measured["rows"], profile)

    errors = [abs(r["error"]) for r in results if r["error"] is not None]
    part = (f"{measured.get('part', 'cpu')}, {args.threads} thread(s), heap {measured.get('heap', 'not said')}, "
            f"torch {torch.__version__}")
    lines = []
    if args.markdown:
        lines += [f"CPU as a part ({part}; {args.passes} passes, the fastest of each):", "",
                  "| calls | class | rows | median \\|error\\| | within 15 % |", "|---|---|---:|---:|---:|"]
        for label, table in (("fitted on", report["held_in"]), ("held out", report["held_out"])):
            for kind, s in table.items():
                if kind == "step" or s["median"] is None:
                    continue
                lines.append(f"| {label} | {kind} | {s['rows']} | {s['median'] * 100:.1f} % | {s['within_15']} |")
        lines += ["", "| eager training step (cpu scale, float32) | measured | priced | error |", "|---|---:|---:|---:|"]
        for r in results:
            priced = "unpriceable" if r["priced"] is None else f"{r['priced'] * 1e3:.2f} ms"
            error = "-" if r["error"] is None else f"{r['error'] * 100:+.1f} %"
            lines.append(f"| {r['case']['model']} | {r['row']['seconds'] * 1e3:.2f} ms | {priced} | {error} |")
    else:
        lines.append(f"\nsteps priced on the fitted profile ({part}):")
        for r in results:
            priced = "unpriceable" if r["priced"] is None else f"{r['priced'] * 1e3:9.2f} ms"
            error = "" if r["error"] is None else f"{r['error'] * 100:+7.1f} %"
            lines.append(f"  {r['case']['model']:<8} measured {r['row']['seconds'] * 1e3:9.2f} ms   priced {priced}  {error}")
    if errors:
        lines.append(f"\nsteps: median |error| {statistics.median(errors) * 100:.1f} %, largest "
                     f"{max(errors) * 100:.1f} % (target {TARGET * 100:.0f} %); rows and profile in {folder}")
    print("\n".join(lines))
    return 0 if len(errors) == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
