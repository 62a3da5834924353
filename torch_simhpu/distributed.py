"""torch.distributed on simhpu: the "simccl" process-group backend.

Importing torch_simhpu registers it as the default backend of simhpu tensors, so
each of these gives simhpu tensors to simccl (and CPU tensors to gloo where named):

    dist.init_process_group(device_id=torch.device("simhpu", local_rank))
    dist.init_process_group("cpu:gloo,simhpu:simccl")
    dist.init_process_group("simccl")        # CPU tensors go to its gloo transport

Collectives are device work on each device's communication stream
(csrc/distributed/collective.h); the transport is gloo over the same ranks.
"""

from __future__ import annotations

import torch.distributed as dist

BACKEND_NAME = "simccl"


def _create_backend(options, _backend_options):
    """The creator torch.distributed calls for each process group that uses simccl."""
    from torch_simhpu import _C

    transport = dist.ProcessGroupGloo(options.store, options.group_rank, options.group_size, options.timeout)
    return _C._ProcessGroupSimHPU(transport, options.group_rank, options.group_size)


def register() -> None:
    if not dist.is_available() or not dist.is_gloo_available():
        return  # a torch built without distributed or gloo: nothing to build on
    if BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, extended_api=True, devices=["simhpu", "cpu"])
