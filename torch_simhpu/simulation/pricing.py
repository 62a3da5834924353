"""What a call would cost on a part, without running it.

    torch.simhpu.price(torch.mm, a, b, profile="h100-sxm")       # a, b: tensors of any device, meta too
    torch.simhpu.price(model, x, profile="gaudi2")              # any callable: every kernel it launches
    torch.simhpu.price_collective("all_reduce", 2**30, ranks=1024, profile="h100-sxm")

price() runs the callable on simhpu under phantom execution (torch_simhpu/simulation/phantom.py):
its tensor arguments are stood in for by simhpu tensors of the same shapes, dtypes and
strides that hold no values, each kernel it launches is priced by the profile's
cost model as in a simulate() block, and nothing runs. The answer lists the
kernels with what bounds each (compute, memory, latency, the host link, the fabric)
and sums them by bound. Host reads of values inside the callable get placeholders
and are counted (Price.host_reads).

price_collective() prices one collective of a group of `ranks` devices laid out as
the profile's nodes (devices_per_node), split into its fixed latency and its
transfer time.

Simulated time's clocks are the program's: price() refuses while a profile is set
(inside simulate(), or under SIMHPU_DEVICE_PROFILE), rather than restart them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch.utils import _pytree as pytree

from torch_simhpu import _C
from torch_simhpu._device_name import DEVICE_TYPE
from torch_simhpu.simulation import phantom
from torch_simhpu.simulation.clocks import simulate
from torch_simhpu.simulation.part_profiles import load_profile
from torch_simhpu.simulation.report import Launch, _measure, _t, _union

BOUNDS = ("compute", "memory", "latency", "host-link", "fabric")


@dataclass(frozen=True)
class Price:
    """What a call costs on a part: its kernels, back to back on the device."""
    profile: str
    kernels: tuple[Launch, ...]
    host_reads: int  # host reads of device values the call made, answered with placeholders

    @property
    def seconds(self) -> float:
        """The device's time for the call's kernels (their spans' union: launch gaps left out)."""
        return _measure(_union(self.kernels))

    @property
    def flops(self) -> float:
        return sum(k.flops for k in self.kernels)

    @property
    def bytes(self) -> float:
        return sum(k.bytes for k in self.kernels)

    def by_bound(self) -> dict[str, float]:
        """Seconds of kernels by what bounds each."""
        out = dict.fromkeys(BOUNDS, 0.0)
        for k in self.kernels:
            out[k.bound] = out.get(k.bound, 0.0) + k.duration
        return out

    def __str__(self) -> str:
        lines = [f"on {self.profile}: {_t(self.seconds)} of device time in {len(self.kernels)} kernel(s); "
                 + ", ".join(f"{bound} {_t(s)}" for bound, s in self.by_bound().items() if s > 0)]
        for k in self.kernels:
            lines.append(f"  {k.op:<40} {_t(k.duration):>10} {k.bound:>9} {k.peak_fraction * 100:>6.1f}% of peak"
                         f"  {k.flops:.3g} FLOP  {k.bytes:.3g} B")
        if self.host_reads:
            lines.append(f"  ({self.host_reads} host read(s) of device values answered with placeholders)")
        return "\n".join(lines)


@dataclass(frozen=True)
class CollectivePrice:
    """One collective of a group, priced on the profile's fabric."""
    profile: str
    collective: str
    bytes: float
    ranks: int
    nodes: int
    seconds: float
    latency: float  # the part of `seconds` that does not grow with the bytes

    @property
    def transfer(self) -> float:
        return self.seconds - self.latency

    @property
    def bus_bandwidth(self) -> float:
        """Bytes per second as nccl-tests report it (busbw): what each link carries."""
        if self.seconds <= 0 or self.ranks <= 1:
            return 0.0
        factor = {"all_reduce": 2 * (self.ranks - 1) / self.ranks,
                  "all_gather": (self.ranks - 1) / self.ranks,
                  "reduce_scatter": (self.ranks - 1) / self.ranks}.get(self.collective, 1.0)
        return self.bytes * factor / self.seconds

    def __str__(self) -> str:
        return (f"{self.collective} of {self.bytes:.3g} B over {self.ranks} devices ({self.nodes} node(s)) on "
                f"{self.profile}: {_t(self.seconds)} (latency {_t(self.latency)}, transfer {_t(self.transfer)}; "
                f"bus bandwidth {self.bus_bandwidth / 1e9:.1f} GB/s)")


def price(fn, *args, profile: str | os.PathLike | dict, **kwargs) -> Price:
    """What `fn(*args, **kwargs)` would cost on `profile`'s part, priced and not run (see module doc)."""
    if not callable(fn):
        raise TypeError(f"torch.simhpu.price: expected a callable (an operator, a function, a module), "
                        f"got {type(fn).__name__}")
    if _C._simclock_profile_name() is not None or phantom.enabled():
        raise RuntimeError(
            "torch.simhpu.price: simulated time is on (a profile is set, inside simulate() or from "
            "SIMHPU_DEVICE_PROFILE), and pricing would restart its clocks; price outside it")
    checked = load_profile(profile)
    with simulate(checked, host_time="modelled", execute=False, _keep_capacity=True) as sim:
        args, kwargs = pytree.tree_map(_stand_in, (args, kwargs))
        if isinstance(fn, torch.nn.Module):  # its parameters and buffers stood in for too, the module untouched
            state = {name: _stand_in(t) for name, t in (*fn.named_parameters(), *fn.named_buffers())}
            torch.func.functional_call(fn, state, args, kwargs)
        else:
            fn(*args, **kwargs)
    kernels = tuple(k for k in sim.launches if k.work != "marker")
    return Price(checked["name"], kernels, sum(r.count for r in sim.host_reads))


def price_collective(collective: str, size: int | float | torch.Tensor, ranks: int, *,
                     profile: str | os.PathLike | dict, rank_stride: int = 1) -> CollectivePrice:
    """One `collective` (all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all, send/recv)
    of `size` bytes (or a tensor's) per rank over `ranks` devices, every `rank_stride`-th rank of the world:
    stride 1 packs them into as few nodes as the profile's devices_per_node allows."""
    nbytes = float(size.nbytes if isinstance(size, torch.Tensor) else size)
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"torch.simhpu.price_collective: ranks must be an int >= 1, got {ranks!r}")
    if isinstance(rank_stride, bool) or not isinstance(rank_stride, int) or rank_stride < 1:
        raise ValueError(f"torch.simhpu.price_collective: rank_stride must be an int >= 1, got {rank_stride!r}")
    if not nbytes >= 0:
        raise ValueError(f"torch.simhpu.price_collective: size must be bytes >= 0 or a tensor, got {size!r}")
    checked = load_profile(profile)
    try:
        seconds, latency, nodes = _C._simclock_collective_price(collective, nbytes, ranks, rank_stride, checked)
    except RuntimeError as error:
        raise ValueError(f"torch.simhpu.price_collective: {str(error).splitlines()[0]}") from None
    return CollectivePrice(checked["name"], collective, nbytes, ranks, nodes, seconds, latency)


def _stand_in(value):
    """A tensor argument as a simhpu tensor of its shape, dtype and strides, holding no values."""
    if not isinstance(value, torch.Tensor):
        return value
    stand_in = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=DEVICE_TYPE)
    phantom.forget_values(stand_in)  # (the caller's values, which phantom execution does not know)
    return stand_in.requires_grad_(value.requires_grad) if value.is_leaf else stand_in
