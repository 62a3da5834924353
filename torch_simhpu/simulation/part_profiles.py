"""Device profiles: the shipped ones and the user's, read, merged with their base and checked
field by field (ProfileError names the file and the field); set_profile puts one in use on the
simulated clocks (csrc/simclock).
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch

from torch_simhpu import _C
from torch_simhpu.simulation import kernel_choice, part_family


PROFILE_DIR = Path(__file__).parent / "profiles"

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
    return merged_with_base(inherited, data, base, str(path))


def _die_of(profile: dict, where: str) -> tuple[int, float] | None:
    """A profile's die (SMs, boost clock in Hz), or None where it states none; one malformed is
    refused, naming the file and the field."""
    die = profile.get("die")
    if die is None:
        return None
    if not isinstance(die, dict) or set(die) - {"sms", "boost_clock", "source"}:
        raise ProfileError(f"{where}: field 'die': expected {{\"sms\": an int, \"boost_clock\": Hz}}, got {die!r}")
    sms, clock = die.get("sms"), die.get("boost_clock")
    if isinstance(sms, bool) or not isinstance(sms, int) or not 1 <= sms <= 4096:
        raise ProfileError(f"{where}: field 'die.sms': expected the SMs (compute units) enabled, an int in "
                           f"1..4096, got {sms!r}")
    if isinstance(clock, bool) or not isinstance(clock, (int, float)) or not 1e8 <= clock <= 1e10:
        raise ProfileError(f"{where}: field 'die.boost_clock': expected the units' clock in Hz, in [1e8, 1e10], "
                           f"got {clock!r}")
    return sms, float(clock)


def merged_with_base(base: dict, own: dict, base_name: str, where: str) -> dict:
    """A profile's own fields (its JSON less 'inherits') over its base's: the base's compute first
    scaled to the profile's die where it states another (part_family), the sources of both."""
    die, base_die = _die_of(own, where), _die_of(base, base_name)
    if die and base_die and die != base_die:
        base = part_family.scaled_to_die(base, die, base_die)
    merged = _merged(base, own)
    merged["sources"] = [*own.get("sources", []), *(f"(from {base_name}) {s}" for s in base.get("sources", []))]
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
            raise problem(path, "it to be present (see torch_simhpu/simulation/profiles/h100-sxm.json for every field)")
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
    # optional: the host's time a line of the program's own Python takes besides the operators it calls
    # (simulation/python_lines.py counts them), as measured on a row of nn.Module code
    out["host_python_line"] = positive(data.get("host_python_line", 0), "host_python_line")
    if out["host_python_line"] > 1e-4:
        raise problem("host_python_line", f"seconds a line, <= 1e-4, got {out['host_python_line']!r}")
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
    # optional: what an element of a channels-first 16-bit convolution's tensors takes to convert to and
    # from the channels-last layout the part's library's kernels run (cuDNN's tensor-core kernels)
    out["convolution_layout_conversion"] = positive(data.get("convolution_layout_conversion", 0),
                                                    "convolution_layout_conversion")
    if out["convolution_layout_conversion"] > 1e-9:
        raise problem("convolution_layout_conversion",
                      f"seconds an element, <= 1e-9, got {out['convolution_layout_conversion']!r}")
    # optional: what an elementwise kernel whose operands do not all lie as its output does takes to
    # compute an operand's offset for an element (PyTorch's generic elementwise kernel on a GPU)
    out["strided_elementwise"] = positive(data.get("strided_elementwise", 0), "strided_elementwise")
    if out["strided_elementwise"] > 1e-9:
        raise problem("strided_elementwise",
                      f"seconds an operand's element, <= 1e-9, got {out['strided_elementwise']!r}")
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
    # optional: the die's SMs and clock, which a part of its family inheriting this profile scales by
    die = _die_of(data, where)
    if die:
        out["die"] = {"sms": die[0], "boost_clock": die[1]}
        if "matrix_units" in out and out["matrix_units"]["count"] != die[0]:
            raise problem("matrix_units.count", f"the die's SMs (die.sms = {die[0]}), got {out['matrix_units']['count']!r}")
    out["memory_classes"] = _memory_classes(section(data.get("memory_classes", {}), "memory_classes"), problem,
                                            positive)
    given_mta = data.get("multi_tensor_apply", {})
    out["multi_tensor_apply"] = _multi_tensor_apply({} if given_mta is False else section(given_mta, "multi_tensor_apply"),
                                                    problem, enabled=given_mta is not False)
    given_rows = data.get("softmax_rows", {})
    out["softmax_rows"] = _softmax_rows({} if given_rows is False else section(given_rows, "softmax_rows"),
                                        problem, enabled=given_rows is not False)
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
    measured at, how the rate scales with the head dim ((head_dim / its)^exponent), the time a wave of
    its blocks takes besides its FLOPs and the rate grouped-query calls attain (a multiple of its)."""
    out = {}

    def number(name: str, low: float, high: float, meaning: str) -> None:
        value = curve[name]
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not low <= value <= high:
            raise problem(f"{where}.{name}", f"{meaning}, in [{low:g}, {high:g}], got {value!r}")
        out[name] = float(value)
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
        number("head_dim_exponent", 0, 2, "a number")
        if "head_dim" not in curve:
            raise problem(f"{where}.head_dim_exponent", "needs the head_dim the rates were measured at")
    if "wave_time" in curve:
        number("wave_time", 0, 1e-4, "seconds a wave of the kernel's blocks takes besides its FLOPs")
    if "grouped_rate" in curve:
        number("grouped_rate", 0.25, 4, "the rate grouped-query attention attains as a multiple of the curve's")
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
            unknown = set(curve) - {"sequence", "flops", "causal_flops", "tile", "head_dim", "head_dim_exponent",
                                    "wave_time", "grouped_rate", "source"}
            if unknown:
                raise problem(f"{where}.{sorted(unknown)[0]}", "one of sequence, flops, causal_flops, tile, head_dim, "
                                                               "head_dim_exponent, wave_time, grouped_rate")
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
              "fused_optimizer": "multi_tensor", "softmax_backward": "softmax", "softmax_in_registers": "softmax",
              "widening_copy": "copy", "batch_norm_channels_last": "batch_norm",
              "batch_norm_channels_last_backward": "batch_norm_backward", "concatenation": "copy"}


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
                          f"what each row adds (walked in a chain, or a block's), seconds <= 1e-6, got {row_step!r}")
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


def _softmax_rows(given: dict, problem, enabled: bool = True) -> dict:
    """Which kernel the part's softmax runs rows of a length with (csrc/simclock/device_profile.h,
    SoftmaxRows): PyTorch's CUDA constants by default; false in the profile: one kernel for every
    length (a CPU's)."""
    defaults = {"warp_elements": 2048, "warp_bytes": 8192, "register_elements": 9216}
    unknown = set(given) - set(defaults) - {"source"}
    if unknown:
        raise problem(f"softmax_rows.{sorted(unknown)[0]}", f"one of {sorted(defaults)}")
    out = {"enabled": enabled}
    for key, default in defaults.items():
        out[key] = given.get(key, default)
        if isinstance(out[key], bool) or not isinstance(out[key], int) or out[key] < 1:
            raise problem(f"softmax_rows.{key}", f"an int >= 1, got {out[key]!r}")
    return out


# Every profile set on the clocks (set_profile), by name: what pricing and the FLOP formulas read back.
_profiles_in_use: dict[str, dict] = {}
