# Source: https://github.com/meta-pytorch/torchrec/pull/4231 (the record_stream benchmark reproducing NaNs in EMS)
"""A tensor made on the main stream is copied to the host on a copy stream,
then the main stream frees its memory (untyped_storage().resize_(0)) and
allocates new tensors. Without record_stream the caching allocator hands the
block to the new tensor while the copy stream may still be reading it, and the
host receives the new tensor's values. The fix records the tensor on the copy
stream before it is freed."""
import torch

from race_corpus.common import D, busy

SIDES = ("aten::_copy_from", "took memory again")


def offload(record):
    main, copy = torch.simhpu.current_stream(), torch.simhpu.Stream()
    gpu_tensor = torch.full((4096,), 7.0, device=D)
    cpu_buffer = torch.empty(4096, pin_memory=True)
    copy.wait_stream(main)
    busy(copy)  # the copy engine is behind
    with torch.simhpu.stream(copy):
        cpu_buffer.copy_(gpu_tensor, non_blocking=True)
    if record:
        gpu_tensor.record_stream(copy)
    gpu_tensor.untyped_storage().resize_(0)
    new = torch.full((4096,), -1.0, device=D)  # may reuse the block
    copy.synchronize()
    del new
    return torch.equal(cpu_buffer, torch.full((4096,), 7.0))


def racy():
    return offload(record=False)


def fixed():
    return offload(record=True)
