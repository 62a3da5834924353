# Source: https://github.com/pytorch/pytorch/issues/127612 (a pinned source changed before its non_blocking copy ran)
"""b.copy_(a, non_blocking=True) from pinned memory, then a[-1].fill_(-1) on
the host: the copy reads its source when it runs, so the device may receive
the -1. The fix waits for the copy (an event) before changing the source."""
import torch

from race_corpus.common import D, busy

SIDES = ("the host wrote pinned memory", "aten::_copy_from")


def copy_then_mutate(wait):
    a = torch.ones(100_000, pin_memory=True)
    b = torch.zeros(100_000, device=D)
    busy(torch.simhpu.current_stream())
    b.copy_(a, non_blocking=True)
    if wait:
        done = torch.simhpu.Event()
        done.record()
        done.synchronize()
    a[-1].fill_(-1)
    return float(b[-1].item()) == 1.0


def racy():
    return copy_then_mutate(wait=False)


def fixed():
    return copy_then_mutate(wait=True)
