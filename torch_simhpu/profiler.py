"""torch.simhpu.trace(path): a Chrome trace of the kernels launched inside the
block, with how long each waited in its stream's queue and how long it ran.
With a device profile set (torch.simhpu.set_profile), the simulated timeline is
written beside the host's: one process per device named after the profile, a
lane per stream, times in simulated microseconds from when the profile was set.
Open the file in chrome://tracing or https://ui.perfetto.dev."""
from __future__ import annotations

import contextlib
import json
import os

from torch_simhpu import _C
from torch_simhpu._device_name import DEVICE_TYPE


@contextlib.contextmanager
def trace(path: str | os.PathLike):
    """Blocks may nest: each file holds the kernels launched while its own block ran.

    The file is written when the block ends, whether or not a kernel failed in it;
    the failure is raised after the file is written. A path that cannot be written
    is refused at the start of the block.
    """
    file = open(os.fspath(path), "w")  # noqa: SIM115 - closed below, after the block
    mark = _C._start_trace()
    profile = _C._simclock_profile_name()
    simulated_mark = _C._simclock_start_log() if profile is not None else None
    try:
        yield
    finally:
        with file:
            entries = _C._stop_trace(mark)  # waits for the kernels launched so far
            events = chrome_events(entries)
            other = {}
            if simulated_mark is not None:
                events += simulated_events(profile, _C._simclock_stop_log(simulated_mark))
                other["simulated profile"] = profile
            document = {"traceEvents": events, "displayTimeUnit": "ms"}
            if _C._chaos_seed() is not None:  # the timing came from these delays
                other["SIMHPU_CHAOS"] = _C._chaos_seed()
            if other:
                document["otherData"] = other
            json.dump(document, file)
    _C._synchronize_all()  # a kernel of the block that failed is raised here


def span_name(kernel: str, op: str) -> str:
    """A kernel's row name. The reference kernel runs every op without a kernel
    of its own, so its rows carry the op ("reference: aten::mm"), as in the
    torch.profiler rows (csrc/profiler/kineto_plugin.cpp)."""
    return f"{kernel}: {op}" if kernel == "reference" and op else kernel


def chrome_events(entries) -> list[dict]:
    """Two spans per kernel: waiting in the queue, then running, on the stream's row."""
    events = []
    for kernel, op, file, line, device, stream, queued, start, end, _correlation, by_host in entries:
        pid = f"{DEVICE_TYPE}:{device}"
        args = {"op": op, "launched at": f"{file}:{line}" if file else "(not from Python)",
                "queued (us)": (start - queued) / 1e3, "ran (us)": (end - start) / 1e3,
                "ran on": "the host thread waiting for it" if by_host else "the stream's worker"}
        name = span_name(kernel, op)
        events.append({"name": f"{name} (queued)", "cat": "queue", "ph": "X", "ts": queued / 1e3,
                       "dur": (start - queued) / 1e3, "args": args, "pid": pid, "tid": f"stream {stream} queue"})
        events.append({"name": name, "cat": "kernel", "ph": "X", "ts": start / 1e3, "dur": (end - start) / 1e3,
                       "args": args, "pid": pid, "tid": f"stream {stream}"})
    return events


def simulated_events(profile: str, launches) -> list[dict]:
    """Each launch's span on the modelled part, on its stream's lane (markers left out)."""
    events = []
    for (_id, op, kernel, file, line, device, stream, work, bound, collective, ranks, _dtype, flops, nbytes, peak,
         launched, start, end, cause, _after) in launches:
        if work == "marker":
            continue
        args = {"op": op, "launched at": f"{file}:{line}" if file else "(not from Python)", "work": work,
                "bound": bound, "of peak": round(peak, 4), "FLOPs": flops, "bytes": nbytes,
                "host launched it at (us)": launched * 1e6, "waited for": cause}
        if collective is not None:
            args.update(collective=collective, ranks=ranks)
        events.append({"name": span_name(kernel, op) if work != "collective" else collective,
                       "cat": f"simulated {work}",
                       "ph": "X", "ts": start * 1e6, "dur": (end - start) * 1e6, "args": args,
                       "pid": f"simulated {profile}: simhpu:{device}", "tid": f"stream {stream}"})
    return events
