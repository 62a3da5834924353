"""Simulated time held to real parts: the H100 profiles fitted on measured calls, judged on others.

    python benchmarks/part_calibration.py            # fit, print the errors (nothing written)
    python benchmarks/part_calibration.py --write    # and put the fitted constants into h100-sxm.json
    python benchmarks/part_calibration.py --markdown # the tables docs/figures.md quotes

The calibration set is ../shared/measurements/h100-sxm-2026-11-27.json (186 calls timed on a
real H100 SXM, torch 2.11 + CUDA 13) with benchmarks/measurements/h100-sxm-2026-11-28-vision.json
(39 calls on another H100: batch norm, pooling, column sums, float32 layer norms, convolutions
with three input channels or channels_last, attention at 128-256 keys; none at a training
step's shapes) and, from the third H100's steps (their kernels' own times in
step-kernels-h100-sxm-2026-11-28.json; the second H200's are held out): the four calls of
PyTorch's generic elementwise kernel (a broadcast operand, strided_rows), the float32 layer
norms of the GPT, BERT and ViT steps, forward and forward + backward (norm_rows: rows of 384 and
768 columns, where a block's time a row shows beside the bytes'), the ResNet step's channels-first
batch norms, forward and forward + backward (batch_norm_rows: 7x7 to 112x112 planes of 64 to 512
channels, where a channel's block walks its elements in a chain), and the four steps' cuDNN
attention (attention_rows: 196 to 2048 keys at a step's batch, where a wave of blocks' fixed time
shows beside the FLOPs'). A step's kernels are all fitted on, not split.
torch_simhpu.simulation.part_fit splits it: within each group of alike rows, every other
size is held out. The constants of h100-sxm (memory and matrix
efficiencies, the memory classes' traffic and floors, each attention backend's curves, TF32,
convolutions, the host link, launch costs, multi-tensor apply's kernels) are fitted on the rest
(held in), starting from the shipped profile's published-figure values.

Then the fitted profile is judged, never fitted, on:
- the held-out half of the calibration set;
- benchmarks/measurements/h100-sxm-2026-11-27-b.json: another H100 SXM, other shapes (GEMMs at
  LLM-layer and skinny shapes, SDPA at 2k-16k keys with head dim 64 and GQA, memory classes at
  four sizes, AdamW on other parameter sets) and five eager training steps of the model zoo;
- benchmarks/measurements/h200-2026-11-27.json: another part, an H200, priced by the h200
  profile, which inherits h100-sxm's compute and states its own bandwidth and capacity. Its
  memory-bound rows are fitted on with the H100's (part_fit.fit_family: a class whose kernels take
  as long on the H200's faster memory is bound by the die's units, which the two parts share);
  its GEMM, attention, optimizer and step rows are not;
- the 2026-11-28 pair (h100-sxm-2026-11-28.json, h200-2026-11-28.json): both parts again, on
  other machines, with the host rows (part_measure.HOST_CALLS).

The host's constants (per eager launch, per autograd node, per optimizer tensor) are the
machine's, not the part's: the same H200 step took 27.5 ms on one machine and 45.3 ms on
another whose host launched an eager kernel in 16.1 us instead of 8.0. The shipped profile takes
them from HOST_MACHINE's three host rows (the calibration set has only the launch row); a step is
then judged twice: on the profile as shipped, and on "its own host": the profile with the host
constants of the three host rows in the step's own file (the steps themselves never fitted on).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CALIBRATION = ROOT.parent / "shared" / "measurements" / "h100-sxm-2026-11-27.json"
CALIBRATION_EXTRA = HERE / "measurements" / "h100-sxm-2026-11-28-vision.json"
HOST_MACHINE = HERE / "measurements" / "h100-sxm-2026-11-28.json"
# The family's other member, fitted on with the calibration set: its memory-bound rows tell each
# memory class's traffic from its units' rate (part_fit.fit_family); its other rows are judged.
FAMILY = (HERE / "measurements" / "h200-2026-11-27.json", "h200")
HELD_OUT = {"another H100 SXM (other shapes, steps)": (HERE / "measurements" / "h100-sxm-2026-11-27-b.json", "h100-sxm"),
            "an H200 (its memory-bound rows in the family fit, the rest not)": FAMILY,
            "a third H100 SXM (2026-11-28)": (HOST_MACHINE, "h100-sxm"),
            "a second H200 (2026-11-28)": (HERE / "measurements" / "h200-2026-11-28.json", "h200")}
PROFILE = ROOT / "torch_simhpu" / "simulation" / "profiles" / "h100-sxm.json"
# The same machines' steps timed again, by benchmarks/step_kernels.py (its wall clock: a second
# measurement of each step on its machine, minutes after the first)
STEP_KERNELS_H100 = HERE / "measurements" / "step-kernels-h100-sxm-2026-11-28.json"
STEP_KERNELS_H200 = HERE / "measurements" / "step-kernels-h200-2026-11-28.json"
STEPS_AGAIN = {HOST_MACHINE: STEP_KERNELS_H100, HERE / "measurements" / "h200-2026-11-28.json": STEP_KERNELS_H200}


def calibration_rows(path: Path = CALIBRATION) -> list[dict]:
    if not path.exists():
        raise SystemExit(f"part_calibration: the calibration set is not at {path} (../shared/measurements "
                         "beside the checkout)")
    rows = json.loads(path.read_text())["rows"]
    if path == CALIBRATION:
        rows += json.loads(CALIBRATION_EXTRA.read_text())["rows"] + step_kernel_rows(STEP_KERNELS_H100)
    return rows


_GENERIC_KERNEL = "void at::native::elementwise_kernel<128, "


def strided_rows(path: Path) -> list[dict]:
    """The calls of a step-kernels file (benchmarks/step_kernels.py) that are part_measure's strided
    elementwise calls, as rows: an add or a multiply whose second operand's shape broadcasts to the
    first's, every kernel of which was PyTorch's generic elementwise kernel without casts. Its
    template's unroll says its elements' width (2 for four-byte elements, 4 for two-byte ones: the
    steps' autocast runs bfloat16); the time is the kernels' own, a call."""
    from torch_simhpu.simulation import part_measure
    calls = {"aten::add": part_measure.STRIDED_ELEMENTWISE[0], "aten::mul": part_measure.STRIDED_ELEMENTWISE[1]}
    rows = []
    for step in json.loads(path.read_text())["steps"]:
        for op in step["operators"]:
            kernels = list(op["kernels"])
            if op["op"] not in calls or len(op["shapes"]) < 2 or not kernels:
                continue
            if not all(k.startswith(_GENERIC_KERNEL) and "gpu_kernel_impl_nocast" in k for k in kernels):
                continue
            x, y = op["shapes"][:2]
            broadcast = 0 < len(y) <= len(x) and y != x and all(b in (1, a) for a, b in zip(x[::-1], y[::-1]))
            unroll = {kernel[len(_GENERIC_KERNEL):].split(",")[0] for kernel in kernels}
            if not broadcast or unroll - {"2", "4"} or len(unroll) != 1:
                continue
            dtype = "float32" if unroll == {"2"} else "bfloat16"
            rows.append(dict(kind="memory-bound", call=calls[op["op"]], dtype=dtype, shape=x, other=y,
                             seconds=op["device_us"] * 1e-6 / op["calls"],
                             timing=f"kernels: the part's own time for them in the {step['model']} step ({path.name})"))
    return rows


_LAYER_NORM_KERNELS = {"forward": ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<",),
                       "backward": ("void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<",
                                    "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<")}
_BATCH_NORM_KERNELS = {
    "forward": ("void at::native::batch_norm_transform_input_kernel<",
                "void at::native::batch_norm_collect_statistics_kernel<",
                "void at::native::(anonymous namespace)::unrolled_elementwise_kernel_for_multi_outputs<"),
    "backward": ("void at::native::batch_norm_backward_kernel<",)}
_ELEMENT_TYPES = {"float": "float32", "c10::BFloat16": "bfloat16", "c10::Half": "float16"}


def _kernel_timed_rows(path: Path, op: str, kernels: dict, calls: tuple[str, str]) -> list[dict]:
    """A step-kernels file's `aten::native_{op}` calls as part_measure's rows `calls` (forward, and
    forward + backward): the forward's kernels' time a call, and the forward's with the backward's at
    the same shape, where every kernel of each is one of `kernels`. The first forward kernel's first
    template argument says the elements' type."""
    rows = []
    for step in json.loads(path.read_text())["steps"]:
        forward, backward = {}, {}
        for entry in step["operators"]:
            names = list(entry["kernels"])
            if not entry["shapes"] or not names:
                continue
            shape, seconds = tuple(entry["shapes"][0]), entry["device_us"] * 1e-6 / entry["calls"]
            if entry["op"] == f"aten::native_{op}" and all(k.startswith(kernels["forward"]) for k in names):
                element = next((k[len(kernels["forward"][0]):].split(",")[0] for k in names
                                if k.startswith(kernels["forward"][0])), None)
                forward[shape] = (seconds, _ELEMENT_TYPES.get(element))
            elif entry["op"] == f"aten::native_{op}_backward" and all(k.startswith(kernels["backward"]) for k in names):
                backward[shape] = seconds
        timing = f"kernels: the part's own time for them in the {step['model']} step ({path.name})"
        for shape, (seconds, dtype) in forward.items():
            if dtype is None:
                continue
            rows.append(dict(kind="memory-bound", call=calls[0], dtype=dtype, shape=list(shape), seconds=seconds,
                             timing=timing))
            if shape in backward:
                rows.append(dict(kind="memory-bound", call=calls[1], dtype=dtype, shape=list(shape),
                                 seconds=seconds + backward[shape], timing=timing))
    return rows


def norm_rows(path: Path) -> list[dict]:
    """The layer norms of a step-kernels file as part_measure's layer norm rows (a backward whose only
    kernels are its input's gradient and the gamma/beta one: no partial sums; the steps' norms run
    float32 under autocast)."""
    from torch_simhpu.simulation import part_measure
    calls = tuple(c for c in part_measure.ROWWISE if c.startswith("F.layer_norm"))
    return _kernel_timed_rows(path, "layer_norm", _LAYER_NORM_KERNELS, calls)


def batch_norm_rows(path: Path) -> list[dict]:
    """The channels-first batch norms of a step-kernels file as part_measure's batch norm rows: the
    forward's kernels (statistics, running averages, the normalised output), and with the backward's
    (a channels-last norm runs other kernels, and other rows time it). The weights are float32, as
    BatchNorm2d's under autocast and as part_measure's rows."""
    from torch_simhpu.simulation import part_measure
    return _kernel_timed_rows(path, "batch_norm", _BATCH_NORM_KERNELS, part_measure.BATCH_NORM)


_ATTENTION_KERNELS = ("cudnn_generated_fort_native_sdpa_", "void cudnn::fusion::", "Memset (Device)")


def attention_rows(path: Path) -> list[dict]:
    """The default SDPA calls of a step-kernels file (cuDNN's, as PyTorch took it there) as
    part_measure's attention rows: the forward's kernels' time a call, and the forward's with the
    backward's (its dot(dO, O) and dQ conversion kernels included). Whether the mask was causal is
    the model's (model_zoo.CAUSAL); the shapes are the queries' and the keys'."""
    from torch_simhpu import model_zoo
    from torch_simhpu.simulation import part_measure
    rows = []
    for step in json.loads(path.read_text())["steps"]:
        if step["model"] not in model_zoo.CAUSAL:
            continue
        forward, backward = {}, {}
        for op in step["operators"]:
            if len(op["shapes"]) < 2 or not all(k.startswith(_ATTENTION_KERNELS) for k in op["kernels"]):
                continue
            shapes = (tuple(op["shapes"][0]), tuple(op["shapes"][1]))
            if op["op"] == "aten::_cudnn_attention_forward":
                forward[shapes] = op["device_us"] * 1e-6 / op["calls"]
            elif op["op"] == "aten::_cudnn_attention_backward":  # (its gradient first: the queries after)
                backward[(tuple(op["shapes"][1]), tuple(op["shapes"][2]))] = op["device_us"] * 1e-6 / op["calls"]
        for (q, k), seconds in forward.items():
            if len(q) != 4 or len(k) != 4:
                continue
            case = dict(kind="attention", backend="default", dtype="bfloat16", batch=q[0], heads=q[1], kv_heads=k[1],
                        seq=q[2], head_dim=q[3], causal=model_zoo.CAUSAL[step["model"]],
                        timing=f"kernels: the part's own time for them in the {step['model']} step ({path.name})")
            rows.append(dict(case, call=part_measure.SDPA_F, seconds=seconds))
            if (q, k) in backward:
                rows.append(dict(case, call=part_measure.SDPA_FB, seconds=seconds + backward[(q, k)]))
    return rows


def step_kernel_rows(path: Path) -> list[dict]:
    """The calls of a step-kernels file the fit takes as rows (strided elementwise calls, layer norms,
    attention)."""
    return strided_rows(path) + norm_rows(path) + batch_norm_rows(path) + attention_rows(path)


def host_rows(rows: list[dict]) -> list[dict]:
    """A file's host rows: the host's time per eager launch, per optimizer step's tensor, per autograd node."""
    from torch_simhpu.simulation import part_measure
    return [r for r in rows if r["kind"] == "launch" and r["call"] in part_measure.HOST_CALLS]


def with_host_of(profile: dict, rows: list[dict]) -> dict:
    """`profile` with the host of the machine whose rows these are (part_fit.with_host_of)."""
    from torch_simhpu.simulation import part_fit
    return part_fit.with_host_of(profile, host_rows(rows))


def fitted_profile(rows: list[dict], log=print) -> tuple[dict, list[str], list[dict], list[dict]]:
    from torch_simhpu.simulation import part_fit
    fit_rows, held = part_fit.split(rows)
    # (the memory classes' units' rates are the family fit's, below, from this run's rows: a rate
    # the shipped profile carries would bound the held-in fit's traffic before it is refitted)
    base = part_fit._raw("h100-sxm")
    for entry in base.get("memory_classes", {}).values():
        entry.pop("rate", None)
    profile, notes = part_fit.fit(fit_rows, base, log=log)
    # (the host: the launch row's machine lacks the other two host rows; HOST_MACHINE has all three)
    machine = json.loads(HOST_MACHINE.read_text())["rows"]
    _, host_notes = part_fit.fit(host_rows(machine), json.loads(json.dumps(profile)), log=lambda *_: None)
    profile = with_host_of(profile, machine)
    notes += [f"{n} (host rows of {HOST_MACHINE.name})" for n in host_notes if n.startswith("host time")]
    path, member = FAMILY
    notes += [f"{n} (with {path.name})" for n in part_fit.fit_family(
        profile, fit_rows, json.loads(path.read_text())["rows"], lambda p: _raw_member(p, member))]
    return profile, notes, fit_rows, held


def table(results: list[dict]) -> dict:
    from torch_simhpu.simulation import part_fit
    return part_fit.summary(results)


def print_table(title: str, summary: dict, markdown: bool) -> None:
    if markdown:
        print(f"\n**{title}**\n\n| class | rows | median error | within 15 % | largest | unpriceable |\n|---|---:|---:|---:|---:|---:|")
    else:
        print(f"\n{title}")
    for kind, s in summary.items():
        median = "-" if s["median"] is None else f"{s['median'] * 100:.1f} %"
        largest = "-" if s["largest"] is None else f"{s['largest'] * 100:.1f} %"
        if markdown:
            print(f"| {kind} | {s['rows']} | {median} | {s['within_15']} | {largest} | {s['unpriceable']} |")
        else:
            print(f"  {kind:<13} {s['rows']:>4} rows  median |error| {median:>8}  within 15% {s['within_15']:>3}  "
                  f"largest {largest:>8}  unpriceable {s['unpriceable']}")


def print_rows(results: list[dict], kinds=("step",)) -> None:
    from torch_simhpu.simulation import part_measure
    for r in results:
        if r["row"]["kind"] in kinds:
            err = "unpriceable: " + r.get("failure", "") if r["error"] is None else f"{r['error'] * 100:+6.1f} %"
            row = r["row"]
            spread = (f"  (its ten steps {row['seconds_least'] * 1e3:.1f}-{row['seconds_most'] * 1e3:.1f} ms)"
                      if "seconds_least" in row else "")
            print(f"    {part_measure.describe(r['case'])[:70]:<70} measured {row['seconds'] * 1e3:8.3f} ms  "
                  f"priced {(r['priced'] or 0) * 1e3:8.3f} ms  {err}{spread}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write the fitted constants into h100-sxm.json")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--rows", action="store_true", help="print every held-out row's error")
    args = parser.parse_args(argv)
    import torch_simhpu  # noqa: F401 - the device
    from torch_simhpu.simulation import part_fit

    rows = calibration_rows()
    profile, notes, fit_rows, held = fitted_profile(rows, log=lambda *_: None)
    print("fitted on", len(fit_rows), "calls of", CALIBRATION.name, "(", len(held), "held out ):")
    for note in notes:
        print("  " + note)
    checked = part_fit.check(profile)
    held_in = part_fit.evaluate(fit_rows, checked)
    held_out = part_fit.evaluate(held, checked)
    print_table("held in (the calls fitted on)", table(held_in), args.markdown)
    print_table("held out (the calibration set's other half)", table(held_out), args.markdown)
    if args.rows:
        print_rows(held_out, kinds=("gemm", "attention", "memory-bound", "optimizer", "host link", "launch"))
    if args.write:
        source = (f"Fitted by benchmarks/part_calibration.py on {len(fit_rows)} of the {len(rows)} calls timed on a real "
                  f"H100 SXM in ../shared/measurements/{CALIBRATION.name} (torch 2.11, CUDA 13; the rest held out): "
                  + "; ".join(notes))
        profile["sources"] = [source, *(s for s in profile["sources"] if not s.startswith("Fitted by benchmarks/part_"))]
        PROFILE.write_text(profile_text(profile))
        print(f"wrote {PROFILE}")
    strided = part_fit.evaluate(step_kernel_rows(STEP_KERNELS_H200), _family_member(profile, "h200"))
    print_table("held out: the second H200's strided elementwise calls, layer and batch norms and attention in its steps "
                "(priced by h200)", table(strided), args.markdown)
    print_rows(strided, kinds=("memory-bound", "attention"))
    for title, (path, name) in HELD_OUT.items():
        measured = json.loads(path.read_text())
        # the fitted constants apply to the family: the H200 inherits them (from the fitted profile, not
        # the installed package's copy, which is the one before this fit)
        target = checked if name == "h100-sxm" else _family_member(profile, name)
        results = part_fit.evaluate(measured["rows"], target)
        print_table(f"held out: {title} ({path.name}, priced by {name})", table(results), args.markdown)
        print_rows(results, kinds=("step",) if not args.rows else ("step", "gemm", "attention", "memory-bound",
                                                                   "optimizer", "host link", "launch"))
        if host_rows(measured["rows"]):
            own_host = part_fit.check(with_host_of(profile if name == "h100-sxm" else _raw_member(profile, name),
                                                   measured["rows"]))
            steps = [r for r in measured["rows"] if r["kind"] == "step"]
            results = part_fit.evaluate(steps, own_host)
            print_table(f"held out: {title}, steps on their own host's rows", table(results), args.markdown)
            print_rows(results)
            if path in STEPS_AGAIN:
                print_steps_again(results, json.loads(STEPS_AGAIN[path].read_text()), args.markdown)
    return 0


def print_steps_again(results: list[dict], again: dict, markdown: bool) -> None:
    """Each step's price on its own host's rows against both times its machine took for it: the
    spread between the two is the machine's, which no price can be closer than."""
    walls = {step["model"]: step["wall_seconds"] for step in again["steps"] if "wall_seconds" in step}
    print(("\n" if markdown else "") + "  the same steps timed again on that machine (benchmarks/step_kernels.py):")
    for r in results:
        model = r["case"].get("model")
        if model not in walls or r["priced"] is None:
            continue
        first, second = r["row"]["seconds"], walls[model]
        print(f"    {model:<7} timed {first * 1e3:7.3f} and {second * 1e3:7.3f} ms, priced {r['priced'] * 1e3:7.3f} ms: "
              f"{(r['priced'] / first - 1) * 100:+6.1f} % and {(r['priced'] / second - 1) * 100:+6.1f} %")


def profile_text(profile: dict) -> str:
    """A profile's JSON as the shipped files lay it out: a field a line (its sources one a line),
    which benchmarks/calibrate.py --write edits in place."""
    lines = []
    for key, value in profile.items():
        if key == "sources":
            inner = ",\n".join(f"    {json.dumps(s, ensure_ascii=False)}" for s in value)
            lines.append(f'  "sources": [\n{inner}\n  ]')
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def _raw_member(fitted_h100: dict, name: str) -> dict:
    """`name`'s profile as a raw dict (inheritance merged) with the fitted H100 constants."""
    from torch_simhpu.simulation import part_profiles
    own = json.loads((part_profiles.PROFILE_DIR / f"{name}.json").read_text())
    if own.get("inherits") != "h100-sxm":
        return own
    own.pop("inherits")
    return part_profiles.merged_with_base(fitted_h100, own, "h100-sxm", name)


def _family_member(fitted_h100: dict, name: str) -> dict:
    """`name`'s profile with the fitted H100 constants under its own fields (what --write would ship)."""
    from torch_simhpu.simulation import part_profiles
    return part_profiles.load_profile(_raw_member(fitted_h100, name))


if __name__ == "__main__":
    sys.exit(main())

