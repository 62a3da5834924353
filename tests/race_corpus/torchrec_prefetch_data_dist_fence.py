# Source: https://github.com/meta-pytorch/torchrec/pull/4191 (PrefetchTrainPipelineSparseDist's UVM cache race)
"""The prefetch stream fills the embedding cache; the data-dist stream then
starts the input distribution that reads it, with nothing ordering the two.
The fix fences them: data_dist_stream.wait_stream(prefetch_stream)."""
import torch

from race_corpus.common import D, busy

SIDES = ("aten::index_select", "aten::_copy_from", "nothing orders the two")


def pipeline(fence):
    prefetch_stream, data_dist_stream = torch.simhpu.Stream(), torch.simhpu.Stream()
    table = torch.arange(64.0, device=D).reshape(16, 4)
    cache = torch.zeros(16, 4, device=D)
    ids = torch.tensor([3, 1, 4, 1], device=D)
    prefetch_stream.wait_stream(torch.simhpu.current_stream())
    data_dist_stream.wait_stream(torch.simhpu.current_stream())
    busy(prefetch_stream)
    with torch.simhpu.stream(prefetch_stream):
        cache.copy_(table)  # prefetch_embeddings: the cache is filled
    if fence:
        data_dist_stream.wait_stream(prefetch_stream)
    with torch.simhpu.stream(data_dist_stream):
        dist_input = cache.index_select(0, ids)  # start_sparse_data_dist reads the cache
    torch.simhpu.current_stream().wait_stream(data_dist_stream)
    torch.simhpu.current_stream().wait_stream(prefetch_stream)
    return torch.equal(dist_input.cpu(), torch.arange(64.0).reshape(16, 4)[[3, 1, 4, 1]])


def racy():
    return pipeline(fence=False)


def fixed():
    return pipeline(fence=True)
