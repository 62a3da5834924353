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
"""
from __future__ import annotations

import contextlib
import os

from torch_simhpu import _C

_MODES = {"off": 0, "raise": 1, "record": 2}


def enable(mode: str = "raise") -> None:
    """Checks every launch from now on; `mode` is "raise" or "record"."""
    if mode not in ("raise", "record"):
        raise ValueError(f"torch.simhpu.sanitizer.enable: mode must be 'raise' or 'record', got {mode!r}")
    _C._sanitizer_set_mode(_MODES[mode])


def disable() -> None:
    _C._sanitizer_set_mode(0)


def is_enabled() -> bool:
    return _C._sanitizer_mode() != 0


@contextlib.contextmanager
def enabled(mode: str = "raise"):
    """The sanitizer on for the block, then as it was."""
    before = _C._sanitizer_mode()
    enable(mode)
    try:
        yield
    finally:
        _C._sanitizer_set_mode(before)


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


def _start_from_environment() -> None:
    """SIMHPU_SANITIZER=1|raise|record (0/off/unset: off)."""
    value = os.environ.get("SIMHPU_SANITIZER", "").strip().lower()
    if value in ("", "0", "off", "false", "no"):
        return
    if value in ("1", "on", "true", "yes", "raise"):
        enable("raise")
    elif value == "record":
        enable("record")
    else:
        raise ValueError(f"SIMHPU_SANITIZER={value!r}: expected 1 (or raise), record, or 0")
