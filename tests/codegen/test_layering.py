"""The runtime publishes its events and names no lens (csrc/runtime/observers.h).

A lens (chaos scheduling, the sanitizer, simulated time) is a folder of csrc/ that
subscribes to the runtime's observers; the layers below it (csrc/runtime, csrc/aten,
csrc/distributed) include none of its headers. The sanitizer and simulated time are still
called by name from some of those files: they are listed here until they subscribe, and
the test fails when a listed include is gone (so the list shrinks) or a new one appears.
"""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("runtime", "aten", "distributed")
LENSES = ("chaos", "sanitizer", "simclock")
NOT_YET_OBSERVERS = {
    ("aten/fallback.cpp", "simclock"), ("aten/minimal_ops.cpp", "sanitizer"), ("aten/minimal_ops.cpp", "simclock"),
    ("aten/synchronized_call.cpp", "sanitizer"), ("distributed/collective.cpp", "simclock"),
    ("runtime/events.cpp", "sanitizer"), ("runtime/events.cpp", "simclock"),
    ("runtime/streams.cpp", "sanitizer"), ("runtime/streams.cpp", "simclock"),
}
INCLUDE = re.compile(r'#include\s+"(\w+)/')


def lens_includes():
    found = set()
    for layer in LAYERS:
        for path in sorted((ROOT / "csrc" / layer).rglob("*")):
            if path.suffix not in (".h", ".cpp"):
                continue
            for folder in INCLUDE.findall(path.read_text()):
                if folder in LENSES:
                    found.add((f"{layer}/{path.relative_to(ROOT / 'csrc' / layer)}", folder))
    return found


def test_the_runtime_names_no_lens_beyond_those_still_to_move():
    found = lens_includes()
    assert not found - NOT_YET_OBSERVERS, f"new lens includes below the lenses: {sorted(found - NOT_YET_OBSERVERS)}"
    assert not NOT_YET_OBSERVERS - found, f"gone, remove them from the list: {sorted(NOT_YET_OBSERVERS - found)}"


def test_chaos_scheduling_is_an_observer():
    assert not {entry for entry in lens_includes() if entry[1] == "chaos"}
    assert "observers::subscribe" in (ROOT / "csrc/chaos/chaos_scheduler.cpp").read_text()


def test_the_allocator_and_pinned_memory_tell_the_sanitizer_only_through_observers():
    for path in ("runtime/allocator.cpp", "runtime/pinned_memory.cpp", "aten/resize.cpp"):
        assert "sanitizer::" not in (ROOT / "csrc" / path).read_text(), path
    assert "observers::subscribe" in (ROOT / "csrc/sanitizer/stream_sanitizer.cpp").read_text()
