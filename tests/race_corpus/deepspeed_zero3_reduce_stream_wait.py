# Source: https://github.com/deepspeedai/DeepSpeed/pull/7898 (ZeRO-3: wait for the current stream, not the default one)
"""ZeRO-3's reduce-and-partition stream waited for the *default* stream before
copying a gradient into its bucket, but the backward op that wrote the gradient
ran on another stream (the one its forward's all-gather used). The copy read
the gradient before it was written. The fix waits for the current stream."""
import torch

from race_corpus.common import D, busy

SIDES = ("aten::_copy_from on", "reads a Float tensor of shape [1024] that aten::mul", "nothing orders the two")


def add_grad_to_bucket(wait_current):
    reduce_and_partition_stream = torch.simhpu.Stream()
    backward_stream = torch.simhpu.Stream()
    activation = torch.full((1024,), 2.0, device=D)
    bucket = torch.zeros(1024, device=D)
    backward_stream.wait_stream(torch.simhpu.current_stream())
    reduce_and_partition_stream.wait_stream(torch.simhpu.current_stream())
    busy(backward_stream)
    with torch.simhpu.stream(backward_stream):  # autograd runs the backward op on its forward's stream
        grad = activation * 3
        waited = torch.simhpu.current_stream() if wait_current else torch.simhpu.default_stream()
        reduce_and_partition_stream.wait_stream(waited)
        with torch.simhpu.stream(reduce_and_partition_stream):
            bucket.copy_(grad)
        grad.record_stream(reduce_and_partition_stream)
    torch.simhpu.current_stream().wait_stream(reduce_and_partition_stream)
    return torch.equal(bucket.cpu(), torch.full((1024,), 6.0))


def racy():
    return add_grad_to_bucket(wait_current=False)


def fixed():
    return add_grad_to_bucket(wait_current=True)
