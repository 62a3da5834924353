# Source: https://github.com/sgl-project/sglang/pull/16493 (remove non_blocking=True from a GPU->CPU copy not followed by a synchronisation)
"""A device->host copy of the sampled token ids with non_blocking=True, then
.tolist() on the result, with no synchronisation between: the list holds
whatever the pinned buffer held before the copy. The fix makes the copy
blocking."""
import torch

from race_corpus.common import D, busy

SIDES = ("the host read pinned memory", "aten::_copy_from")


def sampled_ids(non_blocking):
    next_token_ids = torch.arange(1, 65, device=D) * 7
    busy(torch.simhpu.current_stream())
    ids = next_token_ids.to("cpu", non_blocking=non_blocking).tolist()
    return ids == [7 * i for i in range(1, 65)]


def racy():
    return sampled_ids(non_blocking=True)


def fixed():
    return sampled_ids(non_blocking=False)
