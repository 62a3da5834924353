"""What the device's memory held at its peak, by what it was for: parameters,
gradients, optimizer state, communication buffers, activations and temporaries.

A simulate() block keeps a ledger (Simulation.memory_breakdown()). It reads the
allocator's history (torch.simhpu.memory._record_memory_history, turned on for
the block unless the program had it on already) and, at each optimizer step,
which blocks hold the optimizer's parameters, their gradients and its state
(DTensors by their local shards). After the block it replays the history: the
peak is the moment the allocated bytes were highest, and each block live then is

- parameters / gradients / optimizer state: a block that held one at some
  optimizer step while it was live (so a gradient made in the backward that
  peaked counts as a gradient);
- communication buffers: otherwise, a block allocated by data parallelism's
  collective code (FSDP's all-gather and reduce-scatter buffers and the
  unsharded parameters it gathers; DDP's buckets; c10d's own staging);
- activations and temporaries: the rest (what autograd saved, what an operator
  made along the way, module buffers).
"""
from __future__ import annotations

import bisect
import collections
import sys
from dataclasses import dataclass, field

import torch

from torch_simhpu import _C
from torch_simhpu._device_name import DEVICE_TYPE

PARAMETERS, GRADIENTS, OPTIMIZER_STATE = "parameters", "gradients", "optimizer state"
COMMUNICATION, ACTIVATIONS = "communication buffers", "activations and temporaries"
CATEGORIES = (PARAMETERS, GRADIENTS, OPTIMIZER_STATE, COMMUNICATION, ACTIVATIONS)
_SLICE = 1 << 16  # events read from the history at a time

# Python files whose allocations are the collectives' buffers (matched against
# each frame of the allocating stack, "/" separated). A collective's result that
# the program goes on computing with (DTensor's redistributions, functional
# collectives: a sequence-parallel layer's gathered input) is an activation.
_COMMUNICATION_CODE = (
    "torch/distributed/fsdp/", "torch/distributed/_composable/", "torch/distributed/distributed_c10d",
    "torch/nn/parallel/distributed",
)


@dataclass
class MemoryBreakdown:
    """The device's allocated memory at its peak, by category (bytes)."""
    device: int
    peak: int
    by_category: dict[str, int]
    capacity: int
    parameters_counted: int = 0  # elements of the optimizer's parameters (a DTensor's whole, not its shard)
    blocks: dict[str, int] = field(default_factory=dict)  # live blocks at the peak, by category


def _local(t: torch.Tensor) -> torch.Tensor:
    return getattr(t, "_local_tensor", t)  # a DTensor's shard on this rank


def _storage_pointer(t) -> int | None:
    if not isinstance(t, torch.Tensor):
        return None
    t = _local(t)
    if t.device.type != DEVICE_TYPE or t.untyped_storage().nbytes() == 0:
        return None
    return t.untyped_storage().data_ptr()


class MemoryLedger:
    """Kept by a simulate() block for one device; see the module's text."""

    def __init__(self, device: int):
        self.device = device
        self._own_history = False
        self._start = 0
        self._seeds: list[tuple[int, int, list]] = []
        self._marks: list[tuple[int, dict[str, list[int]]]] = []
        self._parameters: dict[int, int] = {}  # id -> elements (of the whole, for a DTensor)

    def begin(self) -> None:
        if not _C._memory_history_enabled():
            _C._record_memory_history(True, sys.maxsize)
            self._own_history = True
        self._start = _C._memory_events_recorded(self.device)
        # Blocks live before the block began (a model built before it): known by address only.
        self._seeds = [(address, size, frames) for address, size, active, frames in _C._memory_segments(self.device)
                       if active]

    def mark_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """At an optimizer step's end: which blocks hold what it steps."""
        held = {PARAMETERS: [], GRADIENTS: [], OPTIMIZER_STATE: []}
        for group in optimizer.param_groups:
            for p in group["params"]:
                self._parameters[id(p)] = p.numel()
                for category, tensor in ((PARAMETERS, p), (GRADIENTS, p.grad)):
                    pointer = _storage_pointer(tensor)
                    if pointer is not None:
                        held[category].append(pointer)
        for state in optimizer.state.values():
            for value in state.values() if isinstance(state, dict) else ():
                pointer = _storage_pointer(value)
                if pointer is not None:
                    held[OPTIMIZER_STATE].append(pointer)
        self._marks.append((_C._memory_events_recorded(self.device), {k: sorted(v) for k, v in held.items()}))

    def end(self) -> MemoryBreakdown | str:
        """The breakdown, or why there is none."""
        try:
            return self._replay()
        finally:
            if self._own_history:
                _C._record_memory_history(False, 0)

    def _events(self, begin: int, end: int):
        """(position, action, address, size) of the kept events in [begin, end), read a slice at a
        time: a large job's step makes hundreds of thousands, whose tuples never live all at once."""
        for first in range(begin, end, _SLICE):
            for offset, (action, address, size) in enumerate(
                    _C._memory_event_list(self.device, first, min(_SLICE, end - first))):
                yield first + offset, action, address, size

    def _replay(self) -> MemoryBreakdown | str:
        recorded = _C._memory_events_recorded(self.device)
        kept = _C._memory_events_kept(self.device)
        first_kept = recorded - kept
        if first_kept > self._start:
            return (f"the allocator's history kept {kept} events, fewer than the block made "
                    f"(the program's _record_memory_history(max_entries=...) dropped the oldest)")
        begin = self._start - first_kept
        category: dict[object, str] = {}  # an allocation (its event's position, or its seed's address) -> category
        live: dict[int, tuple[int, object]] = {}  # address -> (size, allocation)
        for address, size, _ in self._seeds:
            live[address] = (size, ("seed", address))
        allocated = sum(size for size, _ in live.values())
        peak, peak_at = allocated, begin - 1
        marks = collections.deque(self._marks)

        def apply_marks(upto: int) -> None:
            while marks and marks[0][0] <= upto:
                _, held = marks.popleft()
                for address, (size, allocation) in live.items():
                    if allocation in category:
                        continue
                    for name in (PARAMETERS, GRADIENTS, OPTIMIZER_STATE):
                        pointers = held[name]
                        i = bisect.bisect_left(pointers, address)
                        if i < len(pointers) and pointers[i] < address + size:
                            category[allocation] = name
                            break

        for position, action, address, size in self._events(begin, kept):
            apply_marks(first_kept + position)
            if action == "alloc":
                live[address] = (size, position)
                allocated += size
                if allocated > peak:
                    peak, peak_at = allocated, position
            elif action == "free_completed" and address in live:
                allocated -= live.pop(address)[0]
        apply_marks(sys.maxsize)

        # The blocks live at the peak: replay again up to it.
        at_peak = {address: (size, ("seed", address)) for address, size, _ in self._seeds}
        for position, action, address, size in self._events(begin, peak_at + 1):
            if action == "alloc":
                at_peak[address] = (size, position)
            elif action == "free_completed":
                at_peak.pop(address, None)
        unknown = [allocation for _, allocation in at_peak.values() if allocation not in category]
        positions = [a for a in unknown if isinstance(a, int)]
        stacks = dict(zip(positions, _C._memory_event_frames(self.device, positions)))
        seed_frames = {address: frames for address, _, frames in self._seeds}
        by_category = dict.fromkeys(CATEGORIES, 0)
        blocks = dict.fromkeys(CATEGORIES, 0)
        for size, allocation in at_peak.values():
            name = category.get(allocation)
            if name is None:
                frames = stacks.get(allocation) if isinstance(allocation, int) else seed_frames.get(allocation[1])
                name = COMMUNICATION if _from_communication_code(frames or []) else ACTIVATIONS
            by_category[name] += size
            blocks[name] += 1
        return MemoryBreakdown(self.device, peak, by_category, torch.simhpu.mem_get_info(self.device)[1],
                               sum(self._parameters.values()), blocks)


def _from_communication_code(frames: list[dict]) -> bool:
    return any(code in frame["filename"].replace("\\", "/") for frame in frames for code in _COMMUNICATION_CODE)
