"""What a simulate() block saw: its launches (Launch) and the run (Simulation): the report, the
steady step, the critical path, collectives, operators by simulated time, the memory at its peak,
and the data the HTML page draws (html.py).
"""
from __future__ import annotations

import collections
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from torch_simhpu import _C
from torch_simhpu.device.memory import _format_bytes
from torch_simhpu.simulation import html, phantom
from torch_simhpu.simulation.memory_ledger import MemoryBreakdown, MemoryLedger


PROJECTED_SCALES = (8, 64, 1024)  # the group sizes a report projects each collective to


@dataclass(frozen=True, slots=True)  # (a step of a large job logs hundreds of thousands)
class Launch:
    """One launch on the simulated timeline (times in simulated seconds)."""
    id: int
    op: str
    kernel: str
    file: str | None
    line: int
    device: int
    stream: int
    work: str       # vector, matrix, host-to-device, device-to-host, collective, marker
    bound: str      # compute, memory, latency, host-link, fabric, none
    collective: str | None  # its kind, for a collective
    ranks: int
    dtype: torch.dtype | None  # what its FLOPs were priced for
    flops: float
    bytes: float
    peak_fraction: float
    launched: float
    start: float
    end: float
    cause: str      # what its start waited for: stream, event, host or peer (a joined process's rank)
    after: int      # the launch that ended then (-1: the host)

    @property
    def duration(self) -> float:
        return self.end - self.start


# Point-to-point operations (a pipeline's transfers): their collective kind (csrc/runtime/launch_work.cpp),
# and the names their launches and completion markers carry.
_POINT_TO_POINT_KIND, _POINT_TO_POINT_OPS = "send/recv", ("send", "recv")


class Simulation:
    """What a simulate() block recorded; report() prints it."""

    def __init__(self, profile_name: str):
        self.profile = profile_name
        self.profile_data: dict = {}  # the profile as load_profile checked it
        self.launches: list[Launch] = []
        self.begin = 0.0
        self.finish = 0.0
        self._mark = None
        self._projected: dict[tuple, float] = {}  # (collective, bytes, devices) -> seconds, priced at the end
        self.phantom = False  # whether the device's values were computed (see torch_simhpu/simulation/phantom.py)
        self.step_ends: list[float] = []  # simulated seconds: when the device finished each optimizer step's work
        self.tokens_per_step: int | None = None
        self.flops_per_token: float | None = None
        self.memory: MemoryBreakdown | str | None = None  # what the device's memory held at its peak
        self._ledger: MemoryLedger | None = None
        self._step_hooks = ()
        self.host_reads: list[phantom.HostRead] = []  # placeholder reads, under phantom execution
        self.known_launches = 0  # kernels run under phantom execution because the host knew their inputs
        self.peer_answers = 0  # of those, collectives answered for simulated peers from this rank's values
        self.routed_histograms = 0  # router histograms given SIMHPU_PHANTOM_ROUTING's distribution

    def _begin(self) -> None:
        self._mark = _C._simclock_start_log()
        self.begin = _C._simclock_host_now()
        device = torch.simhpu.current_device()
        self._ledger = MemoryLedger(device)
        self._ledger.begin()

        # Each optimizer step's end: every launch of the step is made by then, and the
        # device is done with them when its streams' clocks say. An optimizer that steps
        # others (torchtitan's container: one optimizer a pipeline stage's model part) is
        # one step, ended where the outermost ends.
        depth = [0]

        def step_began(optimizer, *_):
            depth[0] += 1

        def step_ended(optimizer, *_):
            depth[0] = max(0, depth[0] - 1)
            self._ledger.mark_optimizer(optimizer)
            if depth[0] == 0:
                self.step_ends.append(_C._simclock_device_now(device))

        self._step_hooks = (register_optimizer_step_pre_hook(step_began),
                            register_optimizer_step_post_hook(step_ended))

    def _end(self) -> None:
        for hook in self._step_hooks:
            hook.remove()
        try:
            torch.simhpu.synchronize()  # the host waits for the device: the block's end
        finally:
            self.finish = _C._simclock_host_now()  # (before the report's own work, which is not the program's)
            self.phantom = phantom.enabled()
            self.host_reads = phantom.host_reads() if self.phantom else []
            self.known_launches = phantom.known_values_launches() if self.phantom else 0
            self.peer_answers = phantom.peer_answers() if self.phantom else 0
            self.routed_histograms = phantom.routed_histograms() if self.phantom else 0
            self.memory = self._ledger.end()
            self.launches = _C._simclock_stop_log(self._mark, Launch)
            for x in self.launches:  # priced while the block's profile is still on
                if x.work == "collective":
                    for n in PROJECTED_SCALES:
                        self._projected[(x.collective, x.bytes, n)] = _C._simclock_collective_seconds(
                            x.collective, x.bytes, n)

    # -- what the report is made of -------------------------------------------------------

    @property
    def span(self) -> float:
        """Simulated seconds from the block's start to the host's end (after it synchronised)."""
        return self.finish - self.begin

    def steps(self) -> list[float]:
        """Simulated seconds of each optimizer step: the device's time from finishing the
        previous step's work (the first: from the block's start) to finishing this one's."""
        ends = [self.begin, *self.step_ends]
        return [b - a for a, b in zip(ends, ends[1:])]

    def step_time(self) -> float | None:
        """The steady step: the mean of the steps after the first (which holds the start-up:
        building, initialising, the first all-gathers), or the only one; None without steps."""
        steps = self.steps()
        if not steps:
            return None
        steady = steps[1:] or steps
        return sum(steady) / len(steady)

    def kernels(self) -> list[Launch]:
        return [x for x in self.launches if x.work != "marker"]

    def busy(self) -> float:
        """Simulated seconds some stream of the device was running a kernel (the union of their spans)."""
        return _measure(_union(self.kernels()))

    def waiting_for_host(self) -> float:
        """Simulated seconds the device (no stream running) sat idle until the host launched its next kernel."""
        return self._idle_until("host")

    def waiting_for_peers(self) -> float:
        """Simulated seconds the device sat idle until a joined peer (another process's rank) reached a
        collective or transfer with it (simulated_ranks.py: joined clocks)."""
        return self._idle_until("peer")

    def _idle_until(self, cause: str) -> float:
        idle, covered_to = 0.0, self.begin
        for x in sorted(self.kernels(), key=lambda k: k.start):
            if x.start > covered_to and x.cause == cause:
                idle += x.start - covered_to
            covered_to = max(covered_to, x.end)
        return idle

    def verdict(self) -> str:
        busy = self.busy()
        if self.span <= 0:
            return "nothing ran"
        if busy / self.span >= 0.5:
            return "device-bound"
        idle = self.span - busy
        if self.waiting_for_peers() >= idle / 2:
            return "peer-bound"
        return "host-bound" if self.waiting_for_host() >= idle / 2 else "wait-bound"

    def operators(self) -> list[dict]:
        """Per operator: launches, simulated time, FLOPs, bytes, what bounds it most, mean fraction of peak."""
        rows: dict[str, dict] = {}
        for x in self.kernels():
            row = rows.setdefault(x.op, {"op": x.op, "launches": 0, "time": 0.0, "flops": 0.0, "bytes": 0.0,
                                         "bounds": collections.Counter(), "peak": 0.0})
            row["launches"] += 1
            row["time"] += x.duration
            row["flops"] += x.flops
            row["bytes"] += x.bytes
            row["bounds"][x.bound] += x.duration
            row["peak"] += x.peak_fraction * x.duration
        for row in rows.values():
            row["bound"] = row["bounds"].most_common(1)[0][0]
            row["peak"] = row["peak"] / row["time"] if row["time"] > 0 else 0.0
        return sorted(rows.values(), key=lambda r: -r["time"])

    def critical_path(self) -> list[Launch]:
        """The chain of launches that set the end: from the last to end, back through what each waited for."""
        by_id = {x.id: x for x in self.launches}
        kernels = self.kernels()
        if not kernels:
            return []
        path = [max(kernels, key=lambda k: k.end)]
        while path[-1].after in by_id:
            path.append(by_id[path[-1].after])
        return path[::-1]

    def collectives(self) -> list[dict]:
        """Each kind and size of collective: its simulated time here and projected at PROJECTED_SCALES devices."""
        rows: dict[tuple, dict] = {}
        for x in self.launches:
            if x.work != "collective":
                continue
            row = rows.setdefault((x.collective, x.bytes, x.ranks),
                                  {"collective": x.collective, "bytes": x.bytes, "ranks": x.ranks, "count": 0,
                                   "time": x.duration})
            row["count"] += 1
        for row in rows.values():
            row["projected"] = {n: self._projected[(row["collective"], row["bytes"], n)] for n in PROJECTED_SCALES}
        return list(rows.values())

    def steady_window(self) -> tuple[float, float, int]:
        """(start, end, steps) of the device time the steady figures are taken over: the steps
        after the first, or the only step, or the whole block without steps."""
        if len(self.step_ends) >= 2:
            return self.step_ends[0], self.step_ends[-1], len(self.step_ends) - 1
        if self.step_ends:
            return self.begin, self.step_ends[0], 1
        return self.begin, max([self.finish, *(x.end for x in self.kernels())]), 1

    def communication(self) -> dict:
        """Per step of the steady window: seconds some collective ran, and the exposed part of
        them, when no compute kernel ran beside it (what overlapping would still have to hide)."""
        start, end, steps = self.steady_window()
        comm = _union(x for x in self.kernels() if x.work == "collective")
        compute = _union(x for x in self.kernels() if x.work in ("vector", "matrix"))
        total = _measure(_clip(comm, start, end))
        exposed = _measure(_subtract(_clip(comm, start, end), _clip(compute, start, end)))
        return {"time": total / steps, "exposed": exposed / steps, "window": (end - start) / steps}

    def pipeline_bubble(self) -> dict | None:
        """Per step of the steady window: seconds no compute kernel ran because this rank waited for
        a joined peer, on a rank that sends or receives (a pipeline stage's receive from the stage
        before it, or its send's partner): a compute gap counts when the launch that ended it
        waited, through the events and streams it was ordered after, on work whose start a joined
        peer delayed into the gap. None when no joined peer held compute up (one process, or no
        pipeline)."""
        return self._compute_held_by_peers() if self._transfers() else None

    def collective_waits(self) -> dict | None:
        """As pipeline_bubble, on a rank that neither sends nor receives: compute held up while a
        collective waited for a slower joined peer (an expert-parallel exchange waiting for the
        rank whose experts got the most tokens)."""
        return None if self._transfers() else self._compute_held_by_peers()

    def _transfers(self) -> bool:
        return any(x.collective == _POINT_TO_POINT_KIND or x.op in _POINT_TO_POINT_OPS for x in self.launches)

    def _compute_held_by_peers(self) -> dict | None:
        start, end, steps = self.steady_window()
        by_id = {x.id: x for x in self.launches}
        compute = [x for x in self.kernels() if x.work in ("vector", "matrix")]
        starting = {}
        for x in compute:  # the compute launch that ends each gap: the first to start at its end
            starting.setdefault(x.start, x)
        held, gaps = 0.0, 0
        for gap_start, gap_end in _subtract([(start, end)], _clip(_union(compute), start, end)):
            x = starting.get(gap_end)
            while x is not None and x.start > gap_start and x.cause in ("event", "stream", "peer"):
                if x.cause == "peer":
                    held += gap_end - gap_start
                    gaps += 1
                    break
                x = by_id.get(x.after)
        if not gaps:
            return None
        return {"time": held / steps, "gaps": gaps / steps, "window": (end - start) / steps}

    def peak_flops(self) -> tuple[float, torch.dtype | None]:
        """The profile's matrix peak (FLOP/s) for the dtype that did most of the matrix FLOPs."""
        table = self.profile_data["matrix_flops"]
        by_dtype = collections.Counter()
        for x in self.kernels():
            if x.work == "matrix" and x.dtype is not None:
                by_dtype[x.dtype] += x.flops
        dtype = by_dtype.most_common(1)[0][0] if by_dtype else None
        return table.get(dtype, table[torch.float32]), dtype

    def utilisation(self) -> dict:
        """FLOP rates over the steady window against the profile's peak: `hardware` counts every
        kernel's FLOPs (recomputation included); `model` (MFU) counts flops_per_token x
        tokens_per_step a step, when the tokens were given."""
        start, end, steps = self.steady_window()
        peak, dtype = self.peak_flops()
        done = sum(x.flops for x in self.kernels() if start < x.end <= end and x.work in ("vector", "matrix"))
        out = {"peak": peak, "dtype": dtype, "hardware": done / (end - start) / peak if end > start else 0.0,
               "model": None, "flops_per_token": None}
        step = self.step_time()
        per_token = self.flops_per_token
        if per_token is None and isinstance(self.memory, MemoryBreakdown) and self.memory.parameters_counted:
            per_token = 6.0 * self.memory.parameters_counted
        if self.tokens_per_step and step and per_token:
            out["model"] = per_token * self.tokens_per_step / step / peak
            out["flops_per_token"] = per_token
        return out

    def critical_path_breakdown(self) -> dict[str, float]:
        """Simulated seconds of the critical path by what took them: compute, communication,
        copies, and the gaps where its next launch waited for the host or for a joined peer."""
        path = self.critical_path()
        out = dict.fromkeys(("compute", "communication", "copies", "host", "peers"), 0.0)
        previous_end = self.begin
        for x in path:
            kind = {"vector": "compute", "matrix": "compute", "collective": "communication"}.get(x.work, "copies")
            out[kind] += x.duration
            if x.cause in ("host", "peer"):
                out[{"host": "host", "peer": "peers"}[x.cause]] += max(0.0, x.start - previous_end)
            previous_end = x.end
        return out

    def _planner_lines(self) -> list[str]:
        lines = []
        use = self.utilisation()
        if self.step_ends:
            text = (f"FLOP utilisation over the steady step(s): {use['hardware'] * 100:.1f}% of the "
                    f"{use['peak'] / 1e12:,.0f} TFLOP/s {_dtype_name(use['dtype'])} matrix peak (every kernel's FLOPs)")
            if use["model"] is not None:
                counted = ("flops_per_token" if self.flops_per_token else
                           f"6 x {_count(self.memory.parameters_counted)} parameters, attention's own left out")
                text += f"; MFU {use['model'] * 100:.1f}% ({_si(use['flops_per_token'])}FLOP a token: {counted})"
            lines.append(text)
        comm = self.communication()
        if comm["time"] > 0:
            lines.append(f"communication a step: {_t(comm['time'])}, exposed (no compute beside it) "
                         f"{_t(comm['exposed'])} = {_pct(comm['exposed'], comm['window'])} of the step")
        bubble = self.pipeline_bubble()
        if bubble is not None:
            lines.append(f"pipeline bubble a step: {_t(bubble['time'])} = {_pct(bubble['time'], bubble['window'])} "
                         f"of the step, no compute while waiting for a joined peer ({bubble['gaps']:.0f} gaps)")
        waits = self.collective_waits()
        if waits is not None:
            lines.append(f"waiting for slower joined peers at collectives a step: {_t(waits['time'])} = "
                         f"{_pct(waits['time'], waits['window'])} of the step, no compute meanwhile "
                         f"({waits['gaps']:.0f} gaps)")
        if isinstance(self.memory, MemoryBreakdown):
            m = self.memory
            verdict = "fits" if m.peak <= m.capacity else "does not fit"
            lines.append(f"memory at its peak: {_bytes(m.peak)} of {_bytes(m.capacity)} ({_pct(m.peak, m.capacity)}, "
                         f"{verdict}; the allocator reserved up to "
                         f"{_bytes(torch.simhpu.max_memory_reserved(m.device))})")
            for name, size in m.by_category.items():
                lines.append(f"  {name:<28} {_bytes(size):>12} {_pct(size, m.peak):>6}")
        elif self.memory:
            lines.append(f"memory by category: not available: {self.memory}")
        return lines

    def _step_lines(self) -> list[str]:
        step = self.step_time()
        if step is None:
            return []
        steps = self.steps()
        line = (f"{len(steps)} optimizer step(s); the step: {_t(step)}"
                + (f" (the mean of steps 2-{len(steps)}; the first took {_t(steps[0])})" if len(steps) > 1 else ""))
        if self.tokens_per_step:
            line += f"; {self.tokens_per_step / step:,.0f} tokens/s per device"
        return [line]

    def page_data(self, top: int = 20) -> dict:
        """What the HTML page (html.py) draws: the report, the steady step's timeline, the roofline
        of its operators and the memory at its peak."""
        start, end, _ = self.steady_window()
        if len(self.step_ends) >= 2:  # the last step alone: the steady one, drawn at a readable scale
            start = self.step_ends[-2]
        shown = [x for x in self.kernels() if x.end > start and x.start < end]
        note = f"({len(shown):,} launches"
        if len(shown) > html.MOST_LAUNCHES:
            shown = sorted(shown, key=lambda x: -x.duration)[:html.MOST_LAUNCHES]
            note += f"; the {html.MOST_LAUNCHES:,} longest drawn"
        critical = {x.id for x in self.critical_path()}
        note += ", the critical path outlined)" if critical else ")"
        streams = sorted({(x.device, x.stream) for x in shown})
        row_of = {s: i for i, s in enumerate(streams)}
        ops = sorted({x.op for x in shown})
        op_index = {op: i for i, op in enumerate(ops)}
        launches = [[row_of[(x.device, x.stream)], x.start, x.end, x.work, op_index[x.op], int(x.id in critical)]
                    for x in shown]

        profile = self.profile_data
        peak, dtype = self.peak_flops()
        work_of = {}
        for x in self.kernels():
            work_of.setdefault(x.op, x.work)
        points = [{"op": row["op"], "intensity": row["flops"] / row["bytes"], "rate": row["flops"] / row["time"],
                   "time": row["time"], "bound": row["bound"], "work": work_of[row["op"]]}
                  for row in self.operators() if row["flops"] > 0 and row["bytes"] > 0 and row["time"] > 0]
        roofline = {"peak": peak, "vector_peak": profile["vector_flops"].get(dtype, profile["vector_flops"][torch.float32]),
                    "bandwidth": profile["memory_bandwidth"], "points": points}

        memory, memory_note = None, None
        if isinstance(self.memory, MemoryBreakdown):
            memory = {"peak": self.memory.peak, "capacity": self.memory.capacity,
                      "categories": list(self.memory.by_category.items())}
        else:
            memory_note = f"memory by category: not available: {self.memory}"
        return {"title": f"simhpu simulation on {self.profile}", "summary": self.report(top), "window": [start, end],
                "streams": [f"device {d} stream {s}" for d, s in streams], "launches": launches, "ops": ops,
                "timeline_note": note, "roofline": roofline, "memory": memory, "memory_note": memory_note}

    def write_html(self, path: str | os.PathLike, top: int = 20) -> Path:
        """The report as an HTML page at `path`, with the timeline and a roofline plot (html.py)."""
        return html.write(self.page_data(top), path)

    def _phantom_words(self) -> str:
        if not self.phantom:
            return ""
        if not self.known_launches:
            return ", phantom: none ran"
        peers = (f" ({self.peer_answers} collectives answered as if every simulated peer sent what this rank sends)"
                 if self.peer_answers else "")
        return f", phantom: {self.known_launches} ran, over values the host knew{peers}"

    def report(self, top: int = 20) -> str:
        busy = self.busy()
        rank = os.environ.get("RANK")
        lines = [("" if rank is None else f"[rank {rank}] ") +
                 f"simulated on {self.profile}: {_t(self.span)} from the block's start to its end "
                 f"({len(self.kernels())} kernels{self._phantom_words()})",
                 f"device busy {_pct(busy, self.span)}, idle waiting for the host's launches "
                 f"{_pct(self.waiting_for_host(), self.span)}"
                 + (f", for joined peers {_pct(self.waiting_for_peers(), self.span)}"
                    if self.waiting_for_peers() > 0 else "") + f": {self.verdict()}",
                 *self._step_lines(),
                 *self._planner_lines(),
                 "",
                 f"{'operator':<44} {'launches':>8} {'time':>10} {'share':>6} {'bound':>9} {'of peak':>8}"]
        ops = self.operators()
        for row in ops[:top]:
            lines.append(f"{row['op'][:44]:<44} {row['launches']:>8} {_t(row['time']):>10} "
                         f"{_pct(row['time'], busy):>6} {row['bound']:>9} {row['peak'] * 100:>7.1f}%")
        if len(ops) > top:
            lines.append(f"... {len(ops) - top} more operators")
        path = self.critical_path()
        if path:
            on_path = collections.Counter()
            for x in path:
                on_path[x.op] += x.duration
            streams = sorted({(x.device, x.stream) for x in path})
            lines += ["", f"critical path: {len(path)} launches over {len(streams)} stream(s), "
                          f"{_t(sum(x.duration for x in path))} of kernels, starting when the host launched "
                          f"{path[0].op} at {_t(path[0].launched - self.begin)}; most of it:"]
            split = self.critical_path_breakdown()
            lines.append("  by kind: " + ", ".join(f"{kind} {_t(seconds)}" for kind, seconds in split.items()
                                                    if seconds > 0 or kind != "peers"))
            for op, seconds in on_path.most_common(5):
                lines.append(f"  {op:<44} {_t(seconds):>10}")
        coll = self.collectives()
        if coll:
            lines += ["", f"{'collective':<16} {'bytes':>12} {'count':>6} {'here':>16} "
                          + " ".join(f"{f'at {n}':>10}" for n in coll[0]["projected"])]
            for row in coll:
                here = f"{_t(row['time'])} ({row['ranks']})"
                lines.append(f"{row['collective']:<16} {row['bytes']:>12.0f} {row['count']:>6} {here:>16} "
                             + " ".join(f"{_t(s):>10}" for s in row["projected"].values()))
        if self.host_reads:
            reads = sum(r.count for r in self.host_reads)
            lines += ["", f"host reads of device values: {reads}, answered with placeholders (phantom execution);"
                          " what the program did with them is not what it would do with the real values:"]
            for r in sorted(self.host_reads, key=lambda r: -r.count)[:top]:
                lines.append(f"  {r.file}:{r.line} {r.op} x{r.count}")
        if self.routed_histograms:
            lines += ["", f"routing (SIMHPU_PHANTOM_ROUTING): {phantom.routing_setting()}, given to "
                          f"{self.routed_histograms} router histogram(s) over tokens no value of which was computed"]
        return "\n".join(lines)


def _t(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.2f} us"


def _si(n: float) -> str:
    """3.2e11 -> '320.0 G' (for FLOPs and counts)."""
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:,.2f} {prefix}"
    return f"{n:,.0f} "


def _count(n: int) -> str:
    for word, scale in (("billion", 1e9), ("million", 1e6)):
        if n >= scale:
            return f"{n / scale:,.2f} {word}"
    return f"{n:,}"


def _bytes(n: float) -> str:
    return _format_bytes(n)


def _dtype_name(dtype: torch.dtype | None) -> str:
    return str(dtype).removeprefix("torch.") if dtype is not None else "float32"


def _union(launches) -> list[tuple[float, float]]:
    """The launches' [start, end) spans merged: sorted, disjoint."""
    merged: list[list[float]] = []
    for start, end in sorted((x.start, x.end) for x in launches if x.end > x.start):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def _clip(spans: list[tuple[float, float]], start: float, end: float) -> list[tuple[float, float]]:
    return [(max(a, start), min(b, end)) for a, b in spans if b > start and a < end]


def _subtract(spans: list[tuple[float, float]], holes: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """What of the disjoint sorted `spans` no span of the disjoint sorted `holes` covers."""
    out, i = [], 0
    for a, b in spans:
        while i < len(holes) and holes[i][1] <= a:
            i += 1
        j, cursor = i, a
        while j < len(holes) and holes[j][0] < b:
            if holes[j][0] > cursor:
                out.append((cursor, holes[j][0]))
            cursor = max(cursor, holes[j][1])
            j += 1
        if cursor < b:
            out.append((cursor, b))
    return out


def _measure(spans: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in spans)


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole > 0 else "-"
