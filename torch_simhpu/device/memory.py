"""torch.simhpu.memory: the allocator's history and snapshots, as torch.cuda.memory has them.

`_snapshot()` is in the format of `torch.cuda.memory._snapshot()`, so PyTorch's memory
visualiser (pytorch.org/memory_viz, or `python -m torch.cuda._memory_viz`) reads what
`_dump_snapshot()` writes. The device's caching allocator keeps one block per segment, so
each segment holds a single block, active (held by a tensor) or inactive (cached).
"""
from __future__ import annotations

import os
import pickle
import sys

from torch_simhpu import _C
from torch_simhpu.device.streams import _device
from torch_simhpu._device_name import DEVICE_TYPE


def _record_memory_history(enabled: str | None = "all", context: str | None = "all", stacks: str = "python",
                           max_entries: int = sys.maxsize, device=None) -> None:
    """Start (enabled="all" or "state") or stop (None) recording allocations with their Python stacks.

    Recording covers every simhpu device; stopping forgets what was recorded. Only Python
    stacks are kept ("python"; "all" is accepted and means the same here).
    """
    if enabled not in ("all", "state", None):
        raise ValueError(f"_record_memory_history: enabled must be 'all', 'state' or None, got {enabled!r}")
    if stacks not in ("python", "all"):
        raise ValueError(f"_record_memory_history: stacks must be 'python' or 'all', got {stacks!r}")
    if not isinstance(max_entries, int) or max_entries < 1:
        raise ValueError(f"_record_memory_history: max_entries must be a positive int, got {max_entries!r}")
    _C._record_memory_history(enabled is not None, max_entries if enabled == "all" else 0)


def _segments(device: int) -> list[dict]:
    segments = []
    for address, size, active, frames in sorted(_C._memory_segments(device)):
        block = {"address": address, "size": size, "requested_size": size,
                 "state": "active_allocated" if active else "inactive", "frames": frames}
        segments.append({
            "device": device, "address": address, "total_size": size, "stream": 0,
            "segment_type": "large" if size > (1 << 20) else "small", "segment_pool_id": (0, 0),
            "allocated_size": size if active else 0, "active_size": size if active else 0,
            "requested_size": size if active else 0, "is_expandable": False, "frames": [], "blocks": [block],
        })
    return segments


def _snapshot(device=None) -> dict:
    """Every device's segments and recorded events (torch.cuda.memory._snapshot's format)."""
    devices = range(_C._device_count()) if device is None else [_device(device).index]
    traces = [[] for _ in range(_C._device_count())]
    for d in devices:
        traces[d] = [dict(event, stream=0, device_free=0) for event in _C._memory_events(d)]
    return {"segments": [s for d in devices for s in _segments(d)], "device_traces": traces,
            "allocator_settings": {}}


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Write _snapshot() as a pickle, the file PyTorch's memory visualiser opens."""
    snapshot = _snapshot()
    with open(os.fspath(filename), "wb") as f:
        pickle.dump(snapshot, f)


def _dump_on_out_of_memory(path: str):
    def observer(device: int, requested: int) -> None:
        _dump_snapshot(path)
        sys.stderr.write(f"simhpu: out of memory on device {device} (asked for {requested} bytes); "
                         f"memory snapshot written to {path}\n")
    return observer


def _start_from_environment() -> None:
    """SIMHPU_OOM_SNAPSHOT=PATH: record history from the start, and write a snapshot there at out of memory."""
    path = os.environ.get("SIMHPU_OOM_SNAPSHOT")
    if path:
        _record_memory_history("all", max_entries=100_000)
        _C._set_oom_observer(_dump_on_out_of_memory(path))


_SUMMARY_ROWS = (
    ("Allocated memory", "allocated_bytes", True),
    ("Active memory", "active_bytes", True),
    ("Requested memory", "requested_bytes", True),
    ("Reserved memory", "reserved_bytes", True),
    ("Allocations", "allocation", False),
    ("Active allocations", "active", False),
    ("Segments", "segment", False),
)


def _format_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)


def _memory_summary(stats: dict, device: int, abbreviated: bool = False) -> str:
    """A table of the allocator's statistics, read as torch.cuda.memory_summary's is."""
    columns = ("current", "peak", "allocated", "freed")
    lines = [f"{DEVICE_TYPE}:{device} memory summary (caching allocator; one block per segment)",
             f"{'Metric':<24}" + "".join(f"{c:>16}" for c in columns)]
    pools = ("all",) if abbreviated else ("all", "large_pool", "small_pool")
    for title, key, in_bytes in _SUMMARY_ROWS:
        for pool in pools:
            values = [stats.get(f"{key}.{pool}.{c}", 0) for c in columns]
            label = title if pool == "all" else f"  from {pool.replace('_', ' ')}"
            lines.append(f"{label:<24}" + "".join(
                f"{_format_bytes(v) if in_bytes else v:>16}" for v in values))
    lines.append(f"{'Out-of-memory errors':<24}{stats.get('num_ooms', 0):>16}")
    lines.append(f"{'Allocation retries':<24}{stats.get('num_alloc_retries', 0):>16}")
    return "\n".join(lines) + "\n"
