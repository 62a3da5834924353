"""Object collectives between simulated ranks: the objects go through a store, the launches are priced.

torch.distributed's object collectives (send_object_list, recv_object_list,
broadcast_object_list, all_gather_object) pickle objects into byte tensors and move those; between
simulated ranks a collective moves no data (torch_simhpu/simulation/simulated_ranks.py), so a receiver would
unpickle nothing. Here each of them launches what torch's own does (a tensor of sizes, then the
bytes, on the group's device: priced and placed on the joined clocks as ever) and takes the objects
themselves from the store the joined processes share (SIMHPU_JOIN_STORE):

- a rank another process plays answers with its own objects, through the store;
- a rank no process plays cannot be asked: in an all_gather_object it is taken to be alike this
  rank (its object is this rank's); a send to it is dropped; a receive or broadcast from it is
  refused, naming the call and the rank (play it too: --rank 0,3).

torch.distributed.pipelining's stages exchange their shapes this way; a process per stage (joined
clocks) then runs its schedules unchanged.
"""
from __future__ import annotations

import functools
import pickle

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

_state: dict = {}


def install(rank: int, played: list[int], store) -> None:
    """Object collectives answered through `store` (a torch.distributed Store the processes playing
    `played` share, or None: this process plays `rank` alone)."""
    _state.update(rank=rank, played=set(played), store=store, counters={})
    for name in ("send_object_list", "recv_object_list", "broadcast_object_list", "all_gather_object"):
        if not getattr(getattr(dist, name), "_simhpu", False):
            replacement = globals()[f"_{name}"]
            replacement._simhpu = True
            setattr(dist, name, replacement)
            setattr(c10d, name, replacement)


def _next_key(*parts) -> str:
    """The store key of the next call between these parties: each process counts its calls the same."""
    counters = _state["counters"]
    counters[parts] = counters.get(parts, 0) + 1
    return "simhpu-objects/" + "/".join(map(str, parts)) + f"/{counters[parts]}"


def _publish(key: str, objects) -> bytes:
    data = pickle.dumps(objects)
    if _state["store"] is not None:
        _state["store"].set(key, data)
    return data


def _fetch(key: str, call: str, peer: int):
    if peer not in _state["played"] or _state["store"] is None:
        raise RuntimeError(f"torch.distributed.{call}: rank {peer}'s objects are unknown here: no process plays it "
                           f"(this one plays rank {_state['rank']}). Play it too (--rank {_state['rank']},{peer}), "
                           "so the objects go through the store the joined processes share.")
    return _state["store"].get(key)


def _global(group, peer: int | None, group_peer: int | None) -> int:
    if group_peer is None:
        return peer
    return dist.get_global_rank(group or c10d._get_default_group(), group_peer)


def _launch_transfer(op, size: int, count: int, peer: int, group) -> None:
    """What torch's object collective launches for `count` objects of `size` pickled bytes: their sizes, then the bytes."""
    device = c10d._get_object_coll_device(group)
    op(torch.empty(count, dtype=torch.long, device=device), peer, group=group)
    op(torch.empty(size, dtype=torch.uint8, device=device), peer, group=group)


@functools.wraps(c10d.send_object_list)
def _send_object_list(object_list, dst=None, group=None, device=None, group_dst=None, use_batch=False):
    dst = _global(group, dst, group_dst)
    data = _publish(_next_key("p2p", _state["rank"], dst), list(object_list))
    _launch_transfer(dist.send, len(data), len(object_list), dst, group)


@functools.wraps(c10d.recv_object_list)
def _recv_object_list(object_list, src=None, group=None, device=None, group_src=None, use_batch=False):
    if src is None and group_src is None:
        raise RuntimeError("torch.distributed.recv_object_list from any rank (src=None) between simulated ranks: "
                           "name the sender")
    src = _global(group, src, group_src)
    data = _fetch(_next_key("p2p", src, _state["rank"]), "recv_object_list", src)
    _launch_transfer(dist.recv, len(data), len(object_list), src, group)
    object_list[:] = pickle.loads(data)
    return src


@functools.wraps(c10d.broadcast_object_list)
def _broadcast_object_list(object_list, src=None, group=None, device=None, group_src=None):
    src = _global(group, 0 if src is None and group_src is None else src, group_src)
    members = tuple(dist.get_process_group_ranks(group or c10d._get_default_group()))
    key = _next_key("broadcast", *members, src)
    if src == _state["rank"]:
        data = _publish(key, list(object_list))
    else:
        data = _fetch(key, "broadcast_object_list", src)
        object_list[:] = pickle.loads(data)
    device_ = c10d._get_object_coll_device(group)
    dist.broadcast(torch.empty(len(object_list), dtype=torch.long, device=device_), src, group=group)
    dist.broadcast(torch.empty(len(data), dtype=torch.uint8, device=device_), src, group=group)


@functools.wraps(c10d.all_gather_object)
def _all_gather_object(object_list, obj, group=None):
    members = list(dist.get_process_group_ranks(group or c10d._get_default_group()))
    key = _next_key("all_gather", *members)
    mine = _publish(f"{key}/{_state['rank']}", obj)
    sizes = []
    for i, member in enumerate(members):
        if member == _state["rank"] or member not in _state["played"] or _state["store"] is None:
            object_list[i] = pickle.loads(mine)  # (a rank no process plays: alike this one)
            sizes.append(len(mine))
        else:
            data = _state["store"].get(f"{key}/{member}")
            object_list[i] = pickle.loads(data)
            sizes.append(len(data))
    device = c10d._get_object_coll_device(group)
    dist.all_gather_into_tensor(torch.empty(len(members), dtype=torch.long, device=device),
                                torch.empty(1, dtype=torch.long, device=device), group=group)
    dist.all_gather_into_tensor(torch.empty(len(members) * max(sizes), dtype=torch.uint8, device=device),
                                torch.empty(max(sizes), dtype=torch.uint8, device=device), group=group)
