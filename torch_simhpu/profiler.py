"""torch.simhpu.trace(path): a Chrome trace of the kernels launched inside the
block, with how long each waited in its stream's queue and how long it ran.
Open the file in chrome://tracing or https://ui.perfetto.dev."""
from __future__ import annotations

import contextlib
import json

from torch_simhpu import _C


@contextlib.contextmanager
def trace(path: str):
    _C._start_trace()
    try:
        yield
    finally:
        _C._synchronize_all()
        entries = _C._stop_trace()
        with open(path, "w") as f:
            json.dump({"traceEvents": chrome_events(entries), "displayTimeUnit": "ms"}, f)


def chrome_events(entries) -> list[dict]:
    """Two spans per kernel: waiting in the queue, then running, on the stream's row."""
    events = []
    for kernel, op, file, line, device, stream, queued, start, end in entries:
        pid = f"simhpu:{device}"
        args = {"op": op, "launched at": f"{file}:{line}" if file else "(not from Python)",
                "queued (us)": (start - queued) / 1e3, "ran (us)": (end - start) / 1e3}
        events.append({"name": f"{kernel} (queued)", "cat": "queue", "ph": "X", "ts": queued / 1e3,
                       "dur": (start - queued) / 1e3, "args": args, "pid": pid, "tid": f"stream {stream} queue"})
        events.append({"name": kernel, "cat": "kernel", "ph": "X", "ts": start / 1e3, "dur": (end - start) / 1e3,
                       "args": args, "pid": pid, "tid": f"stream {stream}"})
    return events
