"""One launch per call of a compiled graph.

Everything a call launches on the device's current stream is collected and
queued as one launch record (runtime/capture.h); the stream's worker runs the
whole cluster as a unit. A host wait inside the call (a data-dependent
operator) launches what was collected so far, so the call still completes.
"""
from __future__ import annotations

import contextlib
import functools

from torch_simhpu import _C


@contextlib.contextmanager
def cluster(device_index: int):
    """Launches of the block on the device's current stream go to the queue as one record.
    Inside a graph capture or another cluster, the block's launches join that one."""
    if not _C._begin_cluster(device_index):
        yield
        return
    try:
        yield
    finally:
        _C._end_cluster()


def clustered(call, device_index: int):
    @functools.wraps(call)
    def run_as_cluster(args):
        with cluster(device_index):
            return call(args)

    return run_as_cluster
