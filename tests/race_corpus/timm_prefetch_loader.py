# Source: https://github.com/huggingface/pytorch-image-models/pull/2784 (timm's PrefetchLoader)
"""timm's PrefetchLoader moves each batch on its prefetch stream while the
consumer trains on the previous one. The consumer drops a batch its queued
kernels still read; the prefetch stream then allocates the next batch from its
own pool, where that block is free. The fix makes the prefetch stream wait for
the consumer's stream before each batch."""
import torch

from race_corpus.common import D, busy

SIDES = ("aten::mul", "took memory again", "stream 0")


def loader(wait_for_consumer):
    stream = torch.simhpu.Stream()
    first = True
    for i in range(4):
        batch = torch.full((4096,), float(i))
        if wait_for_consumer:
            stream.wait_stream(torch.simhpu.current_stream())
        with torch.simhpu.stream(stream):
            next_input = batch.to(D, non_blocking=True).float()
        if not first:
            yield input
        else:
            first = False
        torch.simhpu.current_stream().wait_stream(stream)
        input = next_input
    yield input


def train(wait_for_consumer):
    results = []
    for input in loader(wait_for_consumer):
        busy(torch.simhpu.current_stream(), 5_000)
        results.append((input * 3).sum())
        del input
    return all(float(r) == 3 * 4096 * i for i, r in enumerate(results))


def racy():
    return train(wait_for_consumer=False)


def fixed():
    return train(wait_for_consumer=True)
