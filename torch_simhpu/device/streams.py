"""torch.simhpu.Stream / Event and the current-stream functions, shaped like
torch.cuda's. They are torch's generic Stream and Event, which reach the
device through its guard (csrc/runtime/guard.cpp)."""
from __future__ import annotations

import contextlib

import torch

from torch_simhpu import _C
from torch_simhpu._device_name import DEVICE_TYPE


def _device(device) -> torch.device:
    """A simhpu device from an int, a "simhpu:N" string, a torch.device or None (the current one)."""
    if device is None:
        return torch.device(DEVICE_TYPE, _C._current_device())
    if isinstance(device, int) and not isinstance(device, bool):
        index = device
    else:
        device = torch.device(device)
        if device.type != DEVICE_TYPE:
            raise ValueError(f"expected a {DEVICE_TYPE} device, got {device}")
        index = _C._current_device() if device.index is None else device.index
    _C._check_device_index(index, DEVICE_TYPE)
    return torch.device(DEVICE_TYPE, index)


class Stream(torch.Stream):
    """An in-order queue of device work, run by its own worker thread.

    Streams come from a pool per device (the default stream plus a few more),
    handed out in turn, as torch.cuda.Stream does."""

    def __new__(cls, device=None, priority: int = 0):
        return super().__new__(cls, device=_device(device), priority=priority)


def Event(enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> torch.Event:  # noqa: N802
    """A point in a stream of the current simhpu device: record it, wait for it
    from another stream, time between two.

    A function rather than a subclass: torch.Event.elapsed_time accepts only
    torch.Event itself."""
    return torch.Event(device=_device(None), enable_timing=enable_timing, blocking=blocking,
                       interprocess=interprocess)


def current_stream(device=None) -> torch.Stream:
    """The stream this thread launches on for `device` (default: the current device)."""
    return torch.accelerator.current_stream(_device(device).index)


def default_stream(device=None) -> torch.Stream:
    """The device's default stream (stream 0), the one current until set_stream or stream() changes it."""
    current = current_stream(device)
    return torch.Stream(stream_id=0, device_index=current.device_index, device_type=current.device_type)


def set_stream(stream: torch.Stream) -> None:
    """Make `stream` current on its device for this thread (stream() does it for a block)."""
    torch.accelerator.set_stream(stream)


@contextlib.contextmanager
def stream(stream: torch.Stream | None):
    """Make `stream` current on its device inside the block (None: no change)."""
    if stream is None:
        yield
        return
    # Making a stream current also makes its device current (as CUDA does);
    # both are put back on the way out.
    previous_device = _C._current_device()
    previous = current_stream(stream.device_index)
    torch.accelerator.set_stream(stream)
    try:
        yield stream
    finally:
        torch.accelerator.set_stream(previous)
        _C._set_device(previous_device)
