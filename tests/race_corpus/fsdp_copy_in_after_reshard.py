# Source: https://github.com/pytorch/pytorch/pull/197827 (FSDP2 all-gather test: order the copy-in after the post-forward reshard)
"""FSDP2's post-forward reshard clones each parameter's chunk on the current
stream; the all-gather copy-in kernel then reads the clones on its own stream.
Driven by hand, nothing ordered the two, so stale chunks were gathered. The fix
makes the copy-in stream wait for the current stream (as unshard() does with
the reshard event)."""
import torch

from race_corpus.common import D, busy

SIDES = ("aten::cat", "that aten::_copy_from", "nothing orders the two")


def all_gather_after_reshard(ordered):
    all_gather_copy_in_stream = torch.simhpu.Stream()
    all_gather_copy_in_stream.wait_stream(torch.simhpu.current_stream())
    params = [torch.full((256,), float(i + 1), device=D) for i in range(3)]
    busy(torch.simhpu.current_stream())
    chunks = [p.clone() for p in params]  # _to_sharded_post_forward
    if ordered:
        all_gather_copy_in_stream.wait_stream(torch.simhpu.current_stream())
    with torch.simhpu.stream(all_gather_copy_in_stream):
        all_gather_input = torch.cat(chunks)  # foreach_all_gather's copy-in
    for c in chunks:
        c.record_stream(all_gather_copy_in_stream)
    torch.simhpu.current_stream().wait_stream(all_gather_copy_in_stream)
    expected = torch.cat([torch.full((256,), float(i + 1)) for i in range(3)])
    return torch.equal(all_gather_input.cpu(), expected)


def racy():
    return all_gather_after_reshard(ordered=False)


def fixed():
    return all_gather_after_reshard(ordered=True)
