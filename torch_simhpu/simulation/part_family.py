"""A part of a family priced from its sibling's calibration: the same die with other SMs enabled or
another clock (an H100 PCIe beside the SXM) does the same work a cycle per SM, so what was measured
on one holds on the other once its compute is scaled.

A profile states its die as ``"die": {"sms": 132, "boost_clock": 1.98e9}``. A profile that inherits
one (part_profiles._read_profile) and states another die gets every inherited compute-bound figure
scaled before its own fields are merged over them:

- rates the die's units set (FLOP/s of matrix and vector work, attention's curves, a memory class's
  units' rate) by its SMs x clock over its base's;
- times a unit spends in cycles (a GEMM tile's fixed time, a wave of attention blocks besides its
  FLOPs, a row in a norm's or a reduction's chain) by the base's clock over its own;
- what an element costs the whole die in index arithmetic (a strided operand's offset, a layout
  conversion) by the base's SMs x clock over its own.

What stays the base's, because the die does not set it: how many passes over memory a class's kernels
make (traffic), the least a kernel takes (floors: the memory's and the launch's latency),
efficiencies (fractions of a peak the part's own datasheet states), the kernel's fixed time, and
everything of the host and the fabric.
"""
from __future__ import annotations

import copy

_ATTENTION_PASSES = ("forward", "backward")


def scaled_to_die(base: dict, die: tuple[int, float], base_die: tuple[int, float]) -> dict:
    """`base` (a profile's raw JSON, before validation) as a part of die `die` would measure it."""
    sms, clock = die
    base_sms, base_clock = base_die
    rate = sms * clock / (base_sms * base_clock)  # the die's work a second
    cycle = base_clock / clock                     # a cycle's time
    out = copy.deepcopy(base)
    for rates in ("matrix_flops", "vector_flops"):
        if isinstance(out.get(rates), dict):
            out[rates] = {dtype: value * rate for dtype, value in out[rates].items()}
    attention = out.get("attention")
    if isinstance(attention, dict):
        curves = [attention] + [v for v in attention.values() if isinstance(v, dict)]
        for backend in curves:
            for direction in _ATTENTION_PASSES:
                curve = backend.get(direction)
                if not isinstance(curve, dict):
                    continue
                for name in ("flops", "causal_flops"):
                    if isinstance(curve.get(name), list):
                        curve[name] = [value * rate for value in curve[name]]
                if "wave_time" in curve:
                    curve["wave_time"] *= cycle
    for cost in (out.get("memory_classes") or {}).values():
        if isinstance(cost, dict):
            if cost.get("rate"):
                cost["rate"] *= rate
            if cost.get("row_step"):
                cost["row_step"] *= cycle
    units = out.get("matrix_units")
    if isinstance(units, dict):
        units["count"] = sms
        if units.get("tile_overhead"):
            units["tile_overhead"] *= cycle
    for per_element in ("strided_elementwise", "convolution_layout_conversion"):
        if out.get(per_element):
            out[per_element] /= rate
    out["die"] = {"sms": sms, "boost_clock": clock}
    return out
