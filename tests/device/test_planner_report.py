"""The report a job planner reads (issue 39, part 4): MFU against the profile's
peak, memory at its peak by category against the capacity, exposed
communication, the critical path by kind, and the HTML page (timeline, roofline,
memory) opened in a real headless browser."""
import json
import os
import re
import shutil
import subprocess

import pytest
import torch

from torch_simhpu import _C
from torch_simhpu.simulation import memory_ledger
from torch_simhpu.simulation import Launch, Simulation, load_profile
from tests.device.test_phantom import phantom
from tests.helpers import run_python

D = "simhpu"


def train(sim_kwargs=None, steps=3, optimizer=torch.optim.AdamW):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)).to(D)
    opt = optimizer(model.parameters(), lr=1e-3)
    x = torch.randn(32, 256, device=D)
    torch.simhpu.synchronize()
    torch.simhpu.reset_peak_memory_stats()
    with phantom(**(sim_kwargs or {})) as sim:
        for _ in range(steps):
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
    return sim, model


def block_bytes(t: torch.Tensor) -> int:
    return t.untyped_storage().nbytes()


def test_memory_at_its_peak_is_split_by_what_each_block_holds():
    sim, model = train()
    m = sim.memory
    assert isinstance(m, memory_ledger.MemoryBreakdown), m
    # The replayed peak is the allocator's own, to the byte, and the categories add up to it.
    assert m.peak == torch.simhpu.max_memory_allocated() > 0
    assert sum(m.by_category.values()) == m.peak
    params = list(model.parameters())
    # (the allocator rounds blocks up: each category is at least its tensors' bytes, within a block each)
    param_bytes = sum(p.numel() * p.element_size() for p in params)
    assert param_bytes <= m.by_category["parameters"] < param_bytes + 4096 * len(params)
    assert m.blocks["parameters"] == len(params)
    # AdamW: exp_avg and exp_avg_sq per parameter on the device (its step counts live on the CPU)
    assert m.blocks["optimizer state"] == 2 * len(params)
    assert m.by_category["optimizer state"] == 2 * m.by_category["parameters"]
    assert m.blocks["gradients"] == len(params)
    assert m.by_category["communication buffers"] == 0  # no collective here
    assert m.by_category["activations and temporaries"] > 0
    assert m.parameters_counted == sum(p.numel() for p in params)
    assert m.capacity == torch.simhpu.mem_get_info()[1]
    report = sim.report()
    assert "memory at its peak:" in report and "fits" in report
    for name in memory_ledger.CATEGORIES:
        assert name in report


def test_the_ledger_reads_the_history_a_slice_at_a_time_and_finds_the_same_peak(monkeypatch):
    # (a large job's step makes hundreds of thousands of events: their tuples never live all at once)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64)).to(D)
    opt = torch.optim.AdamW(model.parameters())
    ledger = memory_ledger.MemoryLedger(0)
    ledger.begin()
    try:
        for _ in range(2):
            model(torch.randn(16, 64, device=D)).square().mean().backward()
            opt.step()
            ledger.mark_optimizer(opt)
            opt.zero_grad()
        whole = ledger._replay()
        monkeypatch.setattr(memory_ledger, "_SLICE", 7)
        sliced = ledger._replay()
    finally:
        ledger.end()
    assert isinstance(whole, memory_ledger.MemoryBreakdown), whole
    assert whole.by_category["optimizer state"] > 0 and whole.by_category["gradients"] > 0
    assert (sliced.peak, sliced.by_category, sliced.blocks) == (whole.peak, whole.by_category, whole.blocks)


def test_without_an_optimizer_everything_live_is_activations_and_temporaries():
    a = torch.ones(1024, 1024, device=D)
    torch.simhpu.synchronize()
    before = torch.simhpu.memory_allocated()  # `a` and whatever earlier tests left
    with phantom() as sim:
        b = a * 2
        c = b + 1
        del b
    m = sim.memory
    # `a` was made before the block: known by its address, held by no optimizer
    assert m.by_category["activations and temporaries"] == m.peak
    assert before + 2 * 4 * 1024 * 1024 <= m.peak <= before + 2 * 4 * 1024 * 1024 + 4096
    assert m.by_category["parameters"] == 0
    del c


def test_a_history_too_short_for_the_block_gives_no_breakdown_and_says_why():
    torch.simhpu.memory._record_memory_history("all", max_entries=4)  # the program's own, kept after the block
    try:
        with phantom() as sim:
            parts = [torch.ones(64, device=D) for _ in range(8)]
        assert isinstance(sim.memory, str) and "dropped the oldest" in sim.memory
        assert "memory by category: not available: the allocator's history kept 4 events" in sim.report()
        assert _C._memory_history_enabled()  # the program's recording is left on
    finally:
        torch.simhpu.memory._record_memory_history(None)
    del parts


def test_mfu_is_the_model_flops_of_the_tokens_over_the_step_against_the_peak():
    sim, model = train({"tokens_per_step": 32})
    use = sim.utilisation()
    peak = sim.profile_data["matrix_flops"][torch.float32]  # the dtype of the matmuls
    assert use["peak"] == peak and use["dtype"] == torch.float32
    parameters = sum(p.numel() for p in model.parameters())
    assert use["flops_per_token"] == 6 * parameters
    assert use["model"] == pytest.approx(6 * parameters * 32 / sim.step_time() / peak)
    # The hardware counts what the kernels did over the steady steps: the forward and the
    # weights' gradients at least (2 + 2 FLOPs a parameter a token; the first layer's input
    # takes no gradient), a FLOP an element for the rest.
    model_rate = 6 * parameters * 32 / sim.step_time() / peak
    assert 4 / 6 * model_rate < use["hardware"] < 1.2 * model_rate
    assert f"MFU {use['model'] * 100:.1f}%" in sim.report()


def test_flops_per_token_given_replaces_six_times_the_parameters():
    sim, _ = train({"tokens_per_step": 32, "flops_per_token": 1e9})
    assert sim.utilisation()["model"] == pytest.approx(1e9 * 32 / sim.step_time() / sim.peak_flops()[0])
    with pytest.raises(ValueError, match="flops_per_token must be a number > 0"):
        with phantom(flops_per_token=-1):
            pass


_KINDS = {"recv": "send/recv", "send": "send/recv", "all_to_all_single": "all_to_all", "all_gather": "all_gather"}


def synthetic(rows) -> Simulation:
    """A Simulation over launches given as (op, work, stream, start, end, cause, after)."""
    sim = Simulation("h100-sxm")
    sim.profile_data = load_profile("h100-sxm")
    sim.finish = max(r[4] for r in rows)
    sim.launches = [Launch(i, op, op, None, 0, 0, stream, work, "compute",
                           _KINDS.get(op, "all_reduce") if work == "collective" else None, 8, torch.bfloat16, 1e9, 1e6, 0.5,
                           start, start, end, cause, after)
                    for i, (op, work, stream, start, end, cause, after) in enumerate(rows)]
    return sim


def test_exposed_communication_is_what_no_compute_kernel_overlaps():
    sim = synthetic([("mm", "matrix", 0, 0.0, 1.0, "host", -1),
                     ("all_reduce", "collective", 5, 0.5, 2.0, "event", 0),  # half hidden, 1 s exposed
                     ("mm", "matrix", 0, 2.0, 3.0, "event", 1),
                     ("all_gather", "collective", 6, 2.2, 2.8, "host", -1),  # hidden
                     ("all_gather", "collective", 6, 3.5, 4.0, "host", -1)])  # exposed
    comm = sim.communication()
    assert comm["time"] == pytest.approx(1.5 + 0.6 + 0.5)
    assert comm["exposed"] == pytest.approx(1.0 + 0.5)
    assert "exposed (no compute beside it) 1.500 s" in "\n".join(sim._planner_lines())


def test_the_critical_path_is_split_by_kind():
    sim = synthetic([("mm", "matrix", 0, 0.5, 1.0, "host", -1),
                     ("all_reduce", "collective", 5, 1.0, 2.0, "event", 0),
                     ("mm", "matrix", 0, 2.5, 3.0, "host", -1)])
    assert [x.id for x in sim.critical_path()] == [2]  # (started by the host: the chain ends there)
    assert sim.critical_path_breakdown() == {"compute": 0.5, "communication": 0.0, "copies": 0.0,
                                             "host": pytest.approx(2.5), "peers": 0.0}
    sim = synthetic([("mm", "matrix", 0, 0.5, 1.0, "host", -1),
                     ("all_reduce", "collective", 5, 1.0, 2.0, "event", 0),
                     ("mm", "matrix", 0, 2.0, 3.0, "event", 1)])
    assert sim.critical_path_breakdown() == {"compute": 1.5, "communication": 1.0, "copies": 0.0, "host": 0.5, "peers": 0.0}


def test_the_pipeline_bubble_is_compute_idle_while_a_joined_peer_held_a_transfer_up():
    sim = synthetic([("mm", "matrix", 0, 0.0, 1.0, "host", -1),
                     ("recv", "collective", 7, 3.0, 3.5, "peer", -1),  # the stage before sent at 3.0
                     ("mm", "matrix", 0, 3.5, 4.0, "event", 1),      # 2.5 s idle: the bubble
                     ("all_gather", "collective", 6, 4.0, 4.2, "host", -1),
                     ("mm", "matrix", 0, 4.2, 5.0, "event", 3),      # 0.2 s idle, not a peer's
                     ("mm", "matrix", 0, 5.5, 6.0, "host", -1)])     # 0.5 s idle for the host
    bubble = sim.pipeline_bubble()
    assert bubble["time"] == pytest.approx(2.5) and bubble["gaps"] == 1
    assert "pipeline bubble a step: 2.500 s = 41.7% of the step" in "\n".join(sim._planner_lines())
    alone = synthetic([("mm", "matrix", 0, 0.0, 1.0, "host", -1), ("mm", "matrix", 0, 2.0, 3.0, "host", -1)])
    assert alone.pipeline_bubble() is None and "pipeline bubble" not in "\n".join(alone._planner_lines())
    assert sim.collective_waits() is None  # (a rank that receives: a pipeline stage)


def test_compute_held_by_a_slower_peer_at_a_collective_is_not_a_pipeline_bubble():
    """On a rank that neither sends nor receives (an expert-parallel exchange waiting for the rank
    that got the most tokens), compute held up by a joined peer has its own line."""
    sim = synthetic([("mm", "matrix", 0, 0.0, 1.0, "host", -1),
                     ("all_to_all_single", "collective", 7, 2.5, 3.0, "peer", -1),  # the hot rank came at 2.5
                     ("mm", "matrix", 0, 3.0, 4.0, "event", 1)])                    # 2 s idle for it
    assert sim.pipeline_bubble() is None
    waits = sim.collective_waits()
    assert waits["time"] == pytest.approx(2.0) and waits["gaps"] == 1
    lines = "\n".join(sim._planner_lines())
    assert "waiting for slower joined peers at collectives a step: 2.000 s = 50.0% of the step" in lines
    assert "pipeline bubble" not in lines


class TwoOptimizers(torch.optim.Optimizer):
    """As torchtitan's container with one optimizer a pipeline stage's model part: a step steps both."""

    def __init__(self, first, second):
        self.inner = [torch.optim.SGD(first, lr=0.1), torch.optim.SGD(second, lr=0.1)]
        super().__init__([*first, *second], {"lr": 0.1})

    def step(self, closure=None):
        for optimizer in self.inner:
            optimizer.step()


def test_an_optimizer_that_steps_others_is_one_step():
    parts = [torch.nn.Linear(64, 64).to(D), torch.nn.Linear(64, 64).to(D)]
    opt = TwoOptimizers(list(parts[0].parameters()), list(parts[1].parameters()))
    with phantom() as sim:
        for _ in range(3):
            parts[1](parts[0](torch.ones(8, 64, device=D))).sum().backward()
            opt.step()
    assert len(sim.steps()) == 3


def test_fsdp_memory_names_its_communication_buffers_and_steps_report_exposed_communication(tmp_path):
    """FSDP2 and tensor parallelism on 256 simulated ranks: the gathered parameters are
    communication buffers, the sharded ones parameters, and the report prices the overlap.
    (Blocks keep their gathered parameters after their forward: the peak, at the loss, holds them.)"""
    from tests.device.test_simulated_ranks import SCRIPT

    script = SCRIPT.replace('fully_shard(block, mesh=mesh["dp"])',
                            'fully_shard(block, mesh=mesh["dp"], reshard_after_forward=False)')
    script = script.replace("loss.backward()\nopt.step()", "loss.backward()\nopt.step()\nopt.zero_grad()\n"
                                                          "loss = model(x).float().square().mean()\n"
                                                          "loss.backward()\nopt.step()")
    (tmp_path / "train.py").write_text(script)
    code = ("import sys; from torch_simhpu.simulation import main; "
            "sys.exit(main(['--profile', 'h100-sxm', '--world', '256', '--rank', '3', '--tokens-per-step', '512', "
            "'train.py', '3']))")
    out = run_python(code, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    unit = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
    size = {}
    for name in memory_ledger.CATEGORIES:
        value, scale = re.search(rf"^  {name} +([0-9.]+) (B|KiB|MiB|GiB)", out.stdout, re.M).groups()
        size[name] = float(value) * unit[scale]
    # 4 blocks of 2 x 1024 x 4096 float32 weights = 128 MiB, 1/256 of them on this rank
    assert size["parameters"] == pytest.approx(128 * 2**20 / 256, rel=0.01)
    # each block's gathered weights: its tensor-parallel eighth of 2 x 1024 x 4096 float32, 4 MiB
    assert size["communication buffers"] >= 4 * 4 * 2**20
    assert re.search(r"communication a step: .*, exposed \(no compute beside it\) ", out.stdout), out.stdout
    assert "MFU" in out.stdout


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("no headless Chromium: scripts/setup_env.sh test installs Debian's chromium")
        pytest.skip("no Chromium on this machine (scripts/setup_env.sh test installs it)")
    return found


def rendered_dom(page, tmp_path) -> str:
    """The page's DOM after its scripts ran, as headless Chromium has it."""
    done = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                           "--no-first-run", "--disable-background-networking", "--disable-component-update",
                           "--disable-sync",
                           f"--user-data-dir={tmp_path / 'chromium-profile'}", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_html_report_draws_the_timeline_roofline_and_memory_in_a_browser(tmp_path):
    sim, _ = train({"tokens_per_step": 32})
    page = sim.write_html(tmp_path / "report.html")
    data = json.loads(re.search(r'id="report-data">(.*?)</script>', page.read_text(), re.S).group(1))
    dom = rendered_dom(page, tmp_path)
    assert 'data-rendered="yes"' in dom and "data-error" not in dom
    assert dom.count('class="launch"') == len(data["launches"]) > 10
    assert len(data["launches"]) == len([x for x in sim.kernels() if x.start < sim.step_ends[-1]
                                         and x.end > sim.step_ends[-2]])
    assert dom.count('class="op"') == len(data["roofline"]["points"]) > 3
    assert dom.count('class="category"') == len(memory_ledger.CATEGORIES)
    assert "aten::mm.out" in dom and "MFU" in dom


def test_the_html_report_shows_hostile_names_as_text(tmp_path):
    name = '</script><img src=x onerror="document.title=1">&amp;'
    sim = synthetic([(name, "matrix", 0, 0.0, 1.0, "host", -1)])
    sim.memory = "none kept"
    page = sim.write_html(tmp_path / "report.html")
    assert "<img" not in page.read_text()
    dom = rendered_dom(page, tmp_path)
    assert 'data-rendered="yes"' in dom and "<img" not in dom
    assert "&lt;/script&gt;&lt;img src=x" in dom  # the name, as text


def test_the_command_writes_the_html_report(tmp_path):
    (tmp_path / "train.py").write_text(
        "import torch\nm = torch.nn.Linear(64, 64).to('simhpu')\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(2):\n    m(torch.ones(8, 64, device='simhpu')).sum().backward(); opt.step()\n")
    out = run_python("import sys; from torch_simhpu.simulation import main; "
                     "sys.exit(main(['--profile', 'h100-sxm', '--html', 'r.html', 'train.py']))", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "report written to r.html" in out.stdout
    assert "simhpu simulation on h100-sxm" in (tmp_path / "r.html").read_text()


def test_a_joined_jobs_page_puts_each_rank_on_its_row_and_keeps_each_ranks_longest_launches(monkeypatch):
    from torch_simhpu.simulation import html

    def page(ops, launches, window):
        return {"title": "simhpu simulation on h100-sxm", "summary": "report", "window": window, "ops": ops,
                "launches": launches, "roofline": {"points": []}, "memory": None, "memory_note": "none"}

    monkeypatch.setattr(html, "MOST_LAUNCHES", 4)  # two a rank
    pages = {8: page(["mm", "recv"], [[0, 1.0, 1.5, "matrix", 0, 0], [1, 2.0, 2.1, "collective", 1, 0],
                                      [0, 3.0, 4.0, "matrix", 0, 1]], [1.0, 4.0]),
             0: page(["add"], [[2, 0.5, 0.6, "vector", 0, 0]], [0.5, 3.0])}
    data = html.joined_page_data(pages)
    assert data["streams"] == ["rank 0", "rank 8"] and data["window"] == [0.5, 4.0]
    assert data["ops"] == ["add", "mm", "recv"]
    drawn = {(row, data["ops"][op], start) for row, start, _, _, op, _ in data["launches"]}
    assert drawn == {(0, "add", 0.5), (1, "mm", 3.0), (1, "mm", 1.0)}  # rank 8's recv, its shortest, left out
    assert "the 2 longest of each rank drawn" in data["timeline_note"]
    assert data["summary"].startswith("== rank 0 ==\nreport\n\n== rank 8 ==")
