"""torch.simhpu.trace(path): a Chrome trace of the kernels launched inside the
block, with how long each waited in its stream's queue and how long it ran.
Open the file in chrome://tracing or https://ui.perfetto.dev."""
from __future__ import annotations

import contextlib
import json
import os

from torch_simhpu import _C


@contextlib.contextmanager
def trace(path: str | os.PathLike):
    """Blocks may nest: each file holds the kernels launched while its own block ran.

    The file is written when the block ends, whether or not a kernel failed in it;
    the failure is raised after the file is written. A path that cannot be written
    is refused at the start of the block.
    """
    file = open(os.fspath(path), "w")  # noqa: SIM115 - closed below, after the block
    mark = _C._start_trace()
    try:
        yield
    finally:
        with file:
            entries = _C._stop_trace(mark)  # waits for the kernels launched so far
            document = {"traceEvents": chrome_events(entries), "displayTimeUnit": "ms"}
            if _C._chaos_seed() is not None:  # the timing came from these delays
                document["otherData"] = {"SIMHPU_CHAOS": _C._chaos_seed()}
            json.dump(document, file)
    _C._synchronize_all()  # a kernel of the block that failed is raised here


def chrome_events(entries) -> list[dict]:
    """Two spans per kernel: waiting in the queue, then running, on the stream's row."""
    events = []
    for kernel, op, file, line, device, stream, queued, start, end, _correlation in entries:
        pid = f"simhpu:{device}"
        args = {"op": op, "launched at": f"{file}:{line}" if file else "(not from Python)",
                "queued (us)": (start - queued) / 1e3, "ran (us)": (end - start) / 1e3}
        events.append({"name": f"{kernel} (queued)", "cat": "queue", "ph": "X", "ts": queued / 1e3,
                       "dur": (start - queued) / 1e3, "args": args, "pid": pid, "tid": f"stream {stream} queue"})
        events.append({"name": kernel, "cat": "kernel", "ph": "X", "ts": start / 1e3, "dur": (end - start) / 1e3,
                       "args": args, "pid": pid, "tid": f"stream {stream}"})
    return events
