# Source: https://github.com/OpenNMT/OpenNMT-py/issues/2295 (all_reduce_and_rescale_tensors: an async all_reduce, then div_ at once)
"""all_reduce_and_rescale_tensors flattened the gradients into a buffer,
all-reduced it with async_op=True and divided it by the denominator on the next
line, without waiting: the division and the collective both wrote the buffer,
in whatever order they ran (two-GPU validation numbers were off). The fix made
the all-reduce synchronous."""
import torch
import torch.distributed as dist

from race_corpus.common import D, busy

SIDES = ("all_reduce", "aten::div", "nothing orders the two")


def all_reduce_and_rescale_tensors(tensors, rescale_denom, async_op):
    buffer_t = torch.cat([t.reshape(-1) for t in tensors])
    offset = buffer_t.numel()
    dist.all_reduce(buffer_t[:offset], async_op=async_op)
    buffer_t.div_(rescale_denom)
    return buffer_t


def step(rank, world, async_op):
    device = torch.device(D, torch.simhpu.current_device())
    grads = [torch.full((4, 8), float(rank + 1), device=device), torch.full((16,), 2.0 * (rank + 1), device=device)]
    busy(torch.simhpu.current_stream(), 2_000 * (rank + 1))  # the ranks finish their backward at different times
    reduced = all_reduce_and_rescale_tensors(grads, world, async_op)
    total = sum(r + 1 for r in range(world))
    expected = torch.cat([torch.full((32,), total / world), torch.full((16,), 2.0 * total / world)])
    return torch.equal(reduced.cpu(), expected)


def racy(rank, world):
    return step(rank, world, async_op=True)


def fixed(rank, world):
    return step(rank, world, async_op=False)
