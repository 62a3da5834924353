# Source: https://github.com/NVIDIA/apex/issues/304 (apex's ImageNet example, data_prefetcher)
"""The prefetcher copies and normalises the next batch on its own stream; the
training loop waits for that stream and uses the batch on the current one. The
batch's memory belongs to the prefetch stream's pool: once the loop drops it,
the prefetch stream's next batch may take the same block while the loop's
kernels still read it. The fix records the batch on the current stream."""
import torch

from race_corpus.common import D, busy

SIDES = ("aten::sum", "stream 0", "took memory again")


class data_prefetcher:
    def __init__(self, loader, record):
        self.loader = iter(loader)
        self.stream = torch.simhpu.Stream()
        self.record = record
        self.preload()

    def preload(self):
        try:
            self.next_input = next(self.loader)
        except StopIteration:
            self.next_input = None
            return
        with torch.simhpu.stream(self.stream):
            self.next_input = self.next_input.to(D, non_blocking=True)
            self.next_input = self.next_input.float().sub_(0.5).mul_(2.0)

    def next(self):
        torch.simhpu.current_stream().wait_stream(self.stream)
        input = self.next_input
        if input is not None and self.record:
            input.record_stream(torch.simhpu.current_stream())
        self.preload()
        return input


def train(record):
    batches = [torch.full((4096,), float(i)) for i in range(4)]
    prefetcher = data_prefetcher(batches, record)
    sums = []
    input = prefetcher.next()
    while input is not None:
        busy(torch.simhpu.current_stream(), 5_000)  # the model's forward: the loop runs behind the host
        sums.append(input.sum())
        input = prefetcher.next()  # drops the batch; the prefetch stream takes memory for the next
    return all(float(s) == 4096 * (2.0 * i - 1.0) for i, s in enumerate(sums))


def racy():
    return train(record=False)


def fixed():
    return train(record=True)
