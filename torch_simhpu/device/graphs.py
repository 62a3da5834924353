"""Graph capture and replay: torch.simhpu.Graph, shaped like torch.cuda.CUDAGraph.

While a thread captures, the kernels it launches on the capturing stream are
recorded instead of run; replay() queues the whole recording as ONE launch
record, which the stream's worker runs in order. The captured kernels keep the
memory they use for as long as the graph exists (its memory pool), so tensors
made during the capture are the graph's static outputs: each replay rewrites them.

    g = torch.simhpu.Graph()
    static_x = torch.zeros(8, device="simhpu")
    with torch.simhpu.graph(g):
        static_y = static_x.sin() * 2
    static_x.copy_(new_x)
    g.replay()            # static_y now holds sin(new_x) * 2

What cannot be captured raises while capturing: anything that makes the host
wait for the device (.item(), .cpu(), printing a tensor, operators whose output
size depends on the data) and launches on another stream.
"""
from __future__ import annotations

import contextlib
import itertools

import torch

from torch_simhpu import _C
from torch_simhpu.device.streams import stream as use_stream

_pool_ids = itertools.count(1)


def graph_pool_handle() -> tuple[int, int]:
    """A handle naming a memory pool, to share between graphs (see Graph.capture_begin)."""
    return (0, next(_pool_ids))


class Graph:
    """A captured sequence of launches, replayed with one queue operation."""

    def __init__(self, keep_graph: bool = False) -> None:
        self._captured = None
        self._capturing = False
        self._pool = None

    def capture_begin(self, pool=None, capture_error_mode: str = "thread_local") -> None:
        """Start recording this thread's launches on the current stream.

        `pool` is accepted for torch.cuda compatibility: a graph's memory is the
        memory its kernels touch, held until reset(), so graphs never share it.
        Only the "thread_local" capture mode exists: other threads launch as usual."""
        if capture_error_mode not in ("thread_local", "global", "relaxed"):
            raise ValueError(f"Graph.capture_begin: unknown capture_error_mode {capture_error_mode!r}")
        if self._captured is not None:
            raise RuntimeError("Graph.capture_begin: this graph already holds a capture; call reset() first")
        _C._begin_graph_capture()
        self._capturing = True
        self._pool = pool if pool is not None else graph_pool_handle()

    def capture_end(self) -> None:
        if not self._capturing:
            raise RuntimeError("Graph.capture_end: capture_begin was not called")
        self._capturing = False
        self._captured = _C._end_graph_capture()

    def _abandon_capture(self) -> None:
        self._capturing = False
        try:
            _C._end_graph_capture()
        except RuntimeError:
            pass  # the capture had failed: what failed it is being raised already

    def replay(self) -> None:
        """Queue the captured launches on the current stream, as one launch."""
        if self._captured is None:
            raise RuntimeError("Graph.replay: nothing was captured (use torch.simhpu.graph(g) first)")
        self._captured.replay()

    def reset(self) -> None:
        """Drop the capture and the memory it holds."""
        if self._capturing:
            raise RuntimeError("Graph.reset: the graph is still being captured")
        self._captured = None

    def pool(self):
        return self._pool

    @property
    def kernel_count(self) -> int:
        """Kernels one replay runs."""
        return 0 if self._captured is None else self._captured.kernel_count


@contextlib.contextmanager
def graph(simhpu_graph: Graph, pool=None, stream: torch.Stream | None = None,
          capture_error_mode: str = "thread_local"):
    """Capture the launches of the block into `simhpu_graph` (on `stream` if given).

    As torch.cuda.graph does, waits for the device first, so the capture starts
    from finished work and earlier failures are reported here."""
    torch.simhpu.synchronize()
    with use_stream(stream):
        simhpu_graph.capture_begin(pool=pool, capture_error_mode=capture_error_mode)
        try:
            yield simhpu_graph
        except BaseException:
            simhpu_graph._abandon_capture()  # the block's error is the one to report
            raise
        simhpu_graph.capture_end()
