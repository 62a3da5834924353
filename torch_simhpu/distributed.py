"""torch.distributed on simhpu: the "simccl" process-group backend.

Importing torch_simhpu registers it as the default backend of simhpu tensors, so
each of these gives simhpu tensors to simccl (and CPU tensors to gloo where named):

    dist.init_process_group(device_id=torch.device("simhpu", local_rank))
    dist.init_process_group("cpu:gloo,simhpu:simccl")
    dist.init_process_group("simccl")        # CPU tensors go to its gloo transport

Collectives are device work on a communication stream of their group's
(csrc/distributed/collective.h); the transport is gloo over the same ranks.
"""

from __future__ import annotations

import torch.distributed as dist
from torch_simhpu._device_name import DEVICE_TYPE

try:  # (what an absent peer is: a transport that completes at once, having moved nothing)
    from torch._C._distributed_c10d import FakeProcessGroup
except ImportError:  # a torch built without distributed
    FakeProcessGroup = None

BACKEND_NAME = "simccl"


def _create_backend(options, _backend_options):
    """The creator torch.distributed calls for each process group that uses simccl."""
    from torch_simhpu import _C

    from torch_simhpu.simulation import simulated_ranks
    world_ranks = list(options.global_ranks_in_group or range(options.group_size))
    if simulated_ranks.world() is not None:  # the peers are not there (torch_simhpu/simulation/simulated_ranks.py)
        transport = FakeProcessGroup._create_internal(options.group_rank, options.group_size)
        return _C._ProcessGroupSimHPU(transport, options.group_rank, options.group_size, world_ranks, True)
    transport = dist.ProcessGroupGloo(options.store, options.group_rank, options.group_size, options.timeout)
    return _C._ProcessGroupSimHPU(transport, options.group_rank, options.group_size, world_ranks)


def register() -> None:
    if not dist.is_available() or not dist.is_gloo_available():
        return  # a torch built without distributed or gloo: nothing to build on
    if BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, extended_api=True, devices=[DEVICE_TYPE, "cpu"])
