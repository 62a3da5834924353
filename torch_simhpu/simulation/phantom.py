"""Phantom execution: the program runs, the device does not.

    with torch.simhpu.simulate("h100-sxm", execute=False) as sim:
        train_step()          # every launch priced and placed on the simulated clocks; no kernel runs
    print(sim.report())

    SIMHPU_DEVICE_PROFILE=h100-sxm SIMHPU_EXECUTE=0 python train.py

Device memory is handed out as ever, with the profile's capacity, and never
touched: an 80 GB part "allocates" on a machine with less, and runs out of
memory where the part would (torch.OutOfMemoryError, memory_summary() and
snapshots as usual). What the host reads of device values (.item(), .cpu(),
.tolist(), print) gets placeholder values (ones for floating point, so nothing divides by
zero; zeros for integers, so an offset or RNG state read back is valid; False
for bool, so a loop that runs while any element is flagged ends), each read
counted with its Python line in the report; values="error" raises at the first
instead. An operator that needs device values on the host to compute (one whose
result's shape depends on them, as nonzero's or a boolean mask's) is refused,
naming it.

Values the host knows stay known. A tensor made from host data (torch.tensor,
arange, full, a copy of a CPU tensor) and whatever small kernels compute from such
tensors alone keep their values: each kernel whose inputs are all known and that
holds at most SIMHPU_PHANTOM_KNOWN_BYTES of device memory (1 MiB by default; 0:
none) runs as ever, and a read of what it wrote is the truth, not a placeholder,
and not counted. So a pipeline schedule's shapes, split sizes the program computed,
a mask over arange, run unchanged; a kernel over anything else (a model's weights
made by a large init, activations) does not run, and what it writes is unknown.

Routing you state. A mixture-of-experts router counts its tokens per expert
(torch.histc) over values nobody knows; under phantom execution that histogram is
SIMHPU_PHANTOM_ROUTING's distribution of the tokens counted, and known from then on,
so split sizes, offsets and what a grouped GEMM or an all_to_all moves follow from
it: "balanced" (the default: as even as whole tokens allow), "zipf:S" (expert i
gets a share proportional to 1/(i+1)^S: S=0 is balanced, S=1.2 a strong skew), or
the path of a JSON file holding a real run's histogram (a list of counts, one an
expert, or {"counts": [...]}: the model must have as many experts). The report
names the setting. Build large models on the meta device and move them with
to_empty(device="simhpu"): initialising them is launches like any other. When the
block ends the device takes back the capacity it had, unless tensors made in the
block are still alive (then it keeps the part's until the process ends).

The lens lives in csrc/phantom; the runtime does not name it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from torch_simhpu import _C
from torch_simhpu.simulation import host_memory

VALUES = {"placeholder": 0, "error": 1}


@dataclass(frozen=True)
class HostRead:
    """One Python line that read device values while phantom execution was on."""
    op: str      # aten::_local_scalar_dense (item), aten::_copy_from (a copy to the CPU)
    file: str
    line: int
    count: int
    bytes: int


def start(profile: dict, values: str = "placeholder", keep_capacity: bool = False) -> None:
    """Phantom execution on, with a checked profile's memory capacity (see module doc), or the
    device's own (keep_capacity)."""
    if values not in VALUES:
        raise ValueError(f"torch.simhpu.simulate: values must be 'placeholder' or 'error', got {values!r}")
    known_bytes = known_bytes_from_environment()
    _C._phantom_set_routing(*routing_from_environment())
    global _capacity_before
    if not keep_capacity:
        before = _C._memory_limit()
        _give_device_the_capacity_of(profile)
        _capacity_before = before if _C._memory_limit() != before else None
    _C._synchronize_all()  # what was launched before runs: only what follows is phantom
    _C._phantom_clear_host_reads()
    _C._phantom_set(True, VALUES[values], known_bytes)
    host_memory.start()  # (a large job's processes share this machine: what they free goes back)


def stop() -> None:
    global _capacity_before
    _C._phantom_set(False, 0)
    host_memory.stop()
    if _capacity_before is not None and _C._set_device_capacity(_capacity_before):
        _capacity_before = None  # (refused while the block's tensors live: the part's capacity stays)


_capacity_before: int | None = None  # the device's capacity before start() changed it


def enabled() -> bool:
    """Whether phantom execution is on."""
    return _C._phantom_enabled()


def host_reads() -> list[HostRead]:
    """The Python lines that read device values since phantom execution started."""
    return [HostRead(*row) for row in _C._phantom_host_reads()]


def _give_device_the_capacity_of(profile: dict) -> None:
    if os.environ.get("SIMHPU_MEMORY_LIMIT"):
        return  # the user's own capacity
    capacity = int(profile["memory_capacity"])
    if not _C._set_device_capacity(capacity):
        raise ValueError(
            f"torch.simhpu.simulate(execute=False): the profile {profile['name']!r} has "
            f"{capacity / 2**30:.1f} GiB of device memory, but the device has {_C._memory_limit() / 2**30:.1f} GiB "
            "and tensors in it, so its capacity cannot change. Start phantom execution before making device "
            "tensors, or from the environment (SIMHPU_DEVICE_PROFILE=... SIMHPU_EXECUTE=0), or set "
            "SIMHPU_MEMORY_LIMIT to the part's capacity.")


def forget_values(tensor) -> None:
    """Marks a device tensor's values unknown to phantom execution (a stand-in for values it does not
    have: torch.simhpu.price's arguments), though its memory is fresh."""
    _C._phantom_forget_values(tensor)


def known_values_launches() -> int:
    """How many kernels ran under phantom execution because their inputs' values were known."""
    return _C._phantom_known_launches()


def peer_answers() -> int:
    """Of those, how many were collectives among simulated peers, answered as if every peer sent
    what this rank sends (an expert router's token counts, exchanged)."""
    return _C._phantom_peer_answers()


def known_bytes_from_environment() -> int:
    """SIMHPU_PHANTOM_KNOWN_BYTES: the most device memory a kernel may hold and still run for its
    known values (an int >= 0; default 1 MiB); anything else is refused by name."""
    value = os.environ.get("SIMHPU_PHANTOM_KNOWN_BYTES", "").strip()
    if not value:
        return 1 << 20
    try:
        limit = int(value)
    except ValueError:
        limit = -1
    if limit < 0:
        raise ValueError(f"SIMHPU_PHANTOM_KNOWN_BYTES must be an int >= 0 (bytes), got {value!r}")
    return limit


def routing_from_environment() -> tuple[int, float, list[float], str]:
    """SIMHPU_PHANTOM_ROUTING, parsed: (kind, Zipf exponent, histogram, the setting as given); a
    setting that does not parse, or a histogram file that is not one, is refused by name."""
    setting = os.environ.get("SIMHPU_PHANTOM_ROUTING", "").strip() or "balanced"
    expected = ('"balanced", "zipf:S" with S a number >= 0, or the path of a JSON file with a list of '
                'counts, one an expert (or {"counts": [...]})')
    if setting == "balanced":
        return 0, 0.0, [], setting
    if setting.startswith("zipf:"):
        try:
            exponent = float(setting[len("zipf:"):])
        except ValueError:
            exponent = -1.0
        if not 0 <= exponent < 100:
            raise ValueError(f"SIMHPU_PHANTOM_ROUTING={setting!r}: expected {expected}")
        return 1, exponent, [], setting
    import json

    try:
        with open(setting) as file:
            data = json.load(file)
    except (OSError, ValueError) as error:
        raise ValueError(f"SIMHPU_PHANTOM_ROUTING={setting!r}: expected {expected} ({error})") from None
    counts = data.get("counts") if isinstance(data, dict) else data
    if (not isinstance(counts, list) or not counts or sum(c for c in counts if isinstance(c, (int, float))) <= 0
            or not all(isinstance(c, (int, float)) and not isinstance(c, bool) and c >= 0 for c in counts)):
        raise ValueError(f"SIMHPU_PHANTOM_ROUTING={setting!r}: expected {expected}: the file holds no such list")
    return 2, 0.0, [float(c) for c in counts], setting


def routing_setting() -> str:
    """The routing distribution phantom execution gives a router's histogram (SIMHPU_PHANTOM_ROUTING)."""
    return os.environ.get("SIMHPU_PHANTOM_ROUTING", "").strip() or "balanced"


def routed_histograms() -> int:
    """How many router histograms phantom execution gave the routing distribution."""
    return _C._phantom_routed_histograms()


def execution_off_in_environment() -> bool:
    """Whether SIMHPU_EXECUTE asks for phantom execution (0, false, no, off); a value that is none of
    those nor 1 is refused by name."""
    value = os.environ.get("SIMHPU_EXECUTE", "").strip().lower()
    if value in ("", "1", "true", "yes", "on"):
        return False
    if value not in ("0", "false", "no", "off"):
        raise ValueError(f"SIMHPU_EXECUTE must be 1 or 0, got {value!r}")
    return True


def _start_from_environment(profile: dict | None) -> None:
    """SIMHPU_EXECUTE=0 (with SIMHPU_DEVICE_PROFILE; SIMHPU_PHANTOM_VALUES=placeholder|error)."""
    if not execution_off_in_environment():
        return
    if profile is None:
        raise ValueError("SIMHPU_EXECUTE=0 (phantom execution) prices launches on a part: "
                         "set SIMHPU_DEVICE_PROFILE too, e.g. SIMHPU_DEVICE_PROFILE=h100-sxm")
    start(profile, os.environ.get("SIMHPU_PHANTOM_VALUES", "placeholder").strip() or "placeholder")
