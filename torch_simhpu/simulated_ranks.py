"""Simulated ranks: one process plays rank r of a world of N, with no peers present.

    python -m torch_simhpu.simulation --profile h100-sxm --world 256 --rank 0 train.py
    SIMHPU_SIMULATED_WORLD=256 SIMHPU_SIMULATED_RANK=0 SIMHPU_DEVICE_PROFILE=h100-sxm SIMHPU_EXECUTE=0 python train.py

The script's own torch.distributed calls run unchanged: init_process_group
(env://) finds a store this process serves, as a torchelastic agent's, and
every simccl group, the world's and DeviceMesh's sub-groups alike, gets torch's
FakeProcessGroup as its transport. A collective is launched on the
group's communication stream as ever and priced on the profile's fabric for its group's
world ranks (a tensor-parallel group within a node, a data-parallel one across
nodes), and moves no data: simulated ranks run under phantom execution
(torch_simhpu/phantom.py), where no values are computed anyway.

The process has one device, simhpu:0, whatever its rank: LOCAL_RANK is 0.
"""
from __future__ import annotations

import os

WORLD = "SIMHPU_SIMULATED_WORLD"
RANK = "SIMHPU_SIMULATED_RANK"

_store = None  # the store this process serves to its own init_process_group


def world() -> int | None:
    """The simulated world's size, or None when this process is a real rank."""
    value = os.environ.get(WORLD, "").strip()
    return int(value) if value else None


def start(world_size: int, rank: int) -> None:
    """Makes this process rank `rank` of `world_size`, before the script's init_process_group."""
    global _store
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"simulated ranks: the rank must be in [0, {world_size}) and the world at least 1, "
                         f"got rank {rank} of {world_size}")
    import torch.distributed as dist

    # A store served here; the script's env:// rendezvous connects to it as to a
    # torchelastic agent's, so nothing waits for the ranks that are not there.
    _store = dist.TCPStore("127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False)
    os.environ.update({
        WORLD: str(world_size), RANK: str(rank),
        "RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
        "GROUP_RANK": str(rank), "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": str(world_size),
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_store.port), "TORCHELASTIC_USE_AGENT_STORE": "True",
    })


def _start_from_environment() -> None:
    """SIMHPU_SIMULATED_WORLD=N (SIMHPU_SIMULATED_RANK=r, 0 by default)."""
    size = world()
    if size is None or _store is not None:
        return
    from torch_simhpu import phantom  # (started from the environment just before: see _device_registration)

    if not phantom.enabled():
        raise ValueError(f"{WORLD}: simulated ranks run under phantom execution on a part: "
                         "set SIMHPU_DEVICE_PROFILE=... and SIMHPU_EXECUTE=0 too")
    start(size, int(os.environ.get(RANK, "0") or 0))
