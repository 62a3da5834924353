# Source: https://github.com/stepfun-ai/SteptronOss/pull/38 (tensor_to_dict: synchronise before consuming a CUDA->CPU copy)
"""tensor_to_dict rebuilt tensors from a byte buffer on the communication
device: a device->host copy with non_blocking=True, whose CPU result the next
line consumed with copy_(). The copy lands in pinned memory later; the host
read what was there before. The fix synchronises before the buffer is read."""
import torch

from race_corpus.common import D, busy

SIDES = ("the host read pinned memory", "aten::_copy_from")


def tensor_to_dict(synchronise):
    buffer = torch.arange(256, dtype=torch.float32, device=D)
    busy(torch.simhpu.current_stream())  # the device is still working on what came before
    staged = buffer.to("cpu", non_blocking=True)
    if synchronise:
        torch.simhpu.synchronize()
    out = torch.empty(256)
    out.copy_(staged)  # the host reads the pinned buffer
    return torch.equal(out, torch.arange(256, dtype=torch.float32))


def racy():
    return tensor_to_dict(synchronise=False)


def fixed():
    return tensor_to_dict(synchronise=True)
