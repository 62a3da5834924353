"""torch.simhpu: the device module, shaped like torch.cuda."""
from __future__ import annotations

import sys

import torch

from torch_simhpu import _C, _after_import
from torch_simhpu.device import graphs  # noqa: F401  (torch.simhpu.graphs)
from torch_simhpu.device import streams  # noqa: F401  (torch.simhpu.streams)
from torch_simhpu.device import memory  # noqa: F401  (torch.simhpu.memory)
from torch_simhpu.device.graphs import Graph, graph, graph_pool_handle  # noqa: F401
from torch_simhpu.device import properties as _properties
from torch_simhpu.profiler import trace  # noqa: F401
from torch_simhpu.routes import OpRoutes, fallback, get_fallback, op_routes, set_fallback  # noqa: F401
from torch_simhpu.device.streams import _device, Event, Stream, current_stream, default_stream, set_stream, stream  # noqa: F401
from torch_simhpu._device_name import DEVICE_TYPE


def _index(device) -> int:
    """A checked device index from an int, a "simhpu:N" string, a torch.device or None."""
    return _device(device).index


def is_available() -> bool:
    """True: the simulated device needs no hardware."""
    return True


def is_initialized() -> bool:
    """True: the device is ready once torch_simhpu is imported."""
    return True


def init() -> None:
    """Does nothing: the device is ready once torch_simhpu is imported (torch.cuda.init's contract)."""


def device_count() -> int:
    """How many simhpu devices there are (SIMHPU_DEVICE_COUNT, default 2)."""
    return _C._device_count()


def current_device() -> int:
    """The index of this thread's current simhpu device."""
    return _C._current_device()


def set_device(device) -> None:
    """Make `device` (an index, "simhpu:N" or a torch.device) this thread's current device."""
    _C._set_device(_index(device))


def synchronize(device=None) -> None:
    """Wait for every kernel queued on the device, all streams; raises a kernel's failure."""
    _C._synchronize(_index(device))


# Memory: the device's caching allocator reports through torch.accelerator.
def memory_allocated(device=None) -> int:
    """Bytes held by tensors on the device."""
    return torch.accelerator.memory_allocated(_index(device))


def max_memory_allocated(device=None) -> int:
    """The most bytes tensors held on the device since the start or reset_peak_memory_stats()."""
    return torch.accelerator.max_memory_allocated(_index(device))


def memory_reserved(device=None) -> int:
    """Bytes taken from the device: held by tensors or cached for reuse."""
    return torch.accelerator.memory_reserved(_index(device))


def max_memory_reserved(device=None) -> int:
    """The most bytes taken from the device since the start or reset_peak_memory_stats()."""
    return torch.accelerator.max_memory_reserved(_index(device))


def memory_stats(device=None) -> dict:
    """The caching allocator's statistics, keyed as torch.cuda.memory_stats() keys them."""
    return torch.accelerator.memory_stats(_index(device))


def reset_peak_memory_stats(device=None) -> None:
    """Start the "peak" statistics (max_memory_allocated, ...) again from the current figures."""
    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device=None) -> None:
    """Set the accumulated statistics (allocation and free counts, ...) back to zero."""
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def empty_cache() -> None:
    """Return cached, unused device memory to the device."""
    torch.accelerator.empty_cache()


def mem_get_info(device=None) -> tuple[int, int]:
    """(free, total) bytes of the device (total is SIMHPU_MEMORY_LIMIT)."""
    return torch.accelerator.get_memory_info(_index(device))


def memory_stats_as_nested_dict(device=None) -> dict:
    """memory_stats() with its dotted keys made nested dictionaries (torch.cuda's shape)."""
    nested: dict = {}
    for key, value in memory_stats(device).items():
        *path, leaf = key.split(".")
        node = nested
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """The allocator's statistics as a table, to print during training or at out of memory."""
    index = _index(device)
    return memory._memory_summary(memory_stats(index), index, abbreviated)


def memory_snapshot() -> list:
    """Every device's segments (torch.cuda.memory_snapshot's format; see memory._snapshot)."""
    return memory._snapshot()["segments"]


def reset_max_memory_allocated(device=None) -> None:
    """Start max_memory_allocated() again from the current figure (resets every peak, as torch.cuda does)."""
    reset_peak_memory_stats(device)


def memory_cached(device=None) -> int:
    """Deprecated name of memory_reserved()."""
    return memory_reserved(device)


def max_memory_cached(device=None) -> int:
    """Deprecated name of max_memory_reserved()."""
    return max_memory_reserved(device)


def reset_max_memory_cached(device=None) -> None:
    """Deprecated name of reset_peak_memory_stats()."""
    reset_peak_memory_stats(device)


def device_memory_used(device=None) -> int:
    """Bytes of the device's memory in use (what the device, not the allocator, reports)."""
    free, total = mem_get_info(device)
    return total - free


OutOfMemoryError = torch.OutOfMemoryError
AcceleratorError = torch.AcceleratorError
StreamContext = stream


def get_device_name(device=None) -> str:
    """The device's name: "simhpu", with the device profile in brackets while one is in use."""
    return _properties.device_name(_index(device))


def get_device_properties(device=None) -> _properties.SimhpuDeviceProperties:
    """torch.cuda.get_device_properties()'s fields; total_memory is the device's capacity."""
    return _properties.device_properties(_index(device))


def get_device_capability(device=None) -> tuple[int, int]:
    """(major, minor) of get_device_properties() (see torch_simhpu.device.properties.CAPABILITY)."""
    properties = get_device_properties(device)
    return properties.major, properties.minor


def get_allocator_backend() -> str:
    """"native": the device's own caching allocator (no pluggable allocator)."""
    return "native"


def get_gencode_flags() -> str:
    """"": the kernels are compiled for the host, with no device code generations."""
    return ""


def get_arch_list() -> list[str]:
    """The architectures the library's kernels were built for: the host's, which runs them."""
    return [DEVICE_TYPE]


def can_device_access_peer(device, peer_device) -> bool:
    """True: simulated devices of one process reach each other's memory, as NVLink peers do."""
    _index(device), _index(peer_device)  # both must name devices
    return True


def is_current_stream_capturing() -> bool:
    """Whether this thread is capturing a graph (torch.simhpu.graph)."""
    return _C._capturing_graph()


def is_tf32_supported() -> bool:
    """False: float32 matrix products run in full float32 (the host's kernels)."""
    return False


has_half = True
has_magma = False


def _is_in_bad_fork() -> bool:
    return _C._is_in_bad_fork()


# Random numbers: each device has its own default generator, apart from the CPU's.
# The functions that read or set generator state run eagerly under torch.compile
# (as torch.cuda's do): they act on the host-side generator object, not on tensors.
def _default_generator(device=None) -> torch.Generator:
    return _C._default_generator(_index(device))


_NOT_TRACED: list[str] = []


def _not_traced(fn):
    """Marks a function Dynamo is not to trace (torch.compiler.disable), once torch._dynamo is imported:
    importing it here would cost every `import torch` a second (torch_simhpu/_after_import.py)."""
    _NOT_TRACED.append(fn.__name__)
    return fn


def _disable_tracing() -> None:
    module = sys.modules[__name__]
    for name in _NOT_TRACED:
        setattr(module, name, torch.compiler.disable(getattr(module, name)))


def __getattr__(name: str):
    # default_generators is computed on first use: the device count is known once the runtime is.
    if name == "default_generators":
        return tuple(_default_generator(index) for index in range(device_count()))
    raise AttributeError(f"module 'torch.simhpu' has no attribute {name!r}")


@_not_traced
def manual_seed(seed: int) -> None:
    """Seed the current device's generator."""
    _default_generator().manual_seed(int(seed))


# torch.manual_seed calls this for every registered device type.
@_not_traced
def manual_seed_all(seed: int) -> None:
    """Seed every device's generator with `seed`."""
    for index in range(device_count()):
        _default_generator(index).manual_seed(int(seed))


@_not_traced
def seed() -> None:
    """Seed the current device's generator with a non-deterministic random number."""
    _default_generator().seed()


@_not_traced
def seed_all() -> None:
    """Seed every device's generator with one non-deterministic random number."""
    random_seed = _default_generator().seed()
    for index in range(device_count()):
        _default_generator(index).manual_seed(random_seed)


@_not_traced
def initial_seed() -> int:
    """The seed the current device's generator was last seeded with."""
    return _default_generator().initial_seed()


@_not_traced
def get_rng_state(device=None) -> torch.Tensor:
    """The device generator's state, as a CPU uint8 tensor (for set_rng_state)."""
    return _default_generator(device).get_state()


@_not_traced
def set_rng_state(new_state: torch.Tensor, device=None) -> None:
    """Restore the device generator's state from get_rng_state()'s tensor."""
    _default_generator(device).set_state(new_state)


@_not_traced
def get_rng_state_all() -> list:
    """Every device generator's state, by device index."""
    return [get_rng_state(i) for i in range(device_count())]


@_not_traced
def set_rng_state_all(new_states) -> None:
    """Restore every device generator's state from get_rng_state_all()'s list."""
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


def get_amp_supported_dtype():
    """The dtypes torch.autocast("simhpu", dtype=...) accepts."""
    return [torch.float16, torch.bfloat16]


def is_bf16_supported() -> bool:
    """True: bfloat16 tensors live and compute on the device, as on the CPU whose kernels it runs."""
    return True


class device:  # noqa: N801 - the name torch.cuda uses
    """Context manager that makes `index` the current simhpu device."""

    def __init__(self, index):
        self.index = _index(index)
        self.previous = -1

    def __enter__(self):
        self.previous = _C._current_device()
        _C._set_device(self.index)
        return self

    def __exit__(self, *exc):
        _C._set_device(self.previous)
        return False


class device_of(device):  # noqa: N801 - the name torch.cuda uses
    """Context manager that makes the device of tensor `obj` current (no change for a CPU tensor)."""

    def __init__(self, obj):
        self.index = obj.get_device() if obj.device.type == DEVICE_TYPE else -1
        self.previous = -1

    def __enter__(self):
        if self.index == -1:
            return self
        return super().__enter__()

    def __exit__(self, *exc):
        if self.index == -1:
            return False
        return super().__exit__(*exc)


_after_import.after_import("torch._dynamo", _disable_tracing)
