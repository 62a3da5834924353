"""The runtime publishes its events and names no lens (csrc/runtime/observers.h).

A lens (chaos scheduling, the stream sanitizer, simulated time, phantom execution, the
kernel trace, the memory history) is a folder of csrc/
that subscribes to the runtime's observers; the layers below it (csrc/runtime,
csrc/aten, csrc/distributed) include none of its headers, and the generated adapters
describe their work (runtime/launch_work.h) without naming who reads it.
"""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("runtime", "aten", "distributed")
LENSES = ("chaos", "sanitizer", "simclock", "phantom", "trace", "memory_history")
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


def test_the_runtime_names_no_lens():
    assert not lens_includes(), f"lens headers included below the lenses: {sorted(lens_includes())}"


def test_generated_adapters_name_no_lens():
    for template in sorted((ROOT / "codegen" / "templates").glob("*.j2")):
        assert not {f for f in INCLUDE.findall(template.read_text()) if f in LENSES}, template.name


def test_each_lens_subscribes():
    for path in ("chaos/chaos_scheduler.cpp", "sanitizer/stream_sanitizer.cpp", "simclock/sim_clock.cpp",
                 "trace/kernel_trace.cpp", "memory_history/memory_history.cpp", "phantom/phantom_execution.cpp"):
        assert "observers::subscribe" in (ROOT / "csrc" / path).read_text(), path
