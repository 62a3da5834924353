"""Pricing measured calls on simhpu, and fitting a profile's constants to them.

A row of a measurement file (torch_simhpu/simulation/part_measure.py, ../shared/measurements) describes a
call; `price_row` makes the same call on simhpu under phantom execution with the profile and
modelled host time, and says how long the part would take, timed as the row was (a CUDA graph's
rows by the device's busy time, an event's by the span of the call's kernels, a host loop's by
the host's time per call, a training step end to end).

`fit` sets a profile's constants from rows, each constant from the rows of its class, repeated
until they settle:

- the memory bandwidth's efficiency from large elementwise rows, each memory class's traffic
  from its large rows and its floor from its smallest;
- the GEMMs' efficiency from large GEMMs, a tile's fixed time from small ones, TF32's rate
  from the TF32 row;
- each attention backend's forward and backward curves from its rows (the attained FLOP/s at
  each sequence length, causal apart);
- the host link from the copies, the host's time per launch and a kernel's least time from
  the launch rows; multi-tensor apply's per-kernel time from the optimizer rows.

`split` holds rows apart: the fit sees one part of each group of alike rows, the errors are
reported on the rest. A constant no row determines stays as the base profile has it.
"""
from __future__ import annotations

import copy
import math
import re
import statistics

import torch

from torch_simhpu import _C
from torch_simhpu._device_name import DEVICE_TYPE
from torch_simhpu.simulation import kernel_choice, part_measure
from torch_simhpu.simulation.clocks import simulate
from torch_simhpu.simulation.part_profiles import load_profile
from torch_simhpu.simulation.report import Launch

# Which memory class decides a memory-bound call's time (the class whose traffic the row fits).
CALL_CLASS = {
    "x + y": "elementwise", "x * y": "elementwise", "x.clone()": "copy", "F.silu(x)": "transcendental",
    "torch.exp(x)": "transcendental", "F.gelu(x, approximate='tanh')": "special", "F.gelu(x)": "special",
    "x.to(other dtype)": "copy", "F.dropout(x, 0.1)": "random", "x.sum()": "reduction", "x.sum(-1)": "reduction",
    "torch.softmax(x, -1)": "softmax", "torch.softmax(x, -1) forward + backward": "softmax_backward",
    "F.layer_norm(x, (cols,), w) forward": "norm", "F.layer_norm(x, (cols,), w) forward + backward": "norm_backward",
    "x.contiguous() of x.t()": "transpose", "torch.cat((x, x), -1)": "concatenation",
    "F.cross_entropy(logits, y) forward + backward": "softmax_backward", "F.embedding(idx, w) forward + backward": "index",
    part_measure.BATCH_NORM[0]: "batch_norm", part_measure.BATCH_NORM[1]: "batch_norm_backward",
    part_measure.MAX_POOL[0]: "pooling", part_measure.MAX_POOL[1]: "pooling_backward",
    part_measure.COLUMN_SUM: "column_reduction",
}


# Classes the pricing takes from a call's shapes and dtypes, not its name (call_class).
SHAPED_CLASSES = ("softmax_in_registers", "widening_copy", "batch_norm_channels_last", "batch_norm_channels_last_backward")


def call_class(case: dict | None, profile: dict) -> str | None:
    """The memory class that decides a memory-bound case's time on `profile`'s part (a checked
    profile): its call's, a conversion's to wider elements (part_measure converts a bfloat16 or
    float16 x to float32, a float32 one to bfloat16), or the kernel the part's softmax takes for the
    case's rows' length."""
    if case is None or case["kind"] != "memory-bound":
        return None
    cls = CALL_CLASS.get(case["call"])
    if case["call"] == "x.to(other dtype)" and case.get("dtype") in ("bfloat16", "float16"):
        return "widening_copy"
    if cls in ("batch_norm", "batch_norm_backward") and case.get("memory_format") == "channels_last":
        return cls.replace("batch_norm", "batch_norm_channels_last")
    if cls == "softmax" and case.get("shape"):
        size = getattr(torch, case.get("dtype", "float32")).itemsize
        if _C._simclock_softmax_rows_in_registers(case["shape"][-1], size, profile):
            return "softmax_in_registers"
    return cls


# Classes whose kernels walk rows in a chain: their traffic and their time a row fitted together
# (on one part: a chain's time is the die's, which a family member shares).
CHAINED_CLASSES = ("column_reduction", "batch_norm", "batch_norm_backward")
# Classes that pay a time a row besides their bytes': the chained ones, and the row-wise norms
# (PyTorch's CUDA layer norm runs a block a row; its backward's gamma/beta kernel walks the rows
# in a chain), whose traffic and rate the family's two parts then fit as other classes'.
ROW_STEP_CLASSES = CHAINED_CLASSES + ("norm", "norm_backward")
# A norm backward's chain (its gamma/beta kernel's rows) adds to its price only what that kernel's
# own reads do not cover, so its price is not linear in its traffic, as fit_family's split needs.
# Its traffic and chain are fitted on one part (_traffic_and_row_step, split about its estimate until
# that settles); its traffic is memory's: the calibration's bfloat16 norms ran 1.4x faster on an H200 than
# on an H100, their bandwidths' ratio, where the float32 steps' chains took the same time on both.
MEMORY_BOUND_CHAINS = ("norm_backward",)
CLASSES = ("gemm", "attention", "memory-bound", "recurrent", "host link", "launch", "optimizer", "step")


def normalised(row: dict) -> dict | None:
    """A row of any measurement file as part_measure's case it is, or None when simhpu has no way
    to make its call (the shared file's first sweep names some calls differently)."""
    case = dict(row)
    call = case["call"]
    if case["kind"] == "attention":
        # (part_measure's rows say their backend; the shared file's first sweep says it in the call)
        backend = case.get("backend") or ("flash" if "flash backend forced" in call else "default")
        backward = "backward" in call
        case.update(call=part_measure.SDPA_FB if backward else part_measure.SDPA_F, backend=backend,
                    kv_heads=case.get("kv_heads", case["heads"]))
        return case
    if case["kind"] == "gemm" and "dtype" in case and case["dtype"].startswith("float32 ("):
        case["tf32"] = "allow_tf32=True" in case["dtype"]
        case["dtype"] = "float32"
    if case["kind"] == "gemm" and "_scaled_mm" in call:
        return None  # (FP8: priced by the published rows of benchmarks/calibrate.py)
    if case["kind"] == "memory-bound":
        if ", x of 8192 rows" in call or "x of 8192 rows" in call:
            case["shape"] = [8192, case["numel"] // 8192]
            case["call"] = {"torch.softmax(x, -1), x of 8192 rows": "torch.softmax(x, -1)",
                            "F.layer_norm(x, (4096,)), x of 8192 rows, no weight": "F.layer_norm(x, (cols,), w) forward",
                            "F.cross_entropy(x, y), x of 8192 rows, y int64":
                                "F.cross_entropy(logits, y) forward + backward"}.get(call)
            if case["call"] is None or "cross_entropy" in case["call"]:
                return None  # (a forward alone: this sweep's cross-entropy is forward + backward)
        if case["call"] == "F.gelu(x)":
            case["call"] = "F.gelu(x, approximate='tanh')"
    if case["kind"] == "host link":
        case["call"] = call.replace(", non_blocking=True", "").replace("(host, )", "(host)")
        case["call"] = {"device.copy_(host), host pinned": part_measure.HOST_LINK[0],
                        "device.copy_(host), host pageable": part_measure.HOST_LINK[1],
                        "host.copy_(device), host pinned": part_measure.HOST_LINK[2],
                        "host.copy_(device), host pageable": part_measure.HOST_LINK[3]}.get(case["call"], case["call"])
    if case["kind"] == "launch":
        if "CUDA graph" in call or "graph" in case.get("timing", ""):
            case["call"] = "graph"
        elif call not in part_measure.HOST_CALLS:
            case["call"] = part_measure.LAUNCH_HOST
    if case["kind"] == "optimizer" and "width" not in case:
        # the shared file's parameter sets, as its rows name them: GPT-2 124M (148 tensors), Llama 3.2 1B (147)
        case["parameters"] = "gpt2-124m" if case["tensors"] == 148 else "llama-3.2-1b"
        shapes = part_measure.PARAMETER_SETS[case["parameters"]]()
        if "numel" in case and sum(math.prod(s) for s in shapes) != case["numel"]:
            return None  # (another parameter set than the two this file timed: not made up)
    return case


def priced_seconds(case: dict, profile) -> float:
    """What `case`'s call takes on `profile`'s part, timed as the row was."""
    if case["kind"] == "step":
        return _priced_step(case, profile)
    timing = case.get("timing", "")
    with _phantom(profile):
        if case["kind"] == "launch":
            x = torch.zeros(1, device=DEVICE_TYPE)
            call = (part_measure.build(case, DEVICE_TYPE) if case["call"] != part_measure.LAUNCH_HOST
                    else lambda: x.add_(1))
            call()  # (an optimizer's state made, as the part's loop had it)
            torch.simhpu.synchronize()
            calls = 100
            t0 = _C._simclock_host_now()
            mark = _C._simclock_start_log()
            for _ in range(calls):
                call()
            host = (_C._simclock_host_now() - t0) / calls
            torch.simhpu.synchronize()
            launches = _C._simclock_stop_log(mark, Launch)
            del x, call
            if case["call"] == "graph":  # kernels back to back: the device's time per kernel
                return sum(x.duration for x in launches if x.work != "marker") / calls
            return host
        with part_measure._settings(case):
            fn = part_measure.build(case, DEVICE_TYPE)
            fn()  # (warmed up, as the part was: an optimizer's state exists, caches are filled)
            torch.simhpu.synchronize()
            t0 = _C._simclock_host_now()
            mark = _C._simclock_start_log()
            fn()
            returned = _C._simclock_host_now()
            torch.simhpu.synchronize()
            launches = _C._simclock_stop_log(mark, Launch)
            fn = None  # (its tensors freed in the block: the device takes its capacity back after)
    kernels = [(x.start, x.end) for x in launches if x.work != "marker"]
    if not kernels and case["kind"] == "host link":
        # (a blocking copy out of the device is no kernel: the host drains the stream and then
        # waits for the transfer itself, all before copy_ returns)
        return returned - t0
    if not kernels:
        return 0.0
    if "graph" in timing or timing.startswith("kernels"):  # (the device's time alone)
        return _busy(kernels)
    if case["kind"] == "host link":
        return max(e for _, e in kernels) - min(s for s, _ in kernels)
    if timing.startswith("wall clock"):  # (the clock stopped once the call returned, its host's Python after its last kernel included)
        return max(max(e for _, e in kernels), returned) - t0
    return max(e for _, e in kernels) - t0


def _phantom(profile):
    """Phantom execution with modelled host time, on a device given the part's capacity once
    (rows are priced one after another in one process: the capacity stays the part's)."""
    checked = load_profile(profile)
    if _C._memory_limit() < checked["memory_capacity"]:
        _C._set_device_capacity(int(checked["memory_capacity"]))  # (refused while tensors live: rows may then not fit)
    return simulate(checked, host_time="modelled", execute=False, _keep_capacity=True)


def _busy(spans) -> float:
    total, end = 0.0, -math.inf
    for s, e in sorted(spans):
        if e > end:
            total += e - max(s, end)
            end = e
    return total


def _priced_step(case: dict, profile) -> float:
    from torch_simhpu import model_zoo
    with _phantom(profile):
        # (as the part ran it: bfloat16 autocast on a GPU, float32 on a CPU; rows without the field ran autocast)
        step = model_zoo.training_step(case["model"], DEVICE_TYPE, scale=case.get("scale", "gpu"),
                                       autocast=case.get("autocast", True))
        step()
        torch.simhpu.synchronize()
        times = []
        for _ in range(2):
            t0 = _C._simclock_host_now()
            step()
            torch.simhpu.synchronize()
            times.append(_C._simclock_host_now() - t0)
        del step
    return min(times)


# ----------------------------------------------------------------------------------------
# Errors and splits.
# ----------------------------------------------------------------------------------------

def error(priced: float, measured: float) -> float:
    """Signed relative error of a price: +0.1 is 10 % slow (too long), -0.1 10 % fast."""
    return priced / measured - 1.0


def split(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(fitted on, held out): within each group of alike rows (kind, call, dtype, backend,
    causal) every other row by size is held out, the smallest and largest kept for the fit. A
    step's kernels timed alone are all fitted on (another part's steps hold them out)."""
    groups: dict[tuple, list[dict]] = {}
    fit_rows, held = [row for row in rows if _kernels_alone(row)], []
    for row in rows:
        if _kernels_alone(row):
            continue
        key = (row["kind"], row["call"], row.get("dtype"), row.get("backend"), row.get("causal"), row.get("head_dim"))
        groups.setdefault(key, []).append(row)
    for group in groups.values():
        group.sort(key=_size)
        for i, row in enumerate(group):
            (held if 0 < i < len(group) - 1 and i % 2 == 1 else fit_rows).append(row)
    return fit_rows, held


def _size(row: dict) -> float:
    for key in ("numel", "seq", "bytes", "tensors"):
        if key in row:
            return float(row[key])
    if "shape" in row:
        return float(math.prod(row["shape"]))
    if "m" in row:
        return float(row["m"]) * row["n"] * row["k"] * row.get("batch", 1)
    if "input" in row:
        return float(math.prod(row["input"]) * math.prod(row["weight"]))
    return 0.0


def evaluate(rows: list[dict], profile, log=None) -> list[dict]:
    """Each row with its price and error on `profile` (rows simhpu cannot make are left out)."""
    out = []
    for row in rows:
        case = normalised(row)
        if case is None:
            continue
        try:
            priced = priced_seconds(case, profile)
        except Exception as failure:  # noqa: BLE001 - an unpriceable call is a result, named
            out.append(dict(row=row, case=case, priced=None, error=None,
                            failure=f"{type(failure).__name__}: {str(failure).splitlines()[0] if str(failure) else ''}"))
            if log:
                log(f"  unpriceable: {part_measure.describe(case)}: {out[-1]['failure']}")
            continue
        out.append(dict(row=row, case=case, priced=priced, error=error(priced, row["seconds"]) if priced else None))
    return out


def summary(results: list[dict]) -> dict[str, dict]:
    """Per class: rows, median |error|, rows within 15 %, the largest |error|, unpriceable rows."""
    out = {}
    for kind in CLASSES:
        mine = [r for r in results if r["row"]["kind"] == kind]
        if not mine:
            continue
        errors = [abs(r["error"]) for r in mine if r["error"] is not None]
        out[kind] = {"rows": len(mine), "median": statistics.median(errors) if errors else None,
                     "within_15": sum(e <= 0.15 for e in errors), "largest": max(errors) if errors else None,
                     "unpriceable": sum(r["error"] is None for r in mine)}
    return out


# ----------------------------------------------------------------------------------------
# The fit.
# ----------------------------------------------------------------------------------------

def _ratio(results: list[dict]) -> float | None:
    """The geometric median of measured / priced over `results`."""
    ratios = [r["row"]["seconds"] / r["priced"] for r in results if r.get("priced")]
    return math.exp(statistics.median(math.log(x) for x in ratios)) if ratios else None


# A class's traffic against a plain elementwise kernel's: at most this many passes over its bytes (a
# CPU's random numbers, made by the host's cores one at a time, reach some 100).
_MOST_TRAFFIC = 256.0


# What a library's Python and bookkeeping take on the host beyond its operators' dispatch, each read
# off its row: the field, its bound, what it is a share of.
_HOST_SHARES = {
    part_measure.PYTHON_HOST: ("host_python_line", 1e-4, "a line of the program's Python"),
    part_measure.AUTOGRAD_HOST: ("host_autograd_overhead", 1e-3, "autograd, a node"),
    part_measure.OPTIMIZER_HOST: ("host_optimizer_overhead", 1e-3, "an optimizer step, a tensor"),
}


def _fit_host_shares(profile: dict, rows: list[dict], notes: list[str]) -> None:
    """The host's shares together: each row runs some of all three (the Python row's backward has
    autograd nodes; the autograd row's loop and torch.optim's step are Python lines), so each row's
    count of each is read off its price (the field at zero, then at a unit), and the shares solved
    one after another until they settle."""
    if not rows:
        return
    fields = {field: bound for field, bound, _ in _HOST_SHARES.values()}
    values = {field: profile.get(field, 0.0) for field in fields}  # (a share no row times keeps its base's)
    unit = 1e-6
    for field in fields:
        profile[field] = 0.0
    equations = []  # (the field the row sets, its measured seconds less its price at zero, counts by field)
    for result in evaluate(rows, profile):
        if result["priced"] is None:
            continue
        counts = {}
        for field in fields:
            profile[field] = unit
            counts[field] = (evaluate([result["row"]], profile)[0]["priced"] - result["priced"]) / unit
            profile[field] = 0.0
        own = _HOST_SHARES[result["case"]["call"]][0]
        if counts[own] > 0:
            equations.append((own, result["row"]["seconds"] - result["priced"], counts))
    for field in {own for own, _, _ in equations}:
        values[field] = 0.0
    for _ in range(20):
        for field in {own for own, _, _ in equations}:
            each = [(left - sum(counts[f] * values[f] for f in fields if f != field)) / counts[field]
                    for own, left, counts in equations if own == field]
            if each:
                values[field] = min(fields[field], max(0.0, statistics.median(each)))
    profile.update(values)
    for field, _, label in _HOST_SHARES.values():
        if any(own == field for own, _, _ in equations):
            notes.append(f"host time of {label} besides its operators: {values[field] * 1e6:.3f} us")


# The host's constants besides its time per eager launch: a machine whose host launches slower runs
# these slower alike, where none of its rows times them (part_measure.HOST_CALLS time some of them;
# cuDNN's per-call host work only a convolution's rows do).
HOST_BESIDES_LAUNCH = ("host_python_line", "host_autograd_overhead", "host_optimizer_overhead",
                       "host_convolution_overhead", "host_convolution_backward_overhead")


def with_host_of(profile: dict, host_rows: list[dict]) -> dict:
    """`profile` with another machine's host: the constants its host rows time fitted on them, and
    those none times scaled by its time per eager launch against `profile`'s (as fit does with any
    launch row: so a fit on one machine's rows and then another's host gives back the constants
    the second machine's host was shipped with, however often it is run)."""
    fitted, _ = fit(host_rows, copy.deepcopy(profile), log=lambda *_: None)
    return fitted


def fit(rows: list[dict], base: str | dict, *, rounds: int = 3, log=print) -> tuple[dict, list[str]]:
    """A profile (a dict in the JSON's shape) with `base`'s fields and the constants the rows set,
    and the list of what was fitted on what."""
    profile = copy.deepcopy(_raw(base))
    notes: list[str] = []
    cases = [(row, normalised(row)) for row in rows]
    cases = [(row, case) for row, case in cases if case is not None]
    checked = load_profile(profile)  # (how its part's library chooses kernels, which the fit does not move)
    for _, case in cases:
        case["class"] = call_class(case, checked)
    fitted_classes = sorted({case["class"] for _, case in cases if case["class"]})

    def by(predicate):
        return [row for row, case in cases if predicate(case)]

    def priced(selected):
        return evaluate(selected, profile)

    # host side and copies: direct readings
    for row, case in cases:
        if case["kind"] == "launch" and case["call"] == "graph":
            profile["kernel_overhead"] = row["seconds"]
            notes.append(f"kernel_overhead {row['seconds'] * 1e6:.2f} us: back-to-back tiny kernels in a CUDA graph")
        elif case["kind"] == "launch" and case["call"] in _HOST_SHARES:
            continue  # (after the host's time per launch, below)
        elif case["kind"] == "launch":
            seconds = row["seconds"]
            total = profile["host_op_overhead"] + profile["host_launch_overhead"]
            share = profile["host_op_overhead"] / total
            # (the host's other constants are its own too: a host that launches slower runs them slower
            # alike; the rows that time one set it below, those none times ride with the launch)
            for field in HOST_BESIDES_LAUNCH:
                profile[field] = profile.get(field, 0.0) * seconds / total
            profile["host_op_overhead"] = seconds * share
            profile["host_launch_overhead"] = seconds * (1 - share)
            notes.append(f"host time per eager launch {seconds * 1e6:.2f} us (dispatch {share:.0%}, launch the rest)")
    _fit_host_shares(profile, by(lambda c: c["kind"] == "launch" and c["call"] in _HOST_SHARES), notes)
    pinned = [row["bytes"] / row["seconds"] for row, case in cases if case["kind"] == "host link" and "pinned" in case["call"]]
    pageable = [row["bytes"] / row["seconds"] for row, case in cases if case["kind"] == "host link" and "pageable" in case["call"]]
    efficiency = profile["efficiency"]
    if pinned:
        profile["host_link"]["bandwidth"] = statistics.median(pinned) / efficiency["host_link"]
        notes.append(f"host link {statistics.median(pinned) / 1e9:.1f} GB/s pinned")
    if pageable:
        profile["host_link"]["pageable_bandwidth"] = statistics.median(pageable) / efficiency["host_link"]
        notes.append(f"host link {statistics.median(pageable) / 1e9:.1f} GB/s pageable")

    attention = [(row, case) for row, case in cases if case["kind"] == "attention"]
    # (a step's attention kernels, timed alone: short sequences at a training step's batch, the rows
    # that tell a wave of blocks' fixed time from the FLOPs' rate; the curves are the other rows')
    in_steps = [(row, case) for row, case in attention if _kernels_alone(row)]
    attention = [(row, case) for row, case in attention if not _kernels_alone(row)]
    if attention:
        # (from no waves' time and no grouped rate, whatever the base profile says: the fit is the rows' alone)
        for curves in profile.get("attention", {}).values():
            for curve in (curves.values() if isinstance(curves, dict) else ()):
                if isinstance(curve, dict):
                    curve.pop("wave_time", None)
                    curve.pop("grouped_rate", None)
        curve_notes, waves_notes, before = [], [], None
        _fit_attention(profile, attention, curve_notes)
        for _ in range(12 if in_steps else 0):  # (the curves net of the waves' time, and the waves' time net of them)
            waves_notes, curve_notes = _fit_wave_times(profile, [row for row, _ in in_steps]), []
            _fit_attention(profile, attention, curve_notes)
            now = _wave_times(profile)
            if before is not None and all(abs(a - b) <= 0.005 * max(a, 1e-9) for a, b in zip(now, before)):
                break
            before = now
        notes += curve_notes + waves_notes
        grouped = [row for row, case in attention + in_steps if case["kv_heads"] < case["heads"]]
        notes += _fit_grouped_rates(profile, grouped)

    # "Large" is relative to the part: a GPU's elementwise rows reach 1<<28 elements, a CPU's 1<<22.
    elementwise_sizes = [_size(c) for _, c in cases if c["kind"] == "memory-bound"]
    large_numel = min(1 << 24, max(elementwise_sizes, default=0) / 4)
    large = lambda c: _size(c) >= large_numel  # noqa: E731
    class_numel = min(1 << 22, large_numel)
    # A wall-clock row of a small call holds the host's time for it besides the kernel's: its
    # floor is what it takes beyond the host's time per launch.
    host_per_call = lambda row: (profile["host_op_overhead"] + profile["host_launch_overhead"]  # noqa: E731
                                 if str(row.get("timing", "")).startswith("wall clock") else 0.0)
    matrix_rows = _matrix_efficiency_rows(cases)
    for round_ in range(rounds):
        moved = 0.0
        # memory: large plain elementwise rows
        selected = by(lambda c: c["kind"] == "memory-bound" and c["call"] in ("x + y", "x * y") and large(c))
        r = _ratio(priced(selected))
        if r:
            _set_efficiency(profile, "memory", efficiency["memory"] / r)
            moved = max(moved, abs(math.log(r)))
        classes = profile.setdefault("memory_classes", {})
        for cls in [cls for cls in fitted_classes if cls != "elementwise"]:
            of_class = by(lambda c, cls=cls: c["class"] == cls)
            # (its large rows; a class timed only at smaller sizes, by its largest)
            least = min(class_numel, max((_size(row) for row in of_class), default=0))
            selected = [row for row in of_class if _size(row) >= least]
            # (solved for, not scaled by the rows' ratio: a backward class's rows are timed forward +
            # backward, and only its share of their time moves with its traffic)
            fitted = _traffic_and_row_step(profile, cls, selected, chained=cls in ROW_STEP_CLASSES)
            if fitted is not None:
                entry = classes.setdefault(cls, {})
                before = (entry.get("traffic", 1.0), entry.get("row_step", 0.0))
                entry["traffic"], entry["row_step"] = fitted
                moved = max(moved, abs(math.log(fitted[0] / before[0])), abs(fitted[1] - before[1]) / 1e-9)
        for cls in fitted_classes:
            small = by(lambda c, cls=cls: c["class"] == cls
                       and c["call"].count("backward") == 0 and _size(c) <= 1 << 20)
            if small:
                classes.setdefault(cls, {})["floor"] = _floor(profile, cls, small, host_per_call)
        # optimizers: multi-tensor apply's traffic, a foreach step's operators and a fused step's kernels apart
        for cls, kind in (("multi_tensor", "(foreach)"), ("fused_optimizer", "(fused)")):
            if cls == "multi_tensor" and profile.get("multi_tensor_apply") is False:
                continue  # (a part without multi-tensor apply runs a foreach step's operators tensor by tensor)
            selected = by(lambda c, kind=kind: c["kind"] == "optimizer" and c["call"].endswith(kind))
            r = _ratio(priced(selected))
            if r:
                moved = max(moved, _scale_traffic(classes.setdefault(cls, {}), r))
        # GEMMs: efficiency on large ones, a tile's fixed time on small ones
        r = _ratio(priced(matrix_rows))
        if r:
            _set_efficiency(profile, "matrix", efficiency["matrix"] / r)
            moved = max(moved, abs(math.log(r)))
        selected = by(lambda c: c["kind"] == "gemm" and c["call"] == part_measure.GEMM and c.get("dtype") == "bfloat16"
                      and max(c["m"], c["n"], c["k"]) <= 1024)
        r = _ratio(priced(selected))
        if r and "matrix_units" in profile:
            units = profile["matrix_units"]
            units["tile_overhead"] = max(0.0, units.get("tile_overhead", 0.0) * r ** 1.5)
            moved = max(moved, abs(math.log(r)))
        convolutions = by(lambda c: c["kind"] == "gemm" and c["call"] in (part_measure.CONV_F, part_measure.CONV_FB))
        # A part that is its own host (a CPU) spends a convolution's fixed time (the library's setup,
        # its layout reorders) before its arithmetic, not beside it: a time a call added to the work,
        # fitted with the efficiencies, rather than a least time the work may hide.
        additive = bool(profile.get("synchronous_launches"))
        profile["convolution_floor"] = 0.0 if additive else _convolution_floor(profile, convolutions, host_per_call)
        # (the efficiencies on the convolutions the floor does not decide: the forward's on forward
        # rows, then the backward's on forward + backward rows, the forward's as fitted)
        selected = [r["row"] for r in evaluate(convolutions, dict(profile, convolution_floor=0.0))
                    if r["priced"] is None or r["priced"] - host_per_call(r["row"]) >= profile["convolution_floor"]]
        aligned = [row for row in selected if not _unaligned(row)]
        # (channels not a multiple of 8: the library's slower kernels, one efficiency for both directions)
        results = priced([row for row in selected if _unaligned(row) and normalised(row)["call"] == part_measure.CONV_F])
        r = _ratio(results)
        if r and results:
            before = efficiency.get("convolution_unaligned") or efficiency.get("convolution") or efficiency["matrix"]
            efficiency["convolution_unaligned"] = min(1.0, before / r)
            moved = max(moved, abs(math.log(r)))
        # A part that launches asynchronously runs a backward's data- and weight-gradient kernels as
        # the forward's implicit GEMMs, at the forward's rate: its forward + backward rows, timed
        # around calls whose host time they overlap, fit the backward's host time alone. (A CPU's
        # host and kernels add up, and its rows tell its backward's efficiency apart.)
        for direction, call in (("convolution", part_measure.CONV_F), ("convolution_backward", part_measure.CONV_FB)):
            rows_of = [row for row in aligned if normalised(row)["call"] == call]
            forward = direction == "convolution"
            fitted = _convolution_terms(profile, rows_of, direction, host_per_call, additive,
                                        efficiency=forward or additive, conversion=forward)
            if fitted is not None:
                field = f"host_{direction}_overhead"
                before = (profile.get(field, 0.0), efficiency.get(direction) or efficiency["matrix"],
                          profile.get("convolution_layout_conversion", 0.0))
                profile[field], efficiency[direction] = fitted["host"], fitted["efficiency"]
                if forward:
                    profile["convolution_layout_conversion"] = fitted["conversion"]
                    if not additive:
                        efficiency["convolution_backward"] = fitted["efficiency"]
                moved = max(moved, abs(math.log(fitted["efficiency"] / before[1])), abs(fitted["host"] - before[0]) / 1e-4,
                            abs(fitted["conversion"] - before[2]) / 1e-11 if forward else 0.0)
        strided = _offset_seconds(profile, by(lambda c: c["call"] in part_measure.STRIDED_ELEMENTWISE))
        if strided is not None:
            moved = max(moved, abs(strided - profile.get("strided_elementwise", 0.0)) / 1e-13)
            profile["strided_elementwise"] = strided
        selected = by(lambda c: c["kind"] == "gemm" and c.get("tf32") is True)
        r = _ratio(priced(selected))
        if r:
            profile["matrix_flops"]["tf32"] = profile["matrix_flops"].get("tf32", profile["matrix_flops"]["float32"]) / r
        log(f"  fit round {round_ + 1}: largest move {moved:.3f} (log)")
        if moved < 0.01:
            break
    notes.append(f"memory efficiency {efficiency['memory']:.3f}, matrix efficiency {efficiency['matrix']:.3f}, "
                 f"convolution efficiency {efficiency.get('convolution', 0):.3f} (backward "
                 f"{efficiency.get('convolution_backward', 0):.3f}, unaligned channels "
                 f"{efficiency.get('convolution_unaligned', 0):.3f}), host time a convolution call "
                 f"{profile.get('host_convolution_overhead', 0) * 1e6:.1f} us (backward "
                 f"{profile.get('host_convolution_backward_overhead', 0) * 1e6:.1f} us), "
                 f"convolution floor {profile.get('convolution_floor', 0) * 1e6:.1f} us, a channels-first element's "
                 f"layout conversion {profile.get('convolution_layout_conversion', 0) * 1e12:.2f} ps")
    if profile.get("strided_elementwise"):
        notes.append(f"an operand's offset in PyTorch's generic elementwise kernel "
                     f"{profile['strided_elementwise'] * 1e12:.2f} ps (broadcast and strided operands)")
    for cls, entry in sorted(profile.get("memory_classes", {}).items()):
        chain = " in a chain" if cls in CHAINED_CLASSES or cls == "norm_backward" else ""
        step = f", a row{chain} {entry['row_step'] * 1e9:.3f} ns" if entry.get("row_step") else ""
        notes.append(f"class {cls}: traffic {entry.get('traffic', 1.0):.2f}x, floor {entry.get('floor', 0) * 1e6:.2f} us{step}")
    return profile, notes


def _offset_seconds(profile: dict, rows: list[dict]) -> float | None:
    """The time an operand's offset takes in the part's generic elementwise kernel, from rows of
    calls it runs there (part_measure.STRIDED_ELEMENTWISE): the median of what each row's time
    says. A row is priced fixed + max(its bytes' time, offsets x that time); priced twice where
    the offsets bound it, it tells its offsets and its fixed time (None: no such rows)."""
    unit = 1e-10
    once = evaluate(rows, dict(profile, strided_elementwise=unit))
    twice = evaluate(rows, dict(profile, strided_elementwise=2 * unit))
    said = []
    for a, b in zip(once, twice):
        if a["priced"] is None or b["priced"] is None or b["priced"] <= a["priced"]:
            continue
        offsets = (b["priced"] - a["priced"]) / unit
        fixed = a["priced"] - offsets * unit
        said.append(max(0.0, (a["row"]["seconds"] - fixed) / offsets))
    return statistics.median(said) if said else None


def _scale_traffic(entry: dict, ratio: float) -> float:
    """A class's traffic scaled by measured / priced, within its bounds; how far it moved (log).
    (At a bound, or where the part's rows do not run the class's kernels at all, as a CPU's
    optimizer rows do not run multi-tensor kernels, it stops moving, and the fit settles.)"""
    before = entry.get("traffic", 1.0)
    entry["traffic"] = min(_MOST_TRAFFIC, max(0.25, before * ratio))
    return abs(math.log(entry["traffic"] / before))


def fit_family(profile: dict, rows: list[dict], member_rows: list[dict], member) -> list[str]:
    """Each memory class's traffic and rate, on two parts of one family at once (in place): `rows`
    timed on `profile`'s part, `member_rows` on a part that shares its die and differs in memory
    (`member(profile)`: its profile, as it inherits this one). One part's rows cannot tell memory
    traffic from the units' rate (both grow with the bytes); two parts whose memories differ can: a
    class whose kernels take as long on the faster memory is bound by its units. Each large row's
    price is split into what its bytes take at traffic 1 on its part (priced again at traffic 2:
    the difference) and the rest, then the traffic and rate with the least squared log error:
    measured = rest + max(traffic x bytes' time, bytes / rate). A rate is kept only where it
    explains the rows markedly better than traffic alone."""
    notes = []
    seen = set()  # (the classes both parts timed)
    classes = profile.setdefault("memory_classes", {})
    for cls in sorted((set(CALL_CLASS.values()) | set(SHAPED_CLASSES)) - {"elementwise"} - set(CHAINED_CLASSES)
                      - set(MEMORY_BOUND_CHAINS)):
        points = []  # (rest, bytes' time at traffic 1, bytes, measured)
        parts = 0  # (that gave points: one part alone cannot tell traffic from rate)
        for selected, of in ((rows, lambda p: p), (member_rows, member)):
            checked = load_profile(of(profile))
            large = [r for r in selected if r["kind"] == "memory-bound" and _size(r) >= 1 << 22
                     and call_class(normalised(r), checked) == cls]
            if not large:
                continue
            plain, doubled = (of(_with_class(profile, cls, traffic=t, rate=0.0)) for t in (1.0, 2.0))
            counted = False
            bandwidth = plain["memory_bandwidth"] * plain["efficiency"]["memory"]
            for a, b in zip(evaluate(large, plain), evaluate(large, doubled)):
                if a["priced"] and b["priced"] and b["priced"] > a["priced"]:
                    memory = b["priced"] - a["priced"]
                    points.append((a["priced"] - memory, memory, memory * bandwidth, a["row"]["seconds"]))
                    counted = True
            parts += counted
        if parts == 2:
            seen.add(cls)
        if len(points) < 3 or parts < 2:
            continue

        def loss(traffic, rate):
            return sum(math.log(max(r + max(traffic * m, n / rate if rate else 0.0), 1e-12) / t) ** 2
                       for r, m, n, t in points)
        traffics = [0.25 * 1.05 ** i for i in range(int(math.log(_MOST_TRAFFIC / 0.25) / math.log(1.05)) + 1)]
        rates = [1e11 * 1.05 ** i for i in range(int(math.log(1e14 / 1e11) / math.log(1.05)) + 1)]
        traffic_alone = min(traffics, key=lambda t: loss(t, 0.0))
        best = min(((t, r) for t in traffics for r in rates), key=lambda tr: loss(*tr))
        entry = classes.setdefault(cls, {})
        if loss(*best) < 0.7 * loss(traffic_alone, 0.0):
            entry["traffic"], entry["rate"] = best
            notes.append(f"class {cls}: traffic {best[0]:.2f}x, units' rate {best[1] / 1e12:.2f} TB/s "
                         f"({len(points)} rows on two parts)")
        else:
            entry["traffic"], entry["rate"] = traffic_alone, 0.0
            notes.append(f"class {cls}: traffic {traffic_alone:.2f}x, bound by memory ({len(points)} rows on two parts)")
    notes += _units_bound_where_unseen(profile, seen)
    return notes


# A class whose kernels take more passes over their bytes than this, on the one part that timed it,
# is bound by something else than the memory.
_MOST_PASSES = 2.0


def _units_bound_where_unseen(profile: dict, seen: set[str]) -> list[str]:
    """Classes only one part of the family timed cannot be told memory- or units-bound by their rows;
    one whose fitted traffic is more passes over its bytes than its kernels make (a channels-first
    batch norm at 6x, max-pool's backward at 6x) is bound by the units the die shares: it keeps its
    time on the fitted part as a units' rate (its traffic held at one pass), which a family member
    with faster memory shares rather than outruns."""
    notes = []
    bandwidth = profile["memory_bandwidth"] * profile["efficiency"]["memory"]
    # (an optimizer's classes count every state a step reads and writes as its bytes, and their
    # fitted traffic is its kernels' tails over many small tensors, not passes: left as fitted)
    optimizers = ("multi_tensor", "fused_optimizer")
    for cls, entry in sorted(profile.get("memory_classes", {}).items()):
        traffic = entry.get("traffic", 1.0)
        if cls in seen or cls in optimizers or cls in MEMORY_BOUND_CHAINS or entry.get("rate") or traffic <= _MOST_PASSES:
            continue
        entry["rate"], entry["traffic"] = bandwidth / traffic, 1.0
        notes.append(f"class {cls}: units' rate {entry['rate'] / 1e12:.2f} TB/s (traffic {traffic:.2f}x on one part's "
                     "rows: more passes than its kernels make)")
    return notes


def _with_class(profile: dict, cls: str, **fields) -> dict:
    trial = copy.deepcopy(profile)
    classes = trial.setdefault("memory_classes", {})
    classes[cls] = dict(classes.get(cls, {}), **fields)
    return trial


def _floor(profile: dict, cls: str, small: list[dict], host_per_call) -> float:
    """The least a kernel of class `cls` takes, from its smallest rows: those whose bytes alone (the
    class's traffic, no floor) do not explain their kernel's time. A row whose bytes explain it (a
    CPU's smallest rows can be large) sets none."""
    entry = profile.setdefault("memory_classes", {}).setdefault(cls, {})
    before, entry["floor"] = entry.get("floor", 0.0), 0.0
    candidates = []
    smallest = min(_size(row) for row in small)
    for result in evaluate([row for row in small if _size(row) == smallest], profile):
        kernel = result["row"]["seconds"] - host_per_call(result["row"])
        if result["priced"] is not None and result["priced"] - host_per_call(result["row"]) < kernel:
            candidates.append(kernel)
    entry["floor"] = before
    # (at most what a profile may state: a host's descheduled call is not a kernel's least time)
    return min(1e-3, max(0.0, min(candidates))) if candidates else 0.0


def _traffic_and_row_step(profile: dict, cls: str, rows: list[dict], chained: bool = True) -> tuple[float, float] | None:
    """A class's traffic, and a chained class's time a row with it: each row's price split into
    what its bytes take (priced again at twice the traffic: the difference), what its rows take
    (priced again with a nanosecond a row) and the rest, then the least-squares (relative) fit of
    measured = rest + bytes x traffic + rows x row_step, both >= 0. A class with rows of one
    shape only, or not chained, keeps its row step and fits its traffic alone. A class whose price
    is not linear in them (MEMORY_BOUND_CHAINS) is split about its estimate until that settles."""
    if cls not in MEMORY_BOUND_CHAINS:
        return _split_and_fit(profile, cls, rows, chained, 1.0, 0.0)
    entry = profile.get("memory_classes", {}).get(cls, {})
    estimate = (entry.get("traffic", 1.0), entry.get("row_step", 0.0))
    for _ in range(20):
        fitted = _split_and_fit(profile, cls, rows, chained, *estimate)
        if fitted is None:
            return None
        settled = (abs(math.log(fitted[0] / estimate[0])) < 1e-5
                   and abs(fitted[1] - estimate[1]) < 1e-5 * max(fitted[1], 1e-12))
        estimate = fitted
        if settled:
            break
    return estimate


def _split_and_fit(profile: dict, cls: str, rows: list[dict], chained: bool, traffic_at: float,
                   step_at: float) -> tuple[float, float] | None:
    """_traffic_and_row_step's one split, about a traffic and a row step, and its fit."""
    def priced_with(traffic: float, row_step: float) -> list[dict]:
        return evaluate(rows, _with_class(profile, cls, traffic=traffic, row_step=row_step))
    step_at = step_at if chained else 0.0
    plain, doubled = priced_with(traffic_at, step_at), priced_with(2.0 * traffic_at, step_at)
    stepped = priced_with(traffic_at, step_at + 1e-9) if chained else plain
    points = []  # (rest, bytes' time at traffic 1, rows in a chain, measured)
    for a, b, c in zip(plain, doubled, stepped):
        if a["priced"] and b["priced"] and c["priced"]:
            memory, chain = (b["priced"] - a["priced"]) / traffic_at, (c["priced"] - a["priced"]) / 1e-9
            points.append((a["priced"] - memory * traffic_at - chain * step_at, memory, chain, a["row"]["seconds"]))
    if not points or not any(m > 0 for _, m, _, _ in points):
        return None

    def weighted(f):
        return sum(f(r, m, n, t) / (t * t) for r, m, n, t in points)
    a11, a12, a22 = weighted(lambda r, m, n, t: m * m), weighted(lambda r, m, n, t: m * n), weighted(lambda r, m, n, t: n * n)
    b1, b2 = weighted(lambda r, m, n, t: m * (t - r)), weighted(lambda r, m, n, t: n * (t - r))
    det = a11 * a22 - a12 * a12
    distinct_rows = len({n for _, _, n, _ in points}) > 1
    if distinct_rows and det > 1e-12 * a11 * a22:
        traffic, row_step = (b1 * a22 - b2 * a12) / det, (a11 * b2 - a12 * b1) / det
        if traffic >= 0.25 and row_step >= 0:
            return min(_MOST_TRAFFIC, traffic), min(1e-6, row_step)
    # (one shape of rows, or a fit out of range: the traffic alone, the row step as it was)
    row_step = profile.get("memory_classes", {}).get(cls, {}).get("row_step", 0.0)
    traffic = weighted(lambda r, m, n, t: m * (t - r - n * row_step)) / a11 if a11 > 0 else 1.0
    return min(_MOST_TRAFFIC, max(0.25, traffic)), row_step


def _convolution_terms(profile: dict, rows: list[dict], direction: str, host_per_call, fixed_time: bool = False, *,
                       efficiency: bool = True, conversion: bool = False) -> dict | None:
    """A convolution direction's host time a call, efficiency and (`conversion`) the time an element's
    layout conversion takes, together: each row's price split into what the direction's compute
    takes (priced again at half the efficiency: the difference), what its conversions take (priced
    again at a unit an element: the difference) and the rest, then the least-squares (relative) fit
    of measured = host + rest + compute x (base efficiency / efficiency) + converted elements x
    conversion. Wall-clock rows hold the host's launch already: there the host time stays 0,
    unless `fixed_time` says the part's calls have a fixed time of their own besides the launch (a
    CPU's: the rows' rest has the launch priced). Without `efficiency`, the base's is kept."""
    efficiencies = profile["efficiency"]
    base = efficiencies.get(direction) or efficiencies.get("convolution") or efficiencies["matrix"]
    field = f"host_{direction}_overhead"
    trial = copy.deepcopy(profile)
    trial[field] = 0.0
    trial["efficiency"][direction] = base
    trial["convolution_layout_conversion"] = 0.0 if conversion else profile.get("convolution_layout_conversion", 0.0)
    at_base = evaluate(rows, trial)
    trial["efficiency"][direction] = base / 2
    at_half = evaluate(rows, trial)
    trial["efficiency"][direction] = base
    unit = 1e-12
    at_unit = evaluate(rows, dict(trial, convolution_layout_conversion=unit)) if conversion else at_base
    points = []  # (rest, {unknown: its coefficient}, measured)
    for a, b, u in zip(at_base, at_half, at_unit):
        if a["priced"] and b["priced"] and u["priced"]:
            compute = b["priced"] - a["priced"]
            coefficients = {"host": 1.0, "x": compute, "conversion": (u["priced"] - a["priced"]) / unit}
            points.append((a["priced"] - compute, coefficients, a["row"]["seconds"]))
    if not points or not any(k["x"] > 0 for _, k, _ in points):
        return None
    unknowns = [name for name, wanted in (
        ("host", len(points) >= 2 and (fixed_time or not any(host_per_call(r["row"]) for r in at_base))),
        ("x", efficiency),
        ("conversion", conversion and any(k["conversion"] > 0 for _, k, _ in points))) if wanted]
    known = {"host": 0.0, "x": 1.0, "conversion": 0.0}
    values = dict(known)
    while unknowns:
        values = dict(known, **_least_squares(points, unknowns, known))
        # (a time cannot be negative, nor an efficiency pass the peak: that unknown is held at its bound)
        bounded = [name for name in unknowns if values[name] < (base if name == "x" else 0.0)]
        if not bounded:
            break
        for name in bounded:
            known[name] = base if name == "x" else 0.0
            unknowns.remove(name)
        values = dict(known)
    return dict(host=min(1e-2, max(0.0, values["host"])), efficiency=min(1.0, base / values["x"]),
                conversion=min(1e-9, max(0.0, values["conversion"])))


def _least_squares(points, unknowns: list[str], known: dict) -> dict:
    """The unknowns that least-squares (relative to each row's measured time) fit measured = rest +
    the sum of coefficient x value over every term, the known ones at their values."""
    a = torch.tensor([[k[name] / m for name in unknowns] for _, k, m in points], dtype=torch.float64)
    b = torch.tensor([(m - rest - sum(k[name] * known[name] for name in known if name not in unknowns)) / m
                      for rest, k, m in points], dtype=torch.float64)
    solution = torch.linalg.lstsq(a, b.unsqueeze(1), driver="gelsd").solution.squeeze(1)
    return {name: float(v) for name, v in zip(unknowns, solution)}


def _unaligned(row: dict) -> bool:
    """A convolution row whose input channels (a group's) are not a multiple of 8."""
    return normalised(row)["weight"][1] % 8 != 0


def _convolution_floor(profile: dict, rows: list[dict], host_per_call) -> float:
    """The least a convolution launch takes: where forward rows of one weight shape were timed at
    two input sizes, the time a launch takes beyond its work (the intercept of time against
    FLOPs through the smallest and largest); the base's where no rows are so paired."""
    from torch.utils.flop_counter import conv_flop_count
    groups: dict[tuple, list[tuple[float, float]]] = {}
    for row in rows:
        case = normalised(row)
        if case is None or case["call"] != part_measure.CONV_F:
            continue
        stride, padding = case["stride"], case["padding"]
        out = [case["input"][0], case["weight"][0],
               *((size + 2 * padding - k) // stride + 1 for size, k in zip(case["input"][2:], case["weight"][2:]))]
        flops = conv_flop_count(case["input"], case["weight"], out, transposed=False)
        groups.setdefault((tuple(case["weight"]), stride, padding), []).append((flops, row["seconds"] - host_per_call(row)))
    intercepts = []
    for points in groups.values():
        (f0, t0), (f1, t1) = min(points), max(points)
        if f1 > f0:
            intercepts.append(t0 - (t1 - t0) * f0 / (f1 - f0))
    if not intercepts:
        return profile.get("convolution_floor", 0.0)
    return min(1e-2, max(0.0, statistics.median(intercepts)))


def _set_efficiency(profile: dict, unit: str, wanted: float) -> None:
    """The `unit`'s efficiency (a fraction of its peak); a part faster than its base's peak (the
    base's rates are datasheet figures or, for a CPU, estimates) has the peak raised instead."""
    profile["efficiency"][unit] = min(1.0, wanted)
    if wanted > 1.0:
        if unit == "memory":
            profile["memory_bandwidth"] *= wanted
        else:
            profile["matrix_flops"] = {dtype: rate * wanted for dtype, rate in profile["matrix_flops"].items()}


def _matrix_efficiency_rows(cases: list[tuple[dict, dict]]) -> list[dict]:
    """The GEMM rows the matrix efficiency is fitted on: a GPU's large reduced-precision GEMMs
    (every side >= 4096), or, on a part without them (a CPU), its largest float32 GEMMs."""
    gemms = [(row, c) for row, c in cases if c["kind"] == "gemm" and c["call"] == part_measure.GEMM]
    reduced = [row for row, c in gemms if c.get("dtype") in ("bfloat16", "float16") and min(c["m"], c["n"], c["k"]) >= 4096]
    if reduced:
        return reduced
    single = [(row, c) for row, c in gemms if c.get("dtype", "float32") == "float32" and not c.get("tf32")]
    side = max((min(c["m"], c["n"], c["k"]) for _, c in single), default=0)
    return [row for row, c in single if min(c["m"], c["n"], c["k"]) >= side / 2]


# A difference of two timings below this share of the larger is noise, not a measurement.
_NOISE_FLOOR = 0.2


def _kernels_alone(row: dict) -> bool:
    """A row timed as its kernels' own time (a step-kernels file's), not around its call."""
    return str(row.get("timing", "")).startswith("kernels")


def _waves(profile: dict, rows: list[dict], backend: str, direction: str) -> list[float | None]:
    """Each row's waves of `direction`'s blocks on `backend`, as launch pricing counts them (priced
    with a wave a microsecond and with none: the difference)."""
    def priced(wave_time):
        trial = copy.deepcopy(profile)
        curve = trial.get("attention", {}).get(backend, {}).get(direction)
        if curve is None:
            return [None] * len(rows)
        curve["wave_time"] = wave_time
        return [r["priced"] for r in evaluate(rows, trial)]
    return [None if a is None or b is None else max(0.0, (b - a) / 1e-6) for a, b in zip(priced(0.0), priced(1e-6))]


def _wave_times(profile: dict) -> list[float]:
    """Every attention curve's wave time, in a fixed order."""
    return [profile.get("attention", {}).get(b, {}).get(d, {}).get("wave_time", 0.0)
            for b in kernel_choice.BACKENDS for d in ("forward", "backward")]


def _curves_and_their_rows(profile: dict, rows: list[dict]):
    """(backend, direction, its curve, its rows) for each attention curve some rows ran: forward rows
    for a forward curve, forward + backward rows for a backward one."""
    for backend in kernel_choice.BACKENDS:
        for direction, call in (("forward", part_measure.SDPA_F), ("backward", part_measure.SDPA_FB)):
            curve = profile.get("attention", {}).get(backend, {}).get(direction)
            mine = [row for row in rows if normalised(row) and normalised(row)["call"] == call
                    and _backend_of(profile, normalised(row)) == backend]
            if curve is not None and mine:
                yield backend, direction, curve, mine


def _fit_wave_times(profile: dict, rows: list[dict]) -> list[str]:
    """Each backend's time a wave of its blocks takes besides its FLOPs (forward, then backward),
    from kernel-timed rows: the least-squares (relative) fit of measured = rest + waves x wave time,
    >= 0. Rows of one wave count do not tell it from the rate: then none is set."""
    notes = []
    for backend, direction, curve, mine in _curves_and_their_rows(profile, rows):
        waves = _waves(profile, mine, backend, direction)
        without = copy.deepcopy(profile)
        without["attention"][backend][direction]["wave_time"] = 0.0
        points = [(w, r["priced"], r["row"]["seconds"]) for w, r in zip(waves, evaluate(mine, without))
                  if w and r["priced"]]
        if len({w for w, _, _ in points}) < 2:
            continue
        num = sum(w * (t - rest) / (t * t) for w, rest, t in points)
        den = sum(w * w / (t * t) for w, rest, t in points)
        curve["wave_time"] = min(1e-4, max(0.0, num / den))
        notes.append(f"attention {backend} {direction}: a wave of blocks {curve['wave_time'] * 1e6:.2f} us "
                     f"besides its FLOPs ({len(points)} rows of a step's kernels)")
    return notes


def _fit_grouped_rates(profile: dict, rows: list[dict]) -> list[str]:
    """Each backend's rate on grouped-query rows (a key head shared by several query heads) as a
    multiple of its curve's, forward then backward: scaled by the rows' median priced / measured
    until it settles (the curves' own rows have no groups: they do not move)."""
    notes = []
    for backend, direction, curve, mine in _curves_and_their_rows(profile, rows):
        for _ in range(12):
            ratios = [r["priced"] / r["row"]["seconds"] for r in evaluate(mine, profile) if r["priced"]]
            if not ratios:
                break
            ratio = statistics.median(ratios)
            curve["grouped_rate"] = min(4.0, max(0.25, curve.get("grouped_rate", 1.0) * ratio))
            if abs(ratio - 1) < 0.002:
                break
        notes.append(f"attention {backend} {direction}: grouped-query calls at {curve['grouped_rate']:.2f}x the "
                     f"curve's rate ({len(mine)} rows)")
    return notes


def _waves_time_by_row(profile: dict, attention: list[tuple[dict, dict]]) -> dict[int, tuple[float, float]]:
    """What each row's waves of blocks take on the profile's curves (id(row) -> (the forward's,
    the backward's)): 0 where its backend's curve has no wave time."""
    out = {}
    for backend, curves in profile.get("attention", {}).items():
        if not isinstance(curves, dict):
            continue
        mine = [row for row, case in attention if _backend_of(profile, case) == backend]
        by_direction = []
        for direction in ("forward", "backward"):
            wave_time = curves.get(direction, {}).get("wave_time", 0.0)
            waves = _waves(profile, mine, backend, direction) if wave_time else [0.0] * len(mine)
            by_direction.append([(w or 0.0) * wave_time for w in waves])
        for row, forward, backward in zip(mine, *by_direction):
            out[id(row)] = (forward, backward)
    return out


def _fit_attention(profile: dict, attention: list[tuple[dict, dict]], notes: list[str]) -> None:
    """Each backend's curves from its rows: forward rows give the forward's attained FLOP/s; a
    forward + backward row less the forward of the same shape gives the backward's. A curve with a
    wave time attains its rate net of its waves' (launch_cost.cpp)."""
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count
    curves: dict[str, dict] = {}
    forward_seconds = {}
    waves_time = _waves_time_by_row(profile, attention)
    for row, case in attention:
        if case["call"] == part_measure.SDPA_F:
            forward_seconds[_shape_key(case)] = row["seconds"]
    reference_head_dim = max(case["head_dim"] for _, case in attention)  # (a GPU's rows: 128)
    for row, case in attention:
        if case["head_dim"] != reference_head_dim or case["kv_heads"] != case["heads"]:
            continue  # (curves at one head dim; other shapes are what they are judged on)
        backend = _backend_of(profile, case)
        q = (case["batch"], case["heads"], case["seq"], case["head_dim"])
        flops = sdpa_flop_count(q, q, q)
        forward_waves, backward_waves = waves_time.get(id(row), (0.0, 0.0))
        if case["call"] == part_measure.SDPA_F:
            seconds, direction = row["seconds"] - forward_waves, "forward"
        else:
            if _shape_key(case) not in forward_seconds:
                continue
            direction, backward_flops = "backward", sdpa_backward_flop_count(q, q, q, q)
            seconds = row["seconds"] - forward_seconds[_shape_key(case)] - backward_waves
            if seconds < _NOISE_FLOOR * row["seconds"]:
                # (the difference is within the timing noise of a busy host: the pair's rate
                # stands for the backward's, which cannot be faster than the pair it is part of)
                notes.append(f"attention {backend} backward at {case['seq']} keys: forward + backward "
                             f"timed within noise of its forward; the pair's rate used")
                seconds, backward_flops = row["seconds"], backward_flops + flops
            flops = backward_flops
        if case["causal"]:
            flops /= 2
        points = curves.setdefault(backend, {}).setdefault(direction, {}).setdefault(
            "causal_flops" if case["causal"] else "flops", {})
        points[case["seq"]] = flops / seconds
    attention_profile = profile.setdefault("attention", {})
    for backend, directions in curves.items():
        for direction, rates in directions.items():
            if "flops" not in rates:
                continue
            sequence = sorted(rates["flops"])
            curve = {"sequence": sequence, "flops": [rates["flops"][s] for s in sequence]}
            causal = rates.get("causal_flops", {})
            if set(causal) >= set(sequence):
                curve["causal_flops"] = [causal[s] for s in sequence]
            if direction in attention_profile and backend == "flash":
                attention_profile.pop(direction)  # (the top-level flash curves move under 'flash')
            before = attention_profile.setdefault(backend, {}).get(direction, {})
            kept = {k: before[k] for k in ("tile", "head_dim_exponent", "wave_time", "grouped_rate") if k in before}
            attention_profile[backend][direction] = dict(kept, **curve, head_dim=reference_head_dim)
        notes.append(f"attention {backend}: curves at {sorted(directions.get('forward', {}).get('flops', {}))} keys")
    if "cudnn" in curves and attention_profile.get("rules", "cuda") == "cuda":
        attention_profile["priority"] = ["cudnn", "flash", "efficient", "math"]
    _fit_attention_kernel_shape(profile, attention, reference_head_dim, notes)


# A fused attention kernel's block of queries by keys, read from its name as the part's libraries
# name them: cuDNN's "..._fprop_wgmma_f16_knob_7_64x128x128_..." (queries x keys x head dim), FlashAttention's
# "Flash_fwd_kernel_traits<128, 128, 64, ..." (head dim, queries, keys).
_TILE_IN_NAME = {
    "cudnn": {"forward": re.compile(r"sdpa_\w*_fprop_\w*?_(\d+)x(\d+)x\d+_"),
              "backward": re.compile(r"sdpa_\w*_bprop_\w*?_(\d+)x(\d+)x\d+_")},
    "flash": {"forward": re.compile(r"Flash_fwd_kernel_traits<\d+, (\d+), (\d+),"),
              "backward": re.compile(r"Flash_bwd_kernel_traits<\d+, (\d+), (\d+),")},
}


def _fit_attention_kernel_shape(profile: dict, attention: list[tuple[dict, dict]], reference_head_dim: int,
                                notes: list[str]) -> None:
    """Each backend's tiles, from the kernels its rows name (a sequence not a multiple of a tile costs
    its whole tiles), and how its rate scales with the head dim: on its forward rows at another head dim
    and sequences its curves cover, measured = priced at the reference head dim x (head dim / it)^-exponent."""
    attention_profile = profile.get("attention", {})
    for backend, patterns in _TILE_IN_NAME.items():
        for direction, pattern in patterns.items():
            curve = attention_profile.get(backend, {}).get(direction)
            found = next((m for m in (pattern.search(" ".join(row.get("kernels") or {})) for row, case in attention
                                      if _backend_of(profile, case) == backend) if m), None)
            if curve is not None and found:
                curve["tile"] = [int(found.group(1)), int(found.group(2))]
                notes.append(f"attention {backend} {direction}: tiles of {curve['tile'][0]} queries x "
                             f"{curve['tile'][1]} keys (its kernels' names)")
    others = [(row, case) for row, case in attention if case["call"] == part_measure.SDPA_F
              and case["head_dim"] != reference_head_dim and case["kv_heads"] == case["heads"]]
    for backend, curves in attention_profile.items():
        if not isinstance(curves, dict) or "forward" not in curves:
            continue
        first = curves["forward"]["sequence"][0]
        mine = [row for row, case in others if case["seq"] >= first and _backend_of(profile, case) == backend]
        for direction in ("forward", "backward"):  # (priced at the curves' own head dim)
            curves.get(direction, {}).pop("head_dim_exponent", None)
        exponents = [math.log(r["priced"] / r["row"]["seconds"]) / math.log(r["case"]["head_dim"] / reference_head_dim)
                     for r in evaluate(mine, profile) if r["priced"]]
        if exponents:
            exponent = min(2.0, max(0.0, statistics.median(exponents)))
            for direction in ("forward", "backward"):
                if direction in curves:
                    curves[direction]["head_dim_exponent"] = exponent
            notes.append(f"attention {backend}: rate x (head dim / {reference_head_dim})^{exponent:.2f} "
                         f"({len(exponents)} rows at other head dims)")


def _backend_of(profile: dict, case: dict) -> str:
    """The attention backend a row ran: the one it names, or the one PyTorch's default took."""
    return _default_backend(profile, case) if case["backend"] == "default" else case["backend"]


def _default_backend(profile: dict, case: dict) -> str:
    """The backend PyTorch's default SDPA took for a row: on a GPU with this torch, cuDNN's (the
    rows' kernel names say so); on a part with other rules (a CPU), the first of its priority the
    call meets."""
    attention = profile.get("attention", {})
    if attention.get("rules", "cuda") == "cuda":
        return "cudnn"
    chosen = kernel_choice.attention_backend(attention.get("priority", ["flash"]),
                                             part_measure.DTYPES[case.get("dtype", "float32")], case["head_dim"],
                                             rules=attention["rules"])
    return chosen if chosen != "math" else "flash"


def _shape_key(case: dict) -> tuple:
    return (case["backend"], case["batch"], case["heads"], case["kv_heads"], case["seq"], case["head_dim"], case["causal"])


def _raw(base: str | dict) -> dict:
    """A profile as its JSON says (inheritance merged), to fit and to write back."""
    if isinstance(base, dict):
        return base
    from pathlib import Path

    from torch_simhpu.simulation import part_profiles
    path = Path(base) if Path(base).suffix else part_profiles.PROFILE_DIR / f"{base}.json"
    return part_profiles._read_profile(path, str(base), ())


def check(profile: dict) -> dict:
    """The profile validated (a fitted constant out of range is refused here, by field)."""
    return load_profile(profile)
