"""The simulation report as one HTML page: the text report, the timeline of the
steady step (each stream a row, the critical path outlined), a roofline plot of
the operators against the profile's peaks, and the memory at its peak by
category. The page is self-contained (no network): report.html draws it from the
JSON this module puts in it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from torch_simhpu.memory_ledger import MemoryBreakdown

if TYPE_CHECKING:
    from torch_simhpu.simulation import Simulation

TEMPLATE = Path(__file__).with_name("report.html")
MOST_LAUNCHES = 20_000  # drawn on the timeline; the longest are kept past it


def page_data(run: Simulation, top: int = 20) -> dict:
    start, end, _ = run.steady_window()
    if len(run.step_ends) >= 2:  # the last step alone: the steady one, drawn at a readable scale
        start = run.step_ends[-2]
    shown = [x for x in run.kernels() if x.end > start and x.start < end]
    note = f"({len(shown):,} launches"
    if len(shown) > MOST_LAUNCHES:
        shown = sorted(shown, key=lambda x: -x.duration)[:MOST_LAUNCHES]
        note += f"; the {MOST_LAUNCHES:,} longest drawn"
    critical = {x.id for x in run.critical_path()}
    note += ", the critical path outlined)" if critical else ")"
    streams = sorted({(x.device, x.stream) for x in shown})
    row_of = {s: i for i, s in enumerate(streams)}
    ops = sorted({x.op for x in shown})
    op_index = {op: i for i, op in enumerate(ops)}
    launches = [[row_of[(x.device, x.stream)], x.start, x.end, x.work, op_index[x.op], int(x.id in critical)]
                for x in shown]

    profile = run.profile_data
    peak, dtype = run.peak_flops()
    work_of = {}
    for x in run.kernels():
        work_of.setdefault(x.op, x.work)
    points = [{"op": row["op"], "intensity": row["flops"] / row["bytes"], "rate": row["flops"] / row["time"],
               "time": row["time"], "bound": row["bound"], "work": work_of[row["op"]]}
              for row in run.operators() if row["flops"] > 0 and row["bytes"] > 0 and row["time"] > 0]
    roofline = {"peak": peak, "vector_peak": profile["vector_flops"].get(dtype, profile["vector_flops"][torch.float32]),
                "bandwidth": profile["memory_bandwidth"], "points": points}

    memory, memory_note = None, None
    if isinstance(run.memory, MemoryBreakdown):
        memory = {"peak": run.memory.peak, "capacity": run.memory.capacity,
                  "categories": list(run.memory.by_category.items())}
    else:
        memory_note = f"memory by category: not available: {run.memory}"
    return {"title": f"simhpu simulation on {run.profile}", "summary": run.report(top), "window": [start, end],
            "streams": [f"device {d} stream {s}" for d, s in streams], "launches": launches, "ops": ops,
            "timeline_note": note, "roofline": roofline, "memory": memory, "memory_note": memory_note}


def joined_page_data(pages: dict[int, dict]) -> dict:
    """One page of a joined run from its ranks' pages (page_data's): the timeline a row a rank, all
    its streams on that row (a pipeline's stages one above the other, their bubbles the gaps), each
    rank's last step; the roofline and memory of the first rank; every rank's report."""
    ranks = sorted(pages)
    first = pages[ranks[0]]
    ops = sorted({op for page in pages.values() for op in page["ops"]})
    op_index = {op: i for i, op in enumerate(ops)}
    each = max(1, MOST_LAUNCHES // len(ranks))
    launches, shown = [], 0
    for row, rank in enumerate(ranks):
        page = pages[rank]
        own = page["launches"]
        shown += len(own)
        if len(own) > each:
            own = sorted(own, key=lambda x: x[1] - x[2])[:each]
        launches += [[row, start, end, work, op_index[page["ops"][op]], critical]
                     for _, start, end, work, op, critical in own]
    note = f"(a row a rank, all its streams on it; each rank's last step: {shown:,} launches"
    if len(launches) < shown:
        note += f"; the {each:,} longest of each rank drawn"
    return {"title": f"{first['title']}: ranks {', '.join(map(str, ranks))} joined "
                     f"(roofline and memory: rank {ranks[0]})",
            "summary": "\n\n".join(f"== rank {rank} ==\n{pages[rank]['summary']}" for rank in ranks),
            "window": [min(p["window"][0] for p in pages.values()), max(p["window"][1] for p in pages.values())],
            "streams": [f"rank {rank}" for rank in ranks], "launches": launches, "ops": ops,
            "timeline_note": note + ")", "roofline": first["roofline"], "memory": first["memory"],
            "memory_note": first["memory_note"]}


def render(run: Simulation, top: int = 20) -> str:
    return _render(page_data(run, top))


def _render(data: dict) -> str:
    # JSON inside a <script> element: no "<" may end the element early.
    text = json.dumps(data, allow_nan=False).replace("<", "\\u003c").replace(">", "\\u003e")
    return TEMPLATE.read_text().replace("__REPORT_DATA__", text.replace("&", "\\u0026"))


def write(run: Simulation, path: str | os.PathLike, top: int = 20) -> Path:
    path = Path(path)
    path.write_text(render(run, top))
    return path


def write_joined(pages: dict[int, dict], path: str | os.PathLike) -> Path:
    path = Path(path)
    path.write_text(_render(joined_page_data(pages)))
    return path
