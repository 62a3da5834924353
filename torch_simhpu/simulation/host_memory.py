"""Host memory the program has freed, given back to the system while phantom execution runs.

glibc's malloc keeps what a program frees inside its heap for the next allocation; only
the heap's top goes back by itself. A phantom run of a large job is many processes on one
machine (a joined run forks one a pipeline stage), and each stage's program churns host
memory it then frees: torchtitan's data loader tokenises two million tokens a step at
131k-token sequences, at the step's start. Given back only at each step's end, CP 16's
sixteen heaps held 2-3 GB free through the step, a third of the job's 8.6 GB. So a
thread gives every free page back (_C._release_free_host_memory: malloc_trim) each
second while phantom execution is on: a transient's pages go back within a second of
their free, wherever in the program it freed them.
"""
from __future__ import annotations

import os
import threading

from torch_simhpu import _C

SECONDS_BETWEEN_RELEASES = 1.0

_stop: threading.Event | None = None


def start() -> None:
    """Gives freed host memory back each second from now until stop()."""
    global _stop
    if _stop is not None:
        return
    _stop = threading.Event()
    threading.Thread(target=_release_until, args=(_stop,), name="simhpu-host-memory", daemon=True).start()


def stop() -> None:
    global _stop
    if _stop is not None:
        _stop.set()
        _stop = None


def _release_until(stop: threading.Event) -> None:
    while not stop.wait(SECONDS_BETWEEN_RELEASES):
        if not _C._release_free_host_memory():
            return  # (this C library cannot: nothing to do)


def _again_in_a_forked_child() -> None:
    # (a fork keeps only the thread that forked: a child's releases start anew)
    global _stop
    if _stop is not None:
        _stop = None
        start()


os.register_at_fork(after_in_child=_again_in_a_forked_child)
