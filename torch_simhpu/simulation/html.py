"""The simulation report as one HTML page: the text report, the timeline of the
steady step (each stream a row, the critical path outlined), a roofline plot of
the operators against the profile's peaks, and the memory at its peak by
category. The page is self-contained (no network): report.html draws it from the
JSON this module puts in it. It takes what it draws (Simulation.page_data), not the
run that made it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

TEMPLATE = Path(__file__).with_name("report.html")
MOST_LAUNCHES = 20_000  # drawn on the timeline; the longest are kept past it


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


def render(data: dict) -> str:
    """The page of a run's data (Simulation.page_data's, or joined_page_data's)."""
    # JSON inside a <script> element: no "<" may end the element early.
    text = json.dumps(data, allow_nan=False).replace("<", "\\u003c").replace(">", "\\u003e")
    return TEMPLATE.read_text().replace("__REPORT_DATA__", text.replace("&", "\\u0026"))


def write(data: dict, path: str | os.PathLike) -> Path:
    path = Path(path)
    path.write_text(render(data))
    return path


def write_joined(pages: dict[int, dict], path: str | os.PathLike) -> Path:
    path = Path(path)
    path.write_text(render(joined_page_data(pages)))
    return path
