"""torch.simhpu simulated time: how long the program would take on the part a
device profile describes.

    torch.simhpu.set_profile("h100-sxm")          # or SIMHPU_DEVICE_PROFILE=h100-sxm|path.json
    with torch.simhpu.simulate("h100-sxm") as sim:
        train_step()
    print(sim.report())

    python -m torch_simhpu.simulation --profile h100-sxm train.py [args]

Every launch is priced at launch time, in launch order (csrc/simclock): a
roofline for kernels (FLOPs from torch.utils.flop_counter's formulas for the
operators it knows, one per element otherwise; the bytes of the operands), the
host link for copies, an alpha-beta model of the fabric for collectives. Each
stream has a clock; waits on events and the host's synchronisations move the
clocks as they move the real part's. With a profile set, Event.elapsed_time
reports simulated milliseconds and torch.simhpu.trace() writes the simulated
timeline beside the host's.

Profiles are JSON files: the shipped ones are in torch_simhpu/profiles/ (see
profiles()); a path to the user's own is accepted wherever a name is.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import json
import math
import os
import runpy
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from torch_simhpu import _C, phantom, simulated_ranks
from torch_simhpu.memory import _format_bytes
from torch_simhpu.memory_ledger import MemoryBreakdown, MemoryLedger
from torch_simhpu.simulation import kernel_choice

PROFILE_DIR = Path(__file__).parent.parent / "profiles"

_DTYPES = {
    "float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
    "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2,
    "float8_e4m3fnuz": torch.float8_e4m3fnuz, "float8_e5m2fnuz": torch.float8_e5m2fnuz, "complex64": torch.complex64,
    "complex128": torch.complex128, "int64": torch.int64, "int32": torch.int32, "int16": torch.int16,
    "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool,
}
_NUMBERS = ("memory_bandwidth", "memory_capacity", "kernel_overhead", "launch_latency", "host_op_overhead",
            "host_launch_overhead", "sync_latency")
_EFFICIENCIES = ("matrix", "vector", "memory", "host_link", "fabric")
_HOST_TIME = {"measured": 0, "modelled": 1}


class ProfileError(ValueError):
    """A device profile that cannot be used: names the file, the field and what was expected."""


def profiles() -> list[str]:
    """The names of the shipped profiles."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.json"))


class _CheckedProfile(dict):
    """A profile as _validated made it: rates keyed by torch.dtype, every field present."""


def load_profile(profile: str | os.PathLike | dict) -> dict:
    """A profile by name (shipped), path (a JSON file) or as a dict, checked field by field."""
    if isinstance(profile, _CheckedProfile):
        return profile
    if isinstance(profile, dict):
        return _validated(profile, "<dict>")
    text = os.fspath(profile)
    path = Path(text)
    if not path.suffix and not path.exists():
        path = PROFILE_DIR / f"{text}.json"
        if not path.exists():
            raise ProfileError(f"device profile {text!r}: no shipped profile of that name (shipped: "
                               f"{', '.join(profiles())}); give a path to a JSON file for your own")
    return _validated(_read_profile(path, text, ()), str(path))


def _read_profile(path: Path, text: str, seen: tuple) -> dict:
    """A profile file's JSON, with what it inherits ("inherits": a shipped profile's name or a
    path beside it) merged under its own fields: a part of a family states only what differs."""
    try:
        data = json.loads(path.read_text())
    except OSError as error:
        raise ProfileError(f"device profile {text!r}: cannot read {path}: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise ProfileError(f"{path}:{error.lineno}: not valid JSON: {error.msg}") from None
    if not isinstance(data, dict) or "inherits" not in data:
        return data
    base = data.pop("inherits")
    if not isinstance(base, str) or not base:
        raise ProfileError(f"{path}: field 'inherits': expected a profile's name or path, got {base!r}")
    base_path = path.parent / base if (path.parent / base).exists() else PROFILE_DIR / f"{base}.json"
    if not base_path.exists():
        raise ProfileError(f"{path}: field 'inherits': no profile {base!r} (shipped: {', '.join(profiles())})")
    if base_path.resolve() in seen:
        raise ProfileError(f"{path}: field 'inherits': {base!r} inherits from this profile again (a cycle)")
    inherited = _read_profile(base_path, base, (*seen, path.resolve()))
    merged = _merged(inherited, data)
    merged["sources"] = [*data.get("sources", []), *(f"(from {base}) {s}" for s in inherited.get("sources", []))]
    return merged


def _merged(base: dict, own: dict) -> dict:
    out = dict(base)
    for key, value in own.items():
        out[key] = _merged(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return out


def _validated(data: dict, where: str) -> dict:
    def problem(field: str, expected: str) -> ProfileError:
        return ProfileError(f"{where}: field {field!r}: expected {expected}")

    def positive(value, field: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise problem(field, f"a finite number >= 0 (SI units: s, bytes, bytes/s, FLOP/s), got {value!r}")
        return float(value)

    def section(value, field: str) -> dict:
        if not isinstance(value, dict):
            raise problem(field, f"an object, got {value!r}")
        return value

    def field(obj: dict, name: str, path: str):
        if name not in obj:
            raise problem(path, "it to be present (see torch_simhpu/profiles/h100-sxm.json for every field)")
        return obj[name]

    if not isinstance(data, dict):
        raise ProfileError(f"{where}: a profile is a JSON object, got {type(data).__name__}")
    out = _CheckedProfile(name=data.get("name") or Path(where).stem)
    if not isinstance(out["name"], str):
        raise problem("name", f"a string, got {out['name']!r}")
    for rates in ("matrix_flops", "vector_flops"):
        given = dict(section(field(data, rates, rates), rates))
        if rates == "matrix_flops":  # optional: a float32 matmul in TF32, where the program allows it
            out["tf32_flops"] = positive(given.pop("tf32", 0), "matrix_flops.tf32")
        unknown = set(given) - set(_DTYPES) - {"default"}
        if unknown:
            raise problem(rates, f"dtype names from {sorted(_DTYPES)} or 'default', got {sorted(unknown)}")
        if "default" not in given:
            raise problem(f"{rates}.default", "the rate for dtypes not listed")
        default = positive(given["default"], f"{rates}.default")
        if default == 0:
            raise problem(f"{rates}.default", "a rate > 0")
        table = {}
        for name, dtype in _DTYPES.items():
            rate = positive(given.get(name, default), f"{rates}.{name}")
            table[dtype] = rate if rate > 0 else default
        out[rates] = table
    for name in _NUMBERS:
        out[name] = positive(field(data, name, name), name)
    if out["memory_bandwidth"] == 0:
        raise problem("memory_bandwidth", "a bandwidth > 0")
    # optional: the host's time an optimizer step takes per parameter tensor besides its operators'
    # dispatch (torch.optim's Python: grouping the tensors, reading their state), as measured
    # optional: the host's time the autograd engine takes a node of the graph (recording it in the
    # forward, running it in the backward) besides the node's operators' dispatch, as measured
    for name, unit in (("host_optimizer_overhead", "a parameter tensor"), ("host_autograd_overhead", "an autograd node")):
        out[name] = positive(data.get(name, 0), name)
        if out[name] > 1e-3:
            raise problem(name, f"seconds {unit}, <= 1e-3, got {out[name]!r}")
    # optional: the host's time a convolution call takes in the part's library besides its launch
    # (cuDNN's plan and workspace lookups, its layout changes' launches), forward and backward
    for name in ("host_convolution_overhead", "host_convolution_backward_overhead"):
        out[name] = positive(data.get(name, 0), name)
        if out[name] > 1e-2:
            raise problem(name, f"seconds a call, <= 1e-2, got {out[name]!r}")
    # optional: the least a convolution launch takes (its library's per-call setup), as measured
    out["convolution_floor"] = positive(data.get("convolution_floor", 0), "convolution_floor")
    if out["convolution_floor"] > 1e-2:
        raise problem("convolution_floor", f"seconds, <= 1e-2, got {out['convolution_floor']!r}")
    # optional: a part whose host runs each kernel before its next operator (a CPU is its own host)
    out["synchronous_launches"] = data.get("synchronous_launches", False)
    if not isinstance(out["synchronous_launches"], bool):
        raise problem("synchronous_launches", f"true or false, got {out['synchronous_launches']!r}")
    host_link = section(field(data, "host_link", "host_link"), "host_link")
    out["host_link"] = {k: positive(field(host_link, k, f"host_link.{k}"), f"host_link.{k}")
                        for k in ("bandwidth", "pageable_bandwidth", "latency")}
    fabric = section(field(data, "fabric", "fabric"), "fabric")
    per_node = field(fabric, "devices_per_node", "fabric.devices_per_node")
    if isinstance(per_node, bool) or not isinstance(per_node, int) or per_node < 1:
        raise problem("fabric.devices_per_node", f"an int >= 1, got {per_node!r}")
    out["fabric"] = {"devices_per_node": per_node}
    for link in ("intra_node", "inter_node"):
        given = section(field(fabric, link, f"fabric.{link}"), f"fabric.{link}")
        out["fabric"][link] = {k: positive(field(given, k, f"fabric.{link}.{k}"), f"fabric.{link}.{k}")
                               for k in ("bandwidth", "latency")}
    # optional: an all_reduce the node's switch reduces (NVLink SHARP), at the bandwidth and latency measured
    for switch in ("switch_reduction_bandwidth", "switch_reduction_latency"):
        out["fabric"][switch] = positive(fabric.get(switch, 0), f"fabric.{switch}")
    # optional: the bytes a collective's chunk pipeline fills before it streams
    out["fabric"]["pipeline_fill"] = positive(fabric.get("pipeline_fill", 0), "fabric.pipeline_fill")
    # optional: the collective library's protocols (csrc/simclock/device_profile.h, CollectiveProtocol)
    protocols = fabric.get("protocols", [])
    if not isinstance(protocols, list):
        raise problem("fabric.protocols", f"a list of protocols, got {protocols!r}")
    out["fabric"]["protocols"] = []
    for i, protocol in enumerate(protocols):
        protocol = section(protocol, f"fabric.protocols[{i}]")
        checked = {"name": protocol.get("name", f"protocol {i}")}
        for key in ("base_latency", "intra_hop", "inter_hop", "bandwidth"):
            name = f"fabric.protocols[{i}].{key}"
            checked[key] = positive(field(protocol, key, name), name)
        if not 0 < checked["bandwidth"] <= 1:
            raise problem(f"fabric.protocols[{i}].bandwidth",
                          f"a fraction of the link's bandwidth in (0, 1], got {checked['bandwidth']!r}")
        out["fabric"]["protocols"].append(checked)
    for bandwidth in ("host_link.bandwidth", "host_link.pageable_bandwidth", "fabric.intra_node.bandwidth",
                      "fabric.inter_node.bandwidth"):
        value = out
        for part in bandwidth.split("."):
            value = value[part]
        if value == 0:
            raise problem(bandwidth, "a bandwidth > 0")
    if "attention" in data:  # optional: fused attention by its own curves, per backend (launch_cost.cpp)
        out["attention"] = _attention_section(section(data["attention"], "attention"), problem, positive)
    if "matrix_units" in data:  # optional: GEMMs priced by waves of output tiles (csrc/simclock/launch_cost.cpp)
        units = section(data["matrix_units"], "matrix_units")
        count = field(units, "count", "matrix_units.count")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise problem("matrix_units.count", f"the number of matrix units, an int >= 1, got {count!r}")

        def is_tile(tile) -> bool:
            return (isinstance(tile, list) and len(tile) == 2
                    and all(isinstance(t, int) and not isinstance(t, bool) and t >= 1 for t in tile))

        if ("tile" in units) == ("tiles" in units):
            raise problem("matrix_units",
                          "one of 'tile' (a unit's output tile [rows, columns]) or 'tiles' (a list of them)")
        tiles = [units["tile"]] if "tile" in units else units["tiles"]
        if not isinstance(tiles, list) or not tiles or not all(is_tile(t) for t in tiles):
            name = "matrix_units.tile" if "tile" in units else "matrix_units.tiles"
            raise problem(name, f"output tiles [rows, columns], two ints >= 1 each, got {units.get('tile', tiles)!r}")
        split_k = units.get("split_k", 1)
        if isinstance(split_k, bool) or not isinstance(split_k, int) or split_k < 1:
            raise problem("matrix_units.split_k", f"how many units may share a tile's K, an int >= 1, got {split_k!r}")
        out["matrix_units"] = {"count": count, "tiles": [list(t) for t in tiles], "split_k": split_k,
                               "tile_overhead": positive(units.get("tile_overhead", 0), "matrix_units.tile_overhead")}
    out["memory_classes"] = _memory_classes(section(data.get("memory_classes", {}), "memory_classes"), problem,
                                            positive)
    given_mta = data.get("multi_tensor_apply", {})
    out["multi_tensor_apply"] = _multi_tensor_apply({} if given_mta is False else section(given_mta, "multi_tensor_apply"),
                                                    problem, enabled=given_mta is not False)
    efficiency = section(field(data, "efficiency", "efficiency"), "efficiency")
    out["efficiency"] = {}
    for name in _EFFICIENCIES:
        value = positive(field(efficiency, name, f"efficiency.{name}"), f"efficiency.{name}")
        if not 0 < value <= 1:
            raise problem(f"efficiency.{name}", f"a fraction of peak in (0, 1], got {value!r}")
        out["efficiency"][name] = value
    # optional: 8-bit GEMMs' and convolutions' own efficiencies, forward and backward (0: the matrix
    # one; a convolution's backward without its own: the convolution's), and a convolution's whose
    # input channels are not a multiple of 8 (0: as the others)
    for name in ("matrix_8bit", "convolution", "convolution_backward", "convolution_unaligned"):
        value = positive(efficiency.get(name, 0), f"efficiency.{name}")
        if value > 1:
            raise problem(f"efficiency.{name}", f"a fraction of peak in (0, 1], got {value!r}")
        out["efficiency"][name] = value
    return out


_PASSES = ("forward", "backward")


def _attention_kernel_shape(curve: dict, where: str, problem) -> dict:
    """A curve's optional tile ([queries, keys] a kernel's block computes), the head dim its rates were
    measured at, and how the rate scales with the head dim ((head_dim / its)^exponent)."""
    out = {}
    if "tile" in curve:
        tile = curve["tile"]
        if (not isinstance(tile, list) or len(tile) != 2
                or not all(isinstance(n, int) and not isinstance(n, bool) and 0 < n <= 1024 for n in tile)):
            raise problem(f"{where}.tile", f"[queries, keys] a block computes, ints in 1..1024, got {tile!r}")
        out["tile"] = tile
    if "head_dim" in curve:
        head_dim = curve["head_dim"]
        if not isinstance(head_dim, int) or isinstance(head_dim, bool) or not 0 < head_dim <= 1024:
            raise problem(f"{where}.head_dim", f"the head dim the rates were measured at, an int in 1..1024, "
                                               f"got {head_dim!r}")
        out["head_dim"] = head_dim
    if "head_dim_exponent" in curve:
        exponent = curve["head_dim_exponent"]
        if not isinstance(exponent, (int, float)) or isinstance(exponent, bool) or not 0 <= exponent <= 2:
            raise problem(f"{where}.head_dim_exponent", f"a number in [0, 2], got {exponent!r}")
        if "head_dim" not in curve:
            raise problem(f"{where}.head_dim_exponent", "needs the head_dim the rates were measured at")
        out["head_dim_exponent"] = float(exponent)
    return out


def _attention_section(attention: dict, problem, positive) -> dict:
    """{"priority": [backend, ...], backend: {pass: curve}}: the backends' curves (a profile's
    top-level forward/backward are the flash backend's) and the order PyTorch tries them in."""
    known = set(kernel_choice.BACKENDS) | set(_PASSES) | {"priority", "rules", "source"}
    for name in attention:
        if name not in known:
            raise problem(f"attention.{name}", f"one of {sorted(known)}")
    out = {}
    curves = {b: attention[b] for b in kernel_choice.BACKENDS if b in attention}
    if any(p in attention for p in _PASSES):
        if "flash" in curves:
            raise problem("attention", "the flash curves once: under 'flash' or at the top, not both")
        curves["flash"] = {p: attention[p] for p in _PASSES if p in attention}
    for backend, given in curves.items():
        if not isinstance(given, dict):
            raise problem(f"attention.{backend}", f"an object of 'forward'/'backward' curves, got {given!r}")
        out[backend] = {}
        for direction, curve in given.items():
            where = f"attention.{backend}.{direction}" if backend in attention else f"attention.{direction}"
            if direction not in _PASSES:
                raise problem(where, "only 'forward' and 'backward' curves")
            if not isinstance(curve, dict):
                raise problem(where, f"an object, got {curve!r}")
            sequence = curve.get("sequence")
            if (not isinstance(sequence, list) or not sequence
                    or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in sequence)
                    or sorted(set(sequence)) != sequence):
                raise problem(f"{where}.sequence", f"increasing sequence lengths, ints > 0, got {sequence!r}")
            out[backend][direction] = {"sequence": sequence}
            for rates in ("flops", "causal_flops"):
                if rates not in curve and rates == "causal_flops":
                    continue
                given_rates = curve.get(rates)
                if not isinstance(given_rates, list) or len(given_rates) != len(sequence):
                    raise problem(f"{where}.{rates}", f"one FLOP/s a sequence length, got {given_rates!r}")
                checked = [positive(r, f"{where}.{rates}") for r in given_rates]
                if min(checked) == 0:
                    raise problem(f"{where}.{rates}", "rates > 0")
                out[backend][direction][rates] = checked
            unknown = set(curve) - {"sequence", "flops", "causal_flops", "tile", "head_dim", "head_dim_exponent", "source"}
            if unknown:
                raise problem(f"{where}.{sorted(unknown)[0]}", "one of sequence, flops, causal_flops, tile, head_dim, "
                                                               "head_dim_exponent")
            out[backend][direction].update(_attention_kernel_shape(curve, where, problem))
    priority = attention.get("priority", ["flash", "efficient", "math", "cudnn"])
    allowed = (*kernel_choice.BACKENDS, "math")
    if (not isinstance(priority, list) or not priority or any(b not in allowed for b in priority)
            or len(set(priority)) != len(priority)):
        raise problem("attention.priority", f"backends from {list(allowed)}, each once, got {priority!r}")
    out["priority"] = priority
    out["rules"] = attention.get("rules", "cuda")
    if out["rules"] not in kernel_choice.RULES:
        raise problem("attention.rules", f"whose SDPA constraints the part follows, one of {list(kernel_choice.RULES)}, "
                                         f"got {out['rules']!r}")
    return out


# A class a profile does not price is priced as its kin (a profile written before the class was
# told apart from it: a column reduction was a reduction, a batch norm a norm), not as plain
# elementwise work.
_CLASS_KIN = {"column_reduction": "reduction", "batch_norm": "norm", "batch_norm_backward": "norm_backward",
              "fused_optimizer": "multi_tensor"}


def _memory_classes(given: dict, problem, positive) -> dict:
    """Every memory class's {traffic, floor, row_step, rate} (csrc/simclock/device_profile.h, ClassCost):
    a class not given is priced as its kin (_CLASS_KIN) or at 1, 0, 0 and 0 (no rate limit)."""
    names = _C._simclock_memory_classes()
    unknown = set(given) - set(names) - {"source"}
    if unknown:
        raise problem(f"memory_classes.{sorted(unknown)[0]}", f"a memory class, one of {names}")
    out = {}
    for name in names:
        cost = given.get(name, {})
        if not isinstance(cost, dict):
            raise problem(f"memory_classes.{name}", f"an object {{traffic, floor, row_step, rate}}, got {cost!r}")
        traffic = positive(cost.get("traffic", 1.0), f"memory_classes.{name}.traffic")
        if not 0.25 <= traffic <= 256:
            raise problem(f"memory_classes.{name}.traffic",
                          f"the traffic its bytes cause, a multiple in [0.25, 256] of them, got {traffic!r}")
        floor = positive(cost.get("floor", 0.0), f"memory_classes.{name}.floor")
        if floor > 1e-3:
            raise problem(f"memory_classes.{name}.floor", f"the least a kernel takes, seconds <= 1e-3, got {floor!r}")
        row_step = positive(cost.get("row_step", 0.0), f"memory_classes.{name}.row_step")
        if row_step > 1e-6:
            raise problem(f"memory_classes.{name}.row_step",
                          f"what each row walked in a chain adds, seconds <= 1e-6, got {row_step!r}")
        rate = positive(cost.get("rate", 0.0), f"memory_classes.{name}.rate")
        if rate and not 1e9 <= rate <= 1e15:
            raise problem(f"memory_classes.{name}.rate",
                          f"the bytes a second the part's units get through, 0 (no limit) or in [1e9, 1e15], got {rate!r}")
        out[name] = {"traffic": traffic, "floor": floor, "row_step": row_step, "rate": rate}
    for name, kin in _CLASS_KIN.items():
        if name in out and name not in given and kin in given:
            out[name] = dict(out[kin], row_step=0.0)
    return out


def _multi_tensor_apply(given: dict, problem, enabled: bool = True) -> dict:
    """How the part's library chunks a list of tensors into kernels: CUDA's own constants by default;
    false in the profile: the part has no multi-tensor kernels (a CPU's _foreach_ ops loop over the
    tensors, a kernel each)."""
    out = {"enabled": enabled, "chunk": given.get("chunk", 65536), "blocks": given.get("blocks", 320),
           "tensors": given.get("tensors", [110, 64, 48, 36, 30])}
    for key in ("chunk", "blocks"):
        if isinstance(out[key], bool) or not isinstance(out[key], int) or out[key] < 1:
            raise problem(f"multi_tensor_apply.{key}", f"an int >= 1, got {out[key]!r}")
    tensors = out["tensors"]
    if (not isinstance(tensors, list) or not tensors
            or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 1 for t in tensors)):
        raise problem("multi_tensor_apply.tensors", f"the most tensors a launch takes by list depth, ints >= 1, "
                                                    f"got {tensors!r}")
    return out


def set_profile(profile: str | os.PathLike | dict | None, *, host_time: str = "modelled") -> None:
    """Simulated time on with `profile` (its clocks start at zero), or off (None).

    host_time: "modelled" (the part's host: the profile's dispatch time per operator
    and launch time per kernel; the timeline is the same on every machine, and the
    same whether kernels run asynchronously, blocking or not at all) or "measured"
    (the program's own time between operators as this machine's CPU took it, added:
    it moves with this machine's speed and load).

    SIMHPU_DEVICE_PROFILE sets it at import, and there the device memory's capacity
    follows the profile unless SIMHPU_MEMORY_LIMIT says otherwise; set at run time,
    the capacity stays what the device started with.
    """
    if host_time not in _HOST_TIME:
        raise ValueError(f"torch.simhpu.set_profile: host_time must be 'measured' or 'modelled', got {host_time!r}")
    if profile is None:
        _C._simclock_set_profile(None)
        return
    checked = load_profile(profile)
    _install_flop_formulas()
    _install_optimizer_host_time()
    _C._simclock_set_host_time(_HOST_TIME[host_time])
    _C._simclock_set_profile(checked)
    _profiles_in_use[checked["name"]] = checked


_optimizer_hooks = None
_optimizer_depth = threading.local()


def _install_optimizer_host_time() -> None:
    """An optimizer step's host time besides its operators (the profile's host_optimizer_overhead a
    parameter tensor with a gradient), charged once a step: an optimizer that steps others (torchtitan's
    container) is counted at the outermost step only."""
    global _optimizer_hooks
    if _optimizer_hooks is not None:
        return

    def before(optimizer, *_):
        depth = getattr(_optimizer_depth, "value", 0)
        _optimizer_depth.value = depth + 1
        name = _C._simclock_profile_name()
        overhead = _profiles_in_use.get(name, {}).get("host_optimizer_overhead", 0.0) if name else 0.0
        if depth == 0 and overhead > 0:
            tensors = sum(p.grad is not None for group in optimizer.param_groups for p in group["params"])
            _C._simclock_add_host_time(overhead * tensors)

    def after(optimizer, *_):
        _optimizer_depth.value = max(0, getattr(_optimizer_depth, "value", 1) - 1)

    _optimizer_hooks = (register_optimizer_step_pre_hook(before), register_optimizer_step_post_hook(after))


def profile() -> str | None:
    """The name of the profile in use, or None while simulated time is off."""
    return _C._simclock_profile_name()


_profiles_in_use: dict[str, dict] = {}
PROJECTED_SCALES = (8, 64, 1024)  # the group sizes a report projects each collective to


@contextlib.contextmanager
def simulate(profile: str | os.PathLike | dict | None = None, *, host_time: str = "modelled",
             execute: bool = True, values: str = "placeholder", tokens_per_step: int | None = None,
             flops_per_token: float | None = None, _keep_capacity: bool = False):
    """Simulated time for the block; yields a Simulation whose report() describes it.

    profile: the profile to use (None: the one set already). Clocks restart at
    zero when a profile is given; the one in use before is restored after.
    execute=False: phantom execution (torch_simhpu/phantom.py): launches are
    priced and placed, no kernel runs, device memory has the profile's capacity
    and is never touched; host reads of values get placeholders (values=
    "placeholder", counted in the report) or raise (values="error"), except
    values the host knows (made from host data, and small kernels over them:
    see torch_simhpu/phantom.py), which are computed and read as ever.
    tokens_per_step: the tokens one optimizer step of this device trains on; the
    report then gives tokens/s per device and the model FLOP utilisation (MFU),
    counting flops_per_token model FLOPs a token (default: 6 x the optimizer's
    parameters, attention's own FLOPs left out).
    """
    for name, value in (("tokens_per_step", tokens_per_step), ("flops_per_token", flops_per_token)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
            raise ValueError(f"torch.simhpu.simulate: {name} must be a number > 0, got {value!r}")
    before = _C._simclock_profile_name()
    before_mode = _C._simclock_host_time()
    if profile is None and before is None:
        raise ValueError("torch.simhpu.simulate: no profile given and none set (pass one, e.g. 'h100-sxm')")
    phantom_here = not execute and not phantom.enabled()
    if phantom_here:  # (first: its synchronisation is not the block's time)
        phantom.start(load_profile(profile) if profile is not None else _profiles_in_use[before], values,
                      keep_capacity=_keep_capacity)  # (torch.simhpu.price: the program's device, as it is)
    try:
        if profile is not None:
            set_profile(profile, host_time=host_time)
    except Exception:
        if phantom_here:
            phantom.stop()
        raise
    name = _C._simclock_profile_name()
    run = Simulation(name)
    run.profile_data = _profiles_in_use[name]
    run.tokens_per_step = tokens_per_step
    run.flops_per_token = flops_per_token
    run._begin()
    try:
        yield run
    finally:
        run._end()
        if phantom_here:
            phantom.stop()
        if profile is not None:
            if before is None:
                _C._simclock_set_profile(None)
            else:
                _C._simclock_set_host_time(before_mode)
                _C._simclock_set_profile(_profiles_in_use[before])


@dataclass(frozen=True, slots=True)  # (a step of a large job logs hundreds of thousands)
class Launch:
    """One launch on the simulated timeline (times in simulated seconds)."""
    id: int
    op: str
    kernel: str
    file: str | None
    line: int
    device: int
    stream: int
    work: str       # vector, matrix, host-to-device, device-to-host, collective, marker
    bound: str      # compute, memory, latency, host-link, fabric, none
    collective: str | None  # its kind, for a collective
    ranks: int
    dtype: torch.dtype | None  # what its FLOPs were priced for
    flops: float
    bytes: float
    peak_fraction: float
    launched: float
    start: float
    end: float
    cause: str      # what its start waited for: stream, event, host or peer (a joined process's rank)
    after: int      # the launch that ended then (-1: the host)

    @property
    def duration(self) -> float:
        return self.end - self.start


# Point-to-point operations (a pipeline's transfers): their collective kind (csrc/runtime/launch_work.cpp),
# and the names their launches and completion markers carry.
_POINT_TO_POINT_KIND, _POINT_TO_POINT_OPS = "send/recv", ("send", "recv")


class Simulation:
    """What a simulate() block recorded; report() prints it."""

    def __init__(self, profile_name: str):
        self.profile = profile_name
        self.profile_data: dict = {}  # the profile as load_profile checked it
        self.launches: list[Launch] = []
        self.begin = 0.0
        self.finish = 0.0
        self._mark = None
        self._projected: dict[tuple, float] = {}  # (collective, bytes, devices) -> seconds, priced at the end
        self.phantom = False  # whether the device's values were computed (see torch_simhpu/phantom.py)
        self.step_ends: list[float] = []  # simulated seconds: when the device finished each optimizer step's work
        self.tokens_per_step: int | None = None
        self.flops_per_token: float | None = None
        self.memory: MemoryBreakdown | str | None = None  # what the device's memory held at its peak
        self._ledger: MemoryLedger | None = None
        self._step_hooks = ()
        self.host_reads: list[phantom.HostRead] = []  # placeholder reads, under phantom execution
        self.known_launches = 0  # kernels run under phantom execution because the host knew their inputs
        self.peer_answers = 0  # of those, collectives answered for simulated peers from this rank's values
        self.routed_histograms = 0  # router histograms given SIMHPU_PHANTOM_ROUTING's distribution

    def _begin(self) -> None:
        self._mark = _C._simclock_start_log()
        self.begin = _C._simclock_host_now()
        device = torch.simhpu.current_device()
        self._ledger = MemoryLedger(device)
        self._ledger.begin()

        # Each optimizer step's end: every launch of the step is made by then, and the
        # device is done with them when its streams' clocks say. An optimizer that steps
        # others (torchtitan's container: one optimizer a pipeline stage's model part) is
        # one step, ended where the outermost ends.
        depth = [0]

        def step_began(optimizer, *_):
            depth[0] += 1

        def step_ended(optimizer, *_):
            depth[0] = max(0, depth[0] - 1)
            self._ledger.mark_optimizer(optimizer)
            if depth[0] == 0:
                self.step_ends.append(_C._simclock_device_now(device))

        self._step_hooks = (register_optimizer_step_pre_hook(step_began),
                            register_optimizer_step_post_hook(step_ended))

    def _end(self) -> None:
        for hook in self._step_hooks:
            hook.remove()
        try:
            torch.simhpu.synchronize()  # the host waits for the device: the block's end
        finally:
            self.finish = _C._simclock_host_now()  # (before the report's own work, which is not the program's)
            self.phantom = phantom.enabled()
            self.host_reads = phantom.host_reads() if self.phantom else []
            self.known_launches = phantom.known_values_launches() if self.phantom else 0
            self.peer_answers = phantom.peer_answers() if self.phantom else 0
            self.routed_histograms = phantom.routed_histograms() if self.phantom else 0
            self.memory = self._ledger.end()
            self.launches = _C._simclock_stop_log(self._mark, Launch)
            for x in self.launches:  # priced while the block's profile is still on
                if x.work == "collective":
                    for n in PROJECTED_SCALES:
                        self._projected[(x.collective, x.bytes, n)] = _C._simclock_collective_seconds(
                            x.collective, x.bytes, n)

    # -- what the report is made of -------------------------------------------------------

    @property
    def span(self) -> float:
        """Simulated seconds from the block's start to the host's end (after it synchronised)."""
        return self.finish - self.begin

    def steps(self) -> list[float]:
        """Simulated seconds of each optimizer step: the device's time from finishing the
        previous step's work (the first: from the block's start) to finishing this one's."""
        ends = [self.begin, *self.step_ends]
        return [b - a for a, b in zip(ends, ends[1:])]

    def step_time(self) -> float | None:
        """The steady step: the mean of the steps after the first (which holds the start-up:
        building, initialising, the first all-gathers), or the only one; None without steps."""
        steps = self.steps()
        if not steps:
            return None
        steady = steps[1:] or steps
        return sum(steady) / len(steady)

    def kernels(self) -> list[Launch]:
        return [x for x in self.launches if x.work != "marker"]

    def busy(self) -> float:
        """Simulated seconds some stream of the device was running a kernel (the union of their spans)."""
        return _measure(_union(self.kernels()))

    def waiting_for_host(self) -> float:
        """Simulated seconds the device (no stream running) sat idle until the host launched its next kernel."""
        return self._idle_until("host")

    def waiting_for_peers(self) -> float:
        """Simulated seconds the device sat idle until a joined peer (another process's rank) reached a
        collective or transfer with it (simulated_ranks.py: joined clocks)."""
        return self._idle_until("peer")

    def _idle_until(self, cause: str) -> float:
        idle, covered_to = 0.0, self.begin
        for x in sorted(self.kernels(), key=lambda k: k.start):
            if x.start > covered_to and x.cause == cause:
                idle += x.start - covered_to
            covered_to = max(covered_to, x.end)
        return idle

    def verdict(self) -> str:
        busy = self.busy()
        if self.span <= 0:
            return "nothing ran"
        if busy / self.span >= 0.5:
            return "device-bound"
        idle = self.span - busy
        if self.waiting_for_peers() >= idle / 2:
            return "peer-bound"
        return "host-bound" if self.waiting_for_host() >= idle / 2 else "wait-bound"

    def operators(self) -> list[dict]:
        """Per operator: launches, simulated time, FLOPs, bytes, what bounds it most, mean fraction of peak."""
        rows: dict[str, dict] = {}
        for x in self.kernels():
            row = rows.setdefault(x.op, {"op": x.op, "launches": 0, "time": 0.0, "flops": 0.0, "bytes": 0.0,
                                         "bounds": collections.Counter(), "peak": 0.0})
            row["launches"] += 1
            row["time"] += x.duration
            row["flops"] += x.flops
            row["bytes"] += x.bytes
            row["bounds"][x.bound] += x.duration
            row["peak"] += x.peak_fraction * x.duration
        for row in rows.values():
            row["bound"] = row["bounds"].most_common(1)[0][0]
            row["peak"] = row["peak"] / row["time"] if row["time"] > 0 else 0.0
        return sorted(rows.values(), key=lambda r: -r["time"])

    def critical_path(self) -> list[Launch]:
        """The chain of launches that set the end: from the last to end, back through what each waited for."""
        by_id = {x.id: x for x in self.launches}
        kernels = self.kernels()
        if not kernels:
            return []
        path = [max(kernels, key=lambda k: k.end)]
        while path[-1].after in by_id:
            path.append(by_id[path[-1].after])
        return path[::-1]

    def collectives(self) -> list[dict]:
        """Each kind and size of collective: its simulated time here and projected at PROJECTED_SCALES devices."""
        rows: dict[tuple, dict] = {}
        for x in self.launches:
            if x.work != "collective":
                continue
            row = rows.setdefault((x.collective, x.bytes, x.ranks),
                                  {"collective": x.collective, "bytes": x.bytes, "ranks": x.ranks, "count": 0,
                                   "time": x.duration})
            row["count"] += 1
        for row in rows.values():
            row["projected"] = {n: self._projected[(row["collective"], row["bytes"], n)] for n in PROJECTED_SCALES}
        return list(rows.values())

    def steady_window(self) -> tuple[float, float, int]:
        """(start, end, steps) of the device time the steady figures are taken over: the steps
        after the first, or the only step, or the whole block without steps."""
        if len(self.step_ends) >= 2:
            return self.step_ends[0], self.step_ends[-1], len(self.step_ends) - 1
        if self.step_ends:
            return self.begin, self.step_ends[0], 1
        return self.begin, max([self.finish, *(x.end for x in self.kernels())]), 1

    def communication(self) -> dict:
        """Per step of the steady window: seconds some collective ran, and the exposed part of
        them, when no compute kernel ran beside it (what overlapping would still have to hide)."""
        start, end, steps = self.steady_window()
        comm = _union(x for x in self.kernels() if x.work == "collective")
        compute = _union(x for x in self.kernels() if x.work in ("vector", "matrix"))
        total = _measure(_clip(comm, start, end))
        exposed = _measure(_subtract(_clip(comm, start, end), _clip(compute, start, end)))
        return {"time": total / steps, "exposed": exposed / steps, "window": (end - start) / steps}

    def pipeline_bubble(self) -> dict | None:
        """Per step of the steady window: seconds no compute kernel ran because this rank waited for
        a joined peer, on a rank that sends or receives (a pipeline stage's receive from the stage
        before it, or its send's partner): a compute gap counts when the launch that ended it
        waited, through the events and streams it was ordered after, on work whose start a joined
        peer delayed into the gap. None when no joined peer held compute up (one process, or no
        pipeline)."""
        return self._compute_held_by_peers() if self._transfers() else None

    def collective_waits(self) -> dict | None:
        """As pipeline_bubble, on a rank that neither sends nor receives: compute held up while a
        collective waited for a slower joined peer (an expert-parallel exchange waiting for the
        rank whose experts got the most tokens)."""
        return None if self._transfers() else self._compute_held_by_peers()

    def _transfers(self) -> bool:
        return any(x.collective == _POINT_TO_POINT_KIND or x.op in _POINT_TO_POINT_OPS for x in self.launches)

    def _compute_held_by_peers(self) -> dict | None:
        start, end, steps = self.steady_window()
        by_id = {x.id: x for x in self.launches}
        compute = [x for x in self.kernels() if x.work in ("vector", "matrix")]
        starting = {}
        for x in compute:  # the compute launch that ends each gap: the first to start at its end
            starting.setdefault(x.start, x)
        held, gaps = 0.0, 0
        for gap_start, gap_end in _subtract([(start, end)], _clip(_union(compute), start, end)):
            x = starting.get(gap_end)
            while x is not None and x.start > gap_start and x.cause in ("event", "stream", "peer"):
                if x.cause == "peer":
                    held += gap_end - gap_start
                    gaps += 1
                    break
                x = by_id.get(x.after)
        if not gaps:
            return None
        return {"time": held / steps, "gaps": gaps / steps, "window": (end - start) / steps}

    def peak_flops(self) -> tuple[float, torch.dtype | None]:
        """The profile's matrix peak (FLOP/s) for the dtype that did most of the matrix FLOPs."""
        table = self.profile_data["matrix_flops"]
        by_dtype = collections.Counter()
        for x in self.kernels():
            if x.work == "matrix" and x.dtype is not None:
                by_dtype[x.dtype] += x.flops
        dtype = by_dtype.most_common(1)[0][0] if by_dtype else None
        return table.get(dtype, table[torch.float32]), dtype

    def utilisation(self) -> dict:
        """FLOP rates over the steady window against the profile's peak: `hardware` counts every
        kernel's FLOPs (recomputation included); `model` (MFU) counts flops_per_token x
        tokens_per_step a step, when the tokens were given."""
        start, end, steps = self.steady_window()
        peak, dtype = self.peak_flops()
        done = sum(x.flops for x in self.kernels() if start < x.end <= end and x.work in ("vector", "matrix"))
        out = {"peak": peak, "dtype": dtype, "hardware": done / (end - start) / peak if end > start else 0.0,
               "model": None, "flops_per_token": None}
        step = self.step_time()
        per_token = self.flops_per_token
        if per_token is None and isinstance(self.memory, MemoryBreakdown) and self.memory.parameters_counted:
            per_token = 6.0 * self.memory.parameters_counted
        if self.tokens_per_step and step and per_token:
            out["model"] = per_token * self.tokens_per_step / step / peak
            out["flops_per_token"] = per_token
        return out

    def critical_path_breakdown(self) -> dict[str, float]:
        """Simulated seconds of the critical path by what took them: compute, communication,
        copies, and the gaps where its next launch waited for the host or for a joined peer."""
        path = self.critical_path()
        out = dict.fromkeys(("compute", "communication", "copies", "host", "peers"), 0.0)
        previous_end = self.begin
        for x in path:
            kind = {"vector": "compute", "matrix": "compute", "collective": "communication"}.get(x.work, "copies")
            out[kind] += x.duration
            if x.cause in ("host", "peer"):
                out[{"host": "host", "peer": "peers"}[x.cause]] += max(0.0, x.start - previous_end)
            previous_end = x.end
        return out

    def _planner_lines(self) -> list[str]:
        lines = []
        use = self.utilisation()
        if self.step_ends:
            text = (f"FLOP utilisation over the steady step(s): {use['hardware'] * 100:.1f}% of the "
                    f"{use['peak'] / 1e12:,.0f} TFLOP/s {_dtype_name(use['dtype'])} matrix peak (every kernel's FLOPs)")
            if use["model"] is not None:
                counted = ("flops_per_token" if self.flops_per_token else
                           f"6 x {_count(self.memory.parameters_counted)} parameters, attention's own left out")
                text += f"; MFU {use['model'] * 100:.1f}% ({_si(use['flops_per_token'])}FLOP a token: {counted})"
            lines.append(text)
        comm = self.communication()
        if comm["time"] > 0:
            lines.append(f"communication a step: {_t(comm['time'])}, exposed (no compute beside it) "
                         f"{_t(comm['exposed'])} = {_pct(comm['exposed'], comm['window'])} of the step")
        bubble = self.pipeline_bubble()
        if bubble is not None:
            lines.append(f"pipeline bubble a step: {_t(bubble['time'])} = {_pct(bubble['time'], bubble['window'])} "
                         f"of the step, no compute while waiting for a joined peer ({bubble['gaps']:.0f} gaps)")
        waits = self.collective_waits()
        if waits is not None:
            lines.append(f"waiting for slower joined peers at collectives a step: {_t(waits['time'])} = "
                         f"{_pct(waits['time'], waits['window'])} of the step, no compute meanwhile "
                         f"({waits['gaps']:.0f} gaps)")
        if isinstance(self.memory, MemoryBreakdown):
            m = self.memory
            verdict = "fits" if m.peak <= m.capacity else "does not fit"
            lines.append(f"memory at its peak: {_bytes(m.peak)} of {_bytes(m.capacity)} ({_pct(m.peak, m.capacity)}, "
                         f"{verdict}; the allocator reserved up to "
                         f"{_bytes(torch.simhpu.max_memory_reserved(m.device))})")
            for name, size in m.by_category.items():
                lines.append(f"  {name:<28} {_bytes(size):>12} {_pct(size, m.peak):>6}")
        elif self.memory:
            lines.append(f"memory by category: not available: {self.memory}")
        return lines

    def _step_lines(self) -> list[str]:
        step = self.step_time()
        if step is None:
            return []
        steps = self.steps()
        line = (f"{len(steps)} optimizer step(s); the step: {_t(step)}"
                + (f" (the mean of steps 2-{len(steps)}; the first took {_t(steps[0])})" if len(steps) > 1 else ""))
        if self.tokens_per_step:
            line += f"; {self.tokens_per_step / step:,.0f} tokens/s per device"
        return [line]

    def write_html(self, path: str | os.PathLike, top: int = 20) -> Path:
        """The report as an HTML page at `path`, with the timeline and a roofline plot (simulation_html.py)."""
        from torch_simhpu import simulation_html

        return simulation_html.write(self, path, top)

    def _phantom_words(self) -> str:
        if not self.phantom:
            return ""
        if not self.known_launches:
            return ", phantom: none ran"
        peers = (f" ({self.peer_answers} collectives answered as if every simulated peer sent what this rank sends)"
                 if self.peer_answers else "")
        return f", phantom: {self.known_launches} ran, over values the host knew{peers}"

    def report(self, top: int = 20) -> str:
        busy = self.busy()
        rank = os.environ.get("RANK")
        lines = [("" if rank is None else f"[rank {rank}] ") +
                 f"simulated on {self.profile}: {_t(self.span)} from the block's start to its end "
                 f"({len(self.kernels())} kernels{self._phantom_words()})",
                 f"device busy {_pct(busy, self.span)}, idle waiting for the host's launches "
                 f"{_pct(self.waiting_for_host(), self.span)}"
                 + (f", for joined peers {_pct(self.waiting_for_peers(), self.span)}"
                    if self.waiting_for_peers() > 0 else "") + f": {self.verdict()}",
                 *self._step_lines(),
                 *self._planner_lines(),
                 "",
                 f"{'operator':<44} {'launches':>8} {'time':>10} {'share':>6} {'bound':>9} {'of peak':>8}"]
        ops = self.operators()
        for row in ops[:top]:
            lines.append(f"{row['op'][:44]:<44} {row['launches']:>8} {_t(row['time']):>10} "
                         f"{_pct(row['time'], busy):>6} {row['bound']:>9} {row['peak'] * 100:>7.1f}%")
        if len(ops) > top:
            lines.append(f"... {len(ops) - top} more operators")
        path = self.critical_path()
        if path:
            on_path = collections.Counter()
            for x in path:
                on_path[x.op] += x.duration
            streams = sorted({(x.device, x.stream) for x in path})
            lines += ["", f"critical path: {len(path)} launches over {len(streams)} stream(s), "
                          f"{_t(sum(x.duration for x in path))} of kernels, starting when the host launched "
                          f"{path[0].op} at {_t(path[0].launched - self.begin)}; most of it:"]
            split = self.critical_path_breakdown()
            lines.append("  by kind: " + ", ".join(f"{kind} {_t(seconds)}" for kind, seconds in split.items()
                                                    if seconds > 0 or kind != "peers"))
            for op, seconds in on_path.most_common(5):
                lines.append(f"  {op:<44} {_t(seconds):>10}")
        coll = self.collectives()
        if coll:
            lines += ["", f"{'collective':<16} {'bytes':>12} {'count':>6} {'here':>16} "
                          + " ".join(f"{f'at {n}':>10}" for n in coll[0]["projected"])]
            for row in coll:
                here = f"{_t(row['time'])} ({row['ranks']})"
                lines.append(f"{row['collective']:<16} {row['bytes']:>12.0f} {row['count']:>6} {here:>16} "
                             + " ".join(f"{_t(s):>10}" for s in row["projected"].values()))
        if self.host_reads:
            reads = sum(r.count for r in self.host_reads)
            lines += ["", f"host reads of device values: {reads}, answered with placeholders (phantom execution);"
                          " what the program did with them is not what it would do with the real values:"]
            for r in sorted(self.host_reads, key=lambda r: -r.count)[:top]:
                lines.append(f"  {r.file}:{r.line} {r.op} x{r.count}")
        if self.routed_histograms:
            lines += ["", f"routing (SIMHPU_PHANTOM_ROUTING): {phantom.routing_setting()}, given to "
                          f"{self.routed_histograms} router histogram(s) over tokens no value of which was computed"]
        return "\n".join(lines)


def _t(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.2f} us"


def _si(n: float) -> str:
    """3.2e11 -> '320.0 G' (for FLOPs and counts)."""
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:,.2f} {prefix}"
    return f"{n:,.0f} "


def _count(n: int) -> str:
    for word, scale in (("billion", 1e9), ("million", 1e6)):
        if n >= scale:
            return f"{n / scale:,.2f} {word}"
    return f"{n:,}"


def _bytes(n: float) -> str:
    return _format_bytes(n)


def _dtype_name(dtype: torch.dtype | None) -> str:
    return str(dtype).removeprefix("torch.") if dtype is not None else "float32"


def _union(launches) -> list[tuple[float, float]]:
    """The launches' [start, end) spans merged: sorted, disjoint."""
    merged: list[list[float]] = []
    for start, end in sorted((x.start, x.end) for x in launches if x.end > x.start):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def _clip(spans: list[tuple[float, float]], start: float, end: float) -> list[tuple[float, float]]:
    return [(max(a, start), min(b, end)) for a, b in spans if b > start and a < end]


def _subtract(spans: list[tuple[float, float]], holes: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """What of the disjoint sorted `spans` no span of the disjoint sorted `holes` covers."""
    out, i = [], 0
    for a, b in spans:
        while i < len(holes) and holes[i][1] <= a:
            i += 1
        j, cursor = i, a
        while j < len(holes) and holes[j][0] < b:
            if holes[j][0] > cursor:
                out.append((cursor, holes[j][0]))
            cursor = max(cursor, holes[j][1])
            j += 1
        if cursor < b:
            out.append((cursor, b))
    return out


def _measure(spans: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in spans)


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole > 0 else "-"


# -- FLOP formulas for reference-path operators -------------------------------------------

_formulas_installed = False


# Fused attention operators: (pass: 1 forward, 2 backward; the index of is_causal in their arguments).
_ATTENTION = {
    "aten::_scaled_dot_product_flash_attention_for_cpu": (1, 4),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": (2, 7),
    "aten::_scaled_dot_product_flash_attention": (1, 4),
    "aten::_scaled_dot_product_flash_attention_backward": (2, 11),
    "aten::_scaled_dot_product_efficient_attention": (1, 6),
    "aten::_scaled_dot_product_cudnn_attention": (1, 6),
}


def _attention(name: str, args: list) -> tuple[int, bool, int, int, int] | None:
    """(pass, causal, the keys' sequence length, the head dim, the queries' sequence length) of a fused
    attention kernel, for its curve and its tiles (launch_cost.cpp)."""
    if name not in _ATTENTION:
        return None
    direction, causal_at = _ATTENTION[name]
    try:
        # (a backward's first argument is the output's gradient)
        query, key = (args[1], args[2]) if direction == 2 else (args[0], args[1])
        causal = bool(args[causal_at]) if causal_at < len(args) else False
        return direction, causal, int(key.shape[-2]), int(query.shape[-1]), int(query.shape[-2])
    except (AttributeError, IndexError, TypeError, ValueError):
        return None


def _attention_backend(name: str, args: list) -> str:
    """The SDPA backend the profile's part would take for this fused attention launch."""
    profile = _profiles_in_use.get(_C._simclock_profile_name() or "", {})
    priority = profile.get("attention", {}).get("priority", ["flash"])
    rules = profile.get("attention", {}).get("rules", "cuda")
    query = args[1] if _ATTENTION[name][0] == 2 else args[0]
    mask_at = {"aten::_scaled_dot_product_flash_attention_for_cpu": 5,
               "aten::_scaled_dot_product_flash_attention_for_cpu_backward": 8}.get(name)
    masked = mask_at is not None and mask_at < len(args) and isinstance(args[mask_at], torch.Tensor)
    try:
        return kernel_choice.attention_backend(priority, query.dtype, int(query.shape[-1]), masked=masked, rules=rules)
    except (AttributeError, IndexError, TypeError, ValueError):
        return priority[0] if priority[0] != "math" else "flash"


def _tf32(name: str, args: list) -> bool:
    """A float32 matmul or convolution the program lets the part run in TF32."""
    tensors = [a for a in args[:3] if isinstance(a, torch.Tensor)]
    if not tensors or tensors[0].dtype != torch.float32:
        return False
    return kernel_choice.tf32_allowed(convolution="convolution" in name)


def _gemm_shape(name: str, args: list, outputs: list) -> tuple[int, int, int, int] | None:
    """(batch, m, n, k) of the GEMM an operator is, for the matrix units' waves (launch_cost.cpp)."""
    try:
        if name in ("aten::mm", "aten::_scaled_mm"):
            a, b = args[0].shape, args[1].shape
            return 1, a[0], b[1], a[1]
        if name == "aten::addmm":
            a, b = args[1].shape, args[2].shape
            return 1, a[0], b[1], a[1]
        if name in ("aten::bmm", "aten::baddbmm"):
            a, b = (args[0].shape, args[1].shape) if name == "aten::bmm" else (args[1].shape, args[2].shape)
            return a[0], a[1], b[2], a[2]
        if name == "aten::convolution" and not args[6]:  # an implicit GEMM: an output pixel a row
            weight, out, groups = args[1].shape, outputs[0].shape, int(args[8])
            return groups, out[0] * math.prod(out[2:]), weight[0] // groups, math.prod(weight[1:])
    except (AttributeError, IndexError, TypeError, ValueError):
        pass
    return None


def _unaligned_channels(name: str, args: list) -> bool:
    """Whether a convolution's input channels (a group's, the weight's second dimension) are not a
    multiple of 8, which the part's tensor-core kernels need (an image's 3 colours: a stem, a patch embedding)."""
    try:
        weight = args[2] if "backward" in name else args[1]
        return int(weight.shape[1]) % 8 != 0
    except (AttributeError, IndexError, TypeError, ValueError):
        return False


def _shapes(value):
    """Tensors as their shapes, through lists and tuples: what flop_counter's formulas take.
    Done here rather than by its wrapper, whose pytree walk makes reference cycles (a closure
    a call): garbage that stays for a program that turns the collector off, as torchtitan
    does between its periodic collections, and a launch's worth each launch."""
    if isinstance(value, torch.Tensor):
        return value.shape
    if isinstance(value, list):
        return [_shapes(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_shapes(v) for v in value)
    return value


def _install_flop_formulas() -> None:
    """The reference path asks torch.utils.flop_counter's formulas for the operators it has one for."""
    global _formulas_installed
    if _formulas_installed:
        return
    from torch.utils.flop_counter import flop_registry, sdpa_backward_flop_count, sdpa_flop_count

    by_name = {packet._qualified_op_name: formula for packet, formula in flop_registry.items()
               if isinstance(packet, torch._ops.OpOverloadPacket)}
    # The device's fused attention runs the CPU's flash kernels (csrc/aten/fused_attention.cpp),
    # which flop_counter does not list: the same count as the other fused attention kernels.
    by_name["aten::_scaled_dot_product_flash_attention_for_cpu"] = (
        lambda query, key, value, *args, out_val=None, **kwargs: sdpa_flop_count(query.shape, key.shape, value.shape))
    by_name["aten::_scaled_dot_product_flash_attention_for_cpu_backward"] = (
        lambda grad_out, query, key, value, *args, out_val=None, **kwargs:
        sdpa_backward_flop_count(grad_out.shape, query.shape, key.shape, value.shape))

    def flops(name: str, args: list, kwargs: dict, outputs: list):
        try:
            out = outputs[0] if len(outputs) == 1 else tuple(outputs)
            formula = by_name[name]
            on_shapes = getattr(formula, "__wrapped__", None)  # (flop_counter's shape_wrapper; see _shapes)
            if on_shapes is not None:
                counted = float(on_shapes(*_shapes(args), out_shape=_shapes(out),
                                          **{k: _shapes(v) for k, v in kwargs.items()}))
            else:
                counted = float(formula(*args, **kwargs, out_val=out))
        except Exception:  # noqa: BLE001 - a formula that cannot read this call: priced as vector work
            return None
        shape, attention = _gemm_shape(name, args, outputs), _attention(name, args)
        described = {}
        if shape is not None:
            described["gemm"] = shape
        elif attention is not None:
            backend = _attention_backend(name, args)
            if backend == "math":  # the part runs it unfused: matrix work at the GEMMs' rate
                return counted
            direction, causal, keys, head_dim, queries = attention
            described["attention"] = (direction, causal, keys, kernel_choice.BACKENDS.index(backend), head_dim, queries)
        if _tf32(name, args):
            described["tf32"] = True
        if "convolution" in name:  # (cuDNN's kernels: the profile's convolution efficiency, not a GEMM's waves)
            described["convolution"] = True
            if "backward" in name:  # (its data and weight gradients: kernels of their own, at their own efficiency)
                described["convolution_backward"] = True
            if _unaligned_channels(name, args):
                described["convolution_unaligned"] = True
        return (counted, described) if described else counted

    _C._simclock_set_flop_formula(flops, sorted(by_name))
    _C._simclock_set_op_classes(kernel_choice.op_classes())
    _formulas_installed = True


def _start_from_environment() -> None:
    """SIMHPU_DEVICE_PROFILE=NAME|PATH (SIMHPU_SIMULATED_HOST_TIME=measured|modelled)."""
    value = os.environ.get("SIMHPU_DEVICE_PROFILE", "").strip()
    if not value:
        if _run_as_the_command():
            phantom.execution_off_in_environment()  # (a bad value is refused now; main() applies a good one)
            return  # (the command's --profile prices the launches: main() starts phantom execution with it)
        phantom._start_from_environment(None)  # (SIMHPU_EXECUTE=0 alone is an error)
        return
    checked = load_profile(value)
    if not os.environ.get("SIMHPU_MEMORY_LIMIT"):
        os.environ["SIMHPU_MEMORY_LIMIT"] = str(int(checked["memory_capacity"]))  # read at the device's first use
    set_profile(checked, host_time=os.environ.get("SIMHPU_SIMULATED_HOST_TIME", "modelled").strip() or "modelled")
    phantom._start_from_environment(checked)


def _run_as_the_command() -> bool:
    """Whether this process is `python -m torch_simhpu.simulation ...`, which names its profile on its
    command line (its import of the package comes before main() reads it)."""
    argv = list(getattr(sys, "orig_argv", ()))
    return any(a == "-m" and b == __name__ for a, b in zip(argv, argv[1:]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torch_simhpu.simulation",
        description="Run a script with simulated time on and print where the modelled part spends it.")
    parser.add_argument("--profile", required=True, help=f"a shipped profile ({', '.join(profiles())}) or a path")
    parser.add_argument("--host-time", choices=sorted(_HOST_TIME), default="modelled",
                        help="modelled (the default): the part's host time per operator and launch, the same on "
                             "every machine; measured: the script's own time between operators here, added")
    parser.add_argument("--top", type=int, default=20, help="operators listed (by simulated time)")
    parser.add_argument("--execute", action=argparse.BooleanOptionalAction, default=None,
                        help="run the kernels (--no-execute: phantom execution, see torch_simhpu/phantom.py; "
                             "the default without --world)")
    parser.add_argument("--world", type=int, help="simulated ranks: play one rank of a world this large "
                                                  "(see torch_simhpu/simulated_ranks.py; phantom execution)")
    parser.add_argument("--rank", default="0",
                        help="the rank this process plays, with --world; several (0,8 or 0-3): one process each, "
                             "their clocks joined, so a late rank delays its peers (pipeline stages)")
    parser.add_argument("--tokens-per-step", type=int, help="tokens one optimizer step trains on, per device: "
                                                               "the report gives tokens/s")
    parser.add_argument("--flops-per-token", type=float,
                        help="model FLOPs a token, for MFU (default: 6 x the optimizer's parameters)")
    parser.add_argument("--html", help="also write the report as an HTML page here (timeline, roofline, memory)")
    parser.add_argument("--values", choices=sorted(phantom.VALUES), default="placeholder",
                        help="what host reads of device values get under --no-execute")
    parser.add_argument("script", nargs="?", help="the script (or -m MODULE, as python takes it: -m torchtitan.train)")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    argv = list(sys.argv[1:] if argv is None else argv)
    options = None
    if "-m" in argv[:-1]:  # -m MODULE ARGS...: what follows the module is its own
        at = argv.index("-m")
        head = parser.parse_args(argv[:at])
        if head.script is None:
            options = head
            options.module, options.args = argv[at + 1], argv[at + 2:]
    if options is None:
        options = parser.parse_args(argv)
        options.module = None
        if options.script is None:
            parser.error("give a script to run, or -m and a module")
    if options.world is not None:
        if options.execute:
            parser.error("--world runs under phantom execution: the absent ranks compute no values (drop --execute)")
        try:
            ranks = simulated_ranks.parse_ranks(options.rank, options.world, what="--rank")
        except ValueError as error:
            parser.error(str(error))
        if len(ranks) > 1 and simulated_ranks.JOINED_RANKS not in os.environ:
            from torch_simhpu.simulation import joined_run

            return joined_run.run(argv, ranks, options.module, options.script, options.args, options.html)
        if len(ranks) > 1:  # one of the processes joined_run forked: its rank is in the environment
            ranks = [int(os.environ[simulated_ranks.RANK])]
            if options.html:
                page = Path(options.html)
                options.html = str(page.with_name(f"{page.stem}.rank{ranks[0]}{page.suffix}"))
        simulated_ranks.start(options.world, ranks[0])
        options.execute = False
    elif options.rank != "0":
        parser.error("--rank needs --world")
    if options.execute is None and phantom.execution_off_in_environment():
        options.execute = False  # (SIMHPU_EXECUTE=0 beside the command's --profile: phantom execution on it)
    sys.argv = [options.script or options.module, *options.args]
    with simulate(options.profile, host_time=options.host_time, execute=options.execute is not False,
                  values=options.values, tokens_per_step=options.tokens_per_step,
                  flops_per_token=options.flops_per_token) as run:
        try:
            if options.module is not None:
                runpy.run_module(options.module, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(options.script, run_name="__main__")
        except SystemExit as exit_:
            if exit_.code not in (None, 0):
                raise
    print(run.report(options.top))
    if options.html:
        print(f"report written to {run.write_html(options.html, options.top)}")
        from torch_simhpu.simulation import joined_run

        joined_run.save_page(run, options.top)
    return 0
