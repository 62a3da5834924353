# Source: https://github.com/gazingstars123/Anima-Standalone-Trainer/pull/39 (review: defer transpose().contiguous() until the async gather completes)
"""For a sequence dimension other than 0, the gathered buffer was transposed
and made contiguous before PendingCollective.wait() ran: the copy read the
all-gather's output while the collective might still be writing it. The fix
finalises (transposes) after the wait."""
import torch
import torch.distributed as dist

from race_corpus.common import D, busy

SIDES = ("all_gather", "aten::_copy_from", "nothing orders the two")


class PendingCollective:
    def __init__(self, tensor, work, finalize=None):
        self.tensor, self.work, self.finalize = tensor, work, finalize

    def wait(self):
        if self.work is not None:
            self.work.wait()
            self.work = None
        if self.finalize is not None:
            self.tensor = self.finalize(self.tensor)
        return self.tensor


def gather_sequence(rank, world, finalize_after_wait):
    device = torch.device(D, torch.simhpu.current_device())
    local = torch.arange(8.0, device=device).reshape(2, 4) + 100 * rank  # [batch, seq]
    busy(torch.simhpu.current_stream(), 2_000 * (rank + 1))
    output0 = torch.empty(world * 4, 2, device=device)
    work = dist.all_gather_into_tensor(output0, local.t().contiguous(), async_op=True)
    regather = lambda t: t.t().contiguous()  # noqa: E731  (back to batch-first)
    if finalize_after_wait:
        pending = PendingCollective(output0, work, finalize=regather)
    else:
        pending = PendingCollective(regather(output0), work)
    result = pending.wait()
    expected = torch.cat([torch.arange(8.0).reshape(2, 4) + 100 * r for r in range(world)], dim=1)
    return torch.equal(result.cpu(), expected)


def racy(rank, world):
    return gather_sequence(rank, world, finalize_after_wait=False)


def fixed(rank, world):
    return gather_sequence(rank, world, finalize_after_wait=True)
