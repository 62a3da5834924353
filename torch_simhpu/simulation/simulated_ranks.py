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
(torch_simhpu/simulation/phantom.py), where no values are computed anyway.

The process has one device, simhpu:0, whatever its rank: LOCAL_RANK is 0.

Where ranks differ (pipeline stages), several processes can each play one, with
their clocks joined (csrc/simclock/joined_clocks.h): each collective's and
transfer's simulated start is exchanged through a store they share, so a late
rank delays its peers. Opt-in:

    python -m torch_simhpu.simulation --profile h100-sxm --world 16 --rank 0,8 pipeline.py
    SIMHPU_JOINED_RANKS=0,8 SIMHPU_JOIN_STORE=host:port ... (one process per rank, the store served elsewhere)

The same variables join the clocks of a world whose ranks all run (torchrun, execution on): each
process's rank is then torchrun's RANK.

Object collectives (send_object_list, broadcast_object_list, all_gather_object, ...) between
simulated ranks take their objects through the joined processes' store
(torch_simhpu/simulation/simulated_objects.py): pipeline stages exchange their shapes so.
"""
from __future__ import annotations

import os

WORLD = "SIMHPU_SIMULATED_WORLD"
RANK = "SIMHPU_SIMULATED_RANK"
JOINED_RANKS = "SIMHPU_JOINED_RANKS"
JOIN_STORE = "SIMHPU_JOIN_STORE"
JOIN_TIMEOUT = "SIMHPU_JOIN_TIMEOUT"  # seconds a process waits for a joined peer to reach a call

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

    from torch_simhpu import _pytorch_gaps

    _pytorch_gaps.gloo_groups_without_peers()
    # A store served here; the script's env:// rendezvous connects to it as to a
    # torchelastic agent's, so nothing waits for the ranks that are not there.
    _store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)  # (no count: none waits)
    os.environ.update({
        WORLD: str(world_size), RANK: str(rank),
        "RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
        "GROUP_RANK": str(rank), "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": str(world_size),
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_store.port), "TORCHELASTIC_USE_AGENT_STORE": "True",
    })
    joined = joined_ranks()
    if joined is not None:
        _join_clocks(rank, joined)
    from torch_simhpu.simulation import simulated_objects

    simulated_objects.install(rank, joined or [rank], _join_store() if joined is not None else None)


def _join_store():
    """A client of the store the joined processes share (SIMHPU_JOIN_STORE, checked by _join_clocks)."""
    from datetime import timedelta

    import torch.distributed as dist

    host, _, port = os.environ[JOIN_STORE].strip().rpartition(":")
    timeout = float(os.environ.get(JOIN_TIMEOUT, "300") or 300)
    return dist.TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=timeout))


def parse_ranks(text: str, world_size: int | None = None, what: str = JOINED_RANKS) -> list[int]:
    """'0,8,16' (or '0-3,8'): the ranks, each in [0, world_size) when the world is known."""
    ranks: list[int] = []
    try:
        for part in filter(None, (p.strip() for p in text.split(","))):
            first, _, last = part.partition("-")
            ranks.extend(range(int(first), int(last or first) + 1))
    except ValueError:
        raise ValueError(f"{what}: expected ranks such as 0,8,16 or 0-3, got {text!r}") from None
    if not ranks or len(set(ranks)) != len(ranks):
        raise ValueError(f"{what}: expected distinct ranks such as 0,8,16, got {text!r}")
    if world_size is not None and not all(0 <= r < world_size for r in ranks):
        raise ValueError(f"{what}: every rank must be in [0, {world_size}), got {text!r}")
    return ranks


def joined_ranks() -> list[int] | None:
    """The ranks whose processes join their clocks (SIMHPU_JOINED_RANKS), or None."""
    text = os.environ.get(JOINED_RANKS, "").strip()
    return parse_ranks(text, world()) if text else None


def _join_clocks(rank: int, ranks: list[int]) -> None:
    from torch_simhpu import _C

    address = os.environ.get(JOIN_STORE, "").strip()
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{JOINED_RANKS} is set: {JOIN_STORE} must give the shared store as host:port, got {address!r}")
    if rank not in ranks:
        raise ValueError(f"{JOINED_RANKS}={os.environ[JOINED_RANKS]}: this process plays rank {rank}, which is not "
                         "among them")
    _C._simclock_join(host, int(port), rank, ranks, float(os.environ.get(JOIN_TIMEOUT, "300") or 300))


def _start_from_environment() -> None:
    """SIMHPU_SIMULATED_WORLD=N (SIMHPU_SIMULATED_RANK=r, 0 by default); or, in a world whose ranks are
    all real processes (torchrun's RANK), SIMHPU_JOINED_RANKS alone joins their simulated clocks."""
    size = world()
    if size is None:
        joined = joined_ranks()
        if joined is not None and _store is None and RANK not in os.environ:  # (else the command starts it)
            rank = os.environ.get("RANK", "").strip()
            if not rank.isdigit():
                raise ValueError(f"{JOINED_RANKS} is set: this process's rank is RANK (as torchrun sets it) or "
                                 f"{RANK} with {WORLD}; neither is set")
            _join_clocks(int(rank), joined)
        return
    if _store is not None:
        return
    from torch_simhpu.simulation import phantom  # (started from the environment just before: see _device_registration)

    if not phantom.enabled():
        raise ValueError(f"{WORLD}: simulated ranks run under phantom execution on a part: "
                         "set SIMHPU_DEVICE_PROFILE=... and SIMHPU_EXECUTE=0 too")
    start(size, int(os.environ.get(RANK, "0") or 0))
