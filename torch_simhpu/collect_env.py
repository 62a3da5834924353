"""An environment report for bug reports, as torch.utils.collect_env gives for CUDA:

    python -m torch_simhpu            # or torch_simhpu.collect_env() for the text

torch and torch_simhpu's versions (the wheel's version carries the hash of the sources it was
built from) and the SDK stamp of the headers operator packages compile against; the devices; every
SIMHPU_* variable in the environment with what it does (one torch_simhpu does not read is said, a
typo shows); the lenses in force: the simulated-time profile, phantom execution, chaos scheduling's
seed, the stream sanitizer; and the fallback policy.
"""
from __future__ import annotations

import difflib
import os
import platform
import sys

# Every environment variable torch_simhpu reads, and what setting it does.
SETTINGS = {
    "SIMHPU_DEVICE_COUNT": "the number of devices (default 2)",
    "SIMHPU_MEMORY_LIMIT": "each device's memory capacity, e.g. 2GiB (default 8 GiB, or the profile's)",
    "SIMHPU_STRICT": "1: host code cannot dereference device memory (kernels and copies use a second mapping)",
    "SIMHPU_LAUNCH_BLOCKING": "1: each kernel runs inside the call that launches it",
    "SIMHPU_HOST_RUNS": "0: host threads never run kernels themselves; every kernel runs on its stream's worker",
    "SIMHPU_RESULT_PLACEMENT": "0: reference-path results are computed in CPU memory and copied to the device",
    "SIMHPU_FALLBACK": "the reference path's policy at start: global, selective or blocklist",
    "SIMHPU_FALLBACK_OPS": "the operators SIMHPU_FALLBACK's selective allows or blocklist refuses",
    "SIMHPU_OOM_SNAPSHOT": "a path: memory history recorded from the start, a snapshot written there on out of memory",
    "SIMHPU_SANITIZER": "1: the stream sanitizer checks every launch's accesses from the start",
    "SIMHPU_SANITIZER_POISON": "1: the sanitizer also poisons freed and uninitialised device memory",
    "SIMHPU_CHAOS": "a seed: stream workers are held back at seeded random points (chaos scheduling)",
    "SIMHPU_DEVICE_PROFILE": "a profile name or JSON path: simulated time prices every launch as that part",
    "SIMHPU_SIMULATED_HOST_TIME": "modelled (default) or measured: whether simulated time adds the program's own host time as measured here",
    "SIMHPU_EXECUTE": "0: phantom execution, nothing runs (needs SIMHPU_DEVICE_PROFILE)",
    "SIMHPU_PHANTOM_VALUES": "placeholder or error: what a host read of a device value gives under phantom execution",
    "SIMHPU_PHANTOM_ROUTING": "balanced, zipf:S or a histogram file: how a router's tokens spread over its experts under phantom execution",
    "SIMHPU_PHANTOM_KNOWN_BYTES": "the most device memory a kernel may hold and still run under phantom execution because the host knows its inputs (default 1 MiB)",
    "SIMHPU_SIMULATED_WORLD": "the world size this process simulates (phantom execution of one rank)",
    "SIMHPU_SIMULATED_RANK": "the rank this process plays in SIMHPU_SIMULATED_WORLD",
    "SIMHPU_JOINED_RANKS": "the ranks whose simulated clocks this process joins (pipeline stages)",
    "SIMHPU_JOIN_STORE": "host:port of the store joined clocks meet at",
    "SIMHPU_JOIN_TIMEOUT": "seconds a joined rank waits for a peer to reach a call (default 300)",
    "SIMHPU_COLLECTIVE_CHECKS": "0: collectives do not check that every rank passed the same shapes",
    "SIMHPU_DEVICE_NAME": "simhpu or npu: the device's name in this process (default: npu where the program imports torch_npu)",
    # Read by the torch_npu face (compat/torch_npu).
    "SIMHPU_OP_PLUGIN_YAML": "torch_npu: op-plugin's op_plugin_functions.yaml, whose custom operators get their names",
    "SIMHPU_NPU_SOC": "torch_npu: the Ascend part the device answers as (default Ascend910B3)",
    "SIMHPU_NPU_CANN_VERSION": "torch_npu: the CANN release the device answers as (default 8.5.0)",
}


def collect_env() -> str:
    """The report, as text."""
    import torch
    import torch_simhpu
    from torch_simhpu import chaos, routes, sanitizer, simulation

    from torch_simhpu.simulation import phantom
    lines = ["torch_simhpu environment", "",
             f"torch_simhpu: {torch_simhpu.__version__} (the part after '+' hashes the sources it was built from)",
             f"SDK stamp: {_sdk_stamp(torch_simhpu)}",
             f"torch: {torch.__version__} (tested: 2.13.0)",
             f"Python: {sys.version.split()[0]} ({sys.executable})",
             f"platform: {platform.platform()}, {os.cpu_count()} processors", ""]
    count = torch.simhpu.device_count()
    lines.append(f"devices: {count}")
    for index in range(count):
        p = torch.simhpu.get_device_properties(index)
        lines.append(f"  simhpu:{index}: {p.name}, {p.total_memory / 2**30:.1f} GiB, {p.multi_processor_count} units")
    lines += ["", "lenses:",
              f"  simulated time: {simulation.profile() or 'off'}",
              f"  phantom execution: {'on' if phantom.enabled() else 'off'}",
              f"  chaos scheduling: {'seed ' + str(chaos.seed()) if chaos.seed() is not None else 'off'}",
              f"  stream sanitizer: {'on' if sanitizer.is_enabled() else 'off'}"]
    mode, ops = routes.get_fallback()
    lines += [f"fallback: {mode}" + (f" ({', '.join(ops)})" if ops else ""), "", "SIMHPU_* settings in force:"]
    present = sorted(k for k in os.environ if k.startswith("SIMHPU_"))
    for name in present:
        close = difflib.get_close_matches(name, SETTINGS, n=1)
        effect = SETTINGS.get(name, "not a setting torch_simhpu reads" + (f" (did you mean {close[0]}?)" if close else ""))
        lines.append(f"  {name}={os.environ[name]}: {effect}")
    if not present:
        lines.append("  none")
    return "\n".join(lines)


def _sdk_stamp(package) -> str:
    stamp = os.path.join(os.path.dirname(package.__file__), "include", "torch_simhpu", "sdk_stamp.h")
    try:
        with open(stamp) as f:
            return f.read().split('TORCH_SIMHPU_SDK_STAMP "')[1].split('"')[0]
    except (OSError, IndexError):
        return "unknown (no SDK headers installed with this package)"


def main() -> None:
    print(collect_env())


if __name__ == "__main__":
    main()
