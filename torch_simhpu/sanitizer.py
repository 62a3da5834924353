"""torch.simhpu.sanitizer: finds the stream races real hardware would expose.

A launch on one stream that reads what another stream wrote, or writes what
another stream read or wrote, with nothing ordering the two (no wait_stream,
event wait, collective wait() or host synchronisation between them), is a race:
on real hardware its result depends on timing. The sanitizer checks every launch
when it is made, in program order, so it finds a race every time, not only when
the timing goes wrong::

    torch.simhpu.sanitizer.enable()           # or SIMHPU_SANITIZER=1 before the program starts
    with torch.simhpu.sanitizer.enabled():    # or for a block
        ...

Mode "raise" (the default) raises at the launching call, naming both operators,
both streams, both lines and the tensor; mode "record" lets the program go on and
keeps every report for reports(). Turning it on assumes what ran before was ordered.

Frees are checked as real hardware's caching allocator would reuse the memory: a
tensor dropped while a stream other than the one it was allocated on may still
use it (no ``tensor.record_stream(stream)``, nothing ordering that use before the
allocation stream's next launches) is reported when it is freed (in "raise"
mode, at the next launch or synchronisation, as a free cannot raise). With
``poison=True`` (or SIMHPU_SANITIZER_POISON=1) a freed block is then filled on
its allocation stream, NaN for floating types and 0xA5 bytes otherwise, as its
next tensor would overwrite it, so a read that comes too late shows in the values.
"""
from __future__ import annotations

import contextlib
import os

from torch_simhpu import _C

_MODES = {"off": 0, "raise": 1, "record": 2}


def enable(mode: str = "raise", poison: bool = False) -> None:
    """Checks every launch from now on; `mode` is "raise" or "record"; `poison`
    fills freed blocks (see the module's help)."""
    if mode not in ("raise", "record"):
        raise ValueError(f"torch.simhpu.sanitizer.enable: mode must be 'raise' or 'record', got {mode!r}")
    _C._sanitizer_set_mode(_MODES[mode])
    _C._sanitizer_set_poison(bool(poison))


def disable() -> None:
    _C._sanitizer_set_mode(0)
    _C._sanitizer_set_poison(False)


def is_enabled() -> bool:
    return _C._sanitizer_mode() != 0


@contextlib.contextmanager
def enabled(mode: str = "raise", poison: bool = False):
    """The sanitizer on for the block, then as it was."""
    before = _C._sanitizer_mode(), _C._sanitizer_poison()
    enable(mode, poison)
    try:
        yield
    finally:
        _C._sanitizer_set_mode(before[0])
        _C._sanitizer_set_poison(before[1])


@contextlib.contextmanager
def disabled():
    """The sanitizer off for the block (code that races on purpose), then as it was."""
    before = _C._sanitizer_mode()
    _C._sanitizer_set_mode(0)
    try:
        yield
    finally:
        _C._sanitizer_set_mode(before)


def reports() -> list[str]:
    """The races found in "record" mode, oldest first."""
    return list(_C._sanitizer_reports())


def clear_reports() -> None:
    _C._sanitizer_clear_reports()


_OFF, _ON = ("", "0", "off", "false", "no"), ("1", "on", "true", "yes")


def _start_from_environment() -> None:
    """SIMHPU_SANITIZER=1|raise|record (0/off/unset: off); SIMHPU_SANITIZER_POISON=1."""
    value = os.environ.get("SIMHPU_SANITIZER", "").strip().lower()
    poison = os.environ.get("SIMHPU_SANITIZER_POISON", "").strip().lower()
    if poison not in _OFF + _ON:
        raise ValueError(f"SIMHPU_SANITIZER_POISON={poison!r}: expected 1 or 0")
    if value in _OFF:
        return
    if value in _ON + ("raise",):
        enable("raise", poison in _ON)
    elif value == "record":
        enable("record", poison in _ON)
    else:
        raise ValueError(f"SIMHPU_SANITIZER={value!r}: expected 1 (or raise), record, or 0")
