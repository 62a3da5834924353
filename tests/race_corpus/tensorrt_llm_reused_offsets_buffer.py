# Source: https://github.com/NVIDIA/TensorRT-LLM/pull/15546 (KVCacheManager.copy_batch_block_offsets: stage through a fresh host buffer)
"""Each iteration's KV block offsets went to the device by a non_blocking copy
from one pinned host buffer, overwritten in place every call. Under the overlap
scheduler the host runs an iteration ahead, so the next overwrite could clobber
the source of the previous, still pending, copy. The fix stages each iteration
through a fresh host buffer."""
import torch

from race_corpus.common import D, busy

SIDES = ("the host wrote pinned memory", "aten::_copy_from")


class KVCacheManager:
    def __init__(self, fresh_buffer):
        self.fresh_buffer = fresh_buffer
        self.host_kv_cache_block_offsets = torch.zeros(512, dtype=torch.int32, pin_memory=True)

    def copy_batch_block_offsets(self, device_offsets, iteration):
        host = torch.zeros(512, dtype=torch.int32, pin_memory=True) if self.fresh_buffer \
            else self.host_kv_cache_block_offsets
        host.fill_(iteration)  # the host writes this iteration's page tables
        device_offsets.copy_(host, non_blocking=True)


def overlap_scheduler(fresh_buffer):
    manager = KVCacheManager(fresh_buffer)
    seen = []
    for iteration in range(3):
        offsets = torch.empty(512, dtype=torch.int32, device=D)
        busy(torch.simhpu.current_stream(), 5_000)  # the previous iteration's forward
        manager.copy_batch_block_offsets(offsets, iteration)
        seen.append(offsets.sum())  # the attention kernel indexes with them
    return [int(s) for s in seen] == [512 * i for i in range(3)]


def racy():
    return overlap_scheduler(fresh_buffer=False)


def fixed():
    return overlap_scheduler(fresh_buffer=True)
