"""Joined clocks (csrc/simclock/joined_clocks.h): several processes, each playing
one rank of a simulated world, exchange when their collectives and transfers
start, so a rank that reaches one late delays its peers there, as on the parts.
Each process runs under phantom execution; the figures compared are simulated
milliseconds the script measures with events."""
import json
import re

import pytest

from tests.helpers import run_python

SCRIPT = r'''
import sys
import torch, torch.distributed as dist

dist.init_process_group()
rank, mode = dist.get_rank(), sys.argv[1]
peer = 4 - rank  # ranks 0 and 4 of 8 play: the first ranks of two pipeline stages

def compute(n):
    x = torch.randn(4096, 4096, device="simhpu")
    for _ in range(n):
        x = x @ x
    return x

begin, end = torch.simhpu.Event(enable_timing=True), torch.simhpu.Event(enable_timing=True)
begin.record()
if mode == "collective":
    x = compute(20) if rank == 4 else torch.randn(4096, 4096, device="simhpu")
    dist.all_reduce(x)  # over all 8: six members no process plays are on time
elif mode == "pipeline":
    if rank == 0:
        dist.send(compute(10), 4)
    else:
        y = torch.empty(4096, 4096, device="simhpu")
        dist.recv(y, 0)
        y @ y
elif mode == "both-ways":  # each sends before it receives, in one batch
    out = compute(10) if rank == 0 else torch.randn(4096, 4096, device="simhpu")
    into = torch.empty_like(out)
    for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, out, peer), dist.P2POp(dist.irecv, into, peer)]):
        work.wait()
elif mode == "leaves-early" and rank == 4:
    sys.exit(0)
elif mode == "leaves-early":
    dist.all_reduce(torch.ones(4, device="simhpu"))
end.record()
end.synchronize()
print(f"ELAPSED {rank} {begin.elapsed_time(end):.3f}")
'''

ONE_MATMUL_MS = 2 * 4096 ** 3 / 100e12 * 1e3  # a 4096² float32 matmul takes at least this on the h100 profile (< 100 TF/s)


def run(tmp_path, mode, *extra, **env):
    (tmp_path / "stages.py").write_text(SCRIPT)
    code = ("import sys; from torch_simhpu.simulation import main; "
            f"sys.exit(main(['--profile', 'h100-sxm', '--world', '8', '--rank', '0,4', *{list(extra)!r}, "
            f"'stages.py', {mode!r}]))")
    return run_python(code, cwd=tmp_path, **env)


def elapsed(out):
    assert out.returncode == 0, out.stderr[-3000:]
    found = {int(rank): float(ms) for rank, ms in re.findall(r"ELAPSED (\d+) ([\d.]+)", out.stdout)}
    assert sorted(found) == [0, 4], out.stdout[-3000:]
    return found


def test_a_late_rank_delays_its_peers_collective(tmp_path):
    ms = elapsed(run(tmp_path, "collective"))
    # Rank 0 launches nothing but the all-reduce: only rank 4's 20 matmuls before it make it this late.
    assert ms[0] > 20 * ONE_MATMUL_MS
    assert abs(ms[0] - ms[4]) < ONE_MATMUL_MS  # both finish it together


def test_a_pipeline_stage_waits_for_what_the_stage_before_sends(tmp_path):
    out = run(tmp_path, "pipeline")
    ms = elapsed(out)
    assert ms[4] > ms[0] + 0.9 * ONE_MATMUL_MS  # rank 0's 10 matmuls and the transfer, then rank 4's own
    assert ms[0] > 10 * ONE_MATMUL_MS
    assert "for joined peers" in out.stdout.split("== rank 4 ==")[1]  # what kept stage 2 idle, in its report


def test_sends_and_receives_both_ways_in_one_batch_do_not_wait_on_each_other(tmp_path):
    ms = elapsed(run(tmp_path, "both-ways"))
    assert ms[4] > 10 * ONE_MATMUL_MS  # rank 4's receive waited for rank 0's late send


def test_a_rank_that_never_reaches_a_collective_is_named_after_the_timeout(tmp_path):
    out = run(tmp_path, "leaves-early", SIMHPU_JOIN_TIMEOUT="3")
    assert out.returncode != 0
    assert "joined clocks: all_reduce (call 0 of its group) on rank 0: rank 4 did not reach it within 3 s" in out.stderr
    assert "rank 0 failed" in out.stderr


def test_joined_ranks_are_checked(tmp_path):
    (tmp_path / "stages.py").write_text("print('ran')\n")
    for args, expected in ((["--world", "8", "--rank", "0,0"], "--rank: expected distinct ranks"),
                           (["--world", "8", "--rank", "0,8"], "--rank: every rank must be in [0, 8)"),
                           (["--world", "8", "--rank", "0,x"], "--rank: expected ranks such as 0,8,16"),
                           (["--rank", "1"], "--rank needs --world")):
        out = run_python("import sys; from torch_simhpu.simulation import main; "
                         f"sys.exit(main(['--profile', 'h100-sxm', *{args!r}, 'stages.py']))", cwd=tmp_path)
        assert out.returncode != 0 and expected in out.stderr and "ran" not in out.stdout, out.stderr[-2000:]
    out = run_python("import torch_simhpu", cwd=tmp_path, SIMHPU_DEVICE_PROFILE="h100-sxm", SIMHPU_EXECUTE="0",
                     SIMHPU_SIMULATED_WORLD="8", SIMHPU_JOINED_RANKS="0,4")
    assert out.returncode != 0 and "SIMHPU_JOIN_STORE must give the shared store as host:port" in out.stderr
    # a world whose ranks all run (no simulated world): the rank is torchrun's RANK, and it must be set
    out = run_python("import torch_simhpu", cwd=tmp_path, SIMHPU_JOINED_RANKS="0,1",
                     SIMHPU_JOIN_STORE="127.0.0.1:1", RANK="")
    assert out.returncode != 0 and "this process's rank is RANK (as torchrun sets it)" in out.stderr
    out = run_python("import torch_simhpu", cwd=tmp_path, SIMHPU_JOINED_RANKS="0,1",
                     SIMHPU_JOIN_STORE="127.0.0.1:1", RANK="5")
    assert out.returncode != 0 and "this process plays rank 5, which is not among them" in out.stderr


PIPELINING = r'''
import torch, torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

dist.init_process_group(device_id=torch.device("simhpu", 0))
rank, dev = dist.get_rank(), torch.device("simhpu", 0)
model = nn.Sequential(*[nn.Linear(512, 512) for _ in range(8 if rank == 0 else 1)]).to(dev)  # stage 0 is slow
schedule = ScheduleGPipe(PipelineStage(model, rank, 2, dev), n_microbatches=4,
                         loss_fn=lambda y, t: (y - t).square().mean())
x, target = torch.randn(64, 512, device=dev), torch.randn(64, 512, device=dev)
with torch.simhpu.simulate("h100-sxm", host_time="modelled") as sim:
    schedule.step(x) if rank == 0 else schedule.step(target=target, losses=[])
    torch.simhpu.synchronize()
print(f"RANK {rank} BUSY {sim.busy()} PEERS {sim.waiting_for_peers()}")
dist.destroy_process_group()
'''


def test_pytorch_pipelining_runs_with_the_stages_clocks_joined(tmp_path):
    """torch.distributed.pipelining's GPipe schedule, two real processes (execution on): with
    SIMHPU_JOINED_RANKS alone, the light last stage waits in simulated time for the slow first."""
    import os
    import subprocess
    import sys

    import torch.distributed as dist

    from tests.rank_pool import free_port

    (tmp_path / "stages.py").write_text(PIPELINING)
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    port = free_port()
    ranks = [subprocess.Popen([sys.executable, "stages.py"], cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK="0",
                                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), SIMHPU_JOINED_RANKS="0,1",
                                       SIMHPU_JOIN_STORE=f"127.0.0.1:{store.port}", SIMHPU_JOIN_TIMEOUT="60"))
             for rank in (0, 1)]
    outputs = [p.communicate(timeout=120) for p in ranks]
    assert all(p.returncode == 0 for p in ranks), "\n".join(err[-2000:] for _, err in outputs)
    found = {int(r): (float(busy), float(peers))
             for out, _ in outputs for r, busy, peers in re.findall(r"RANK (\d) BUSY (\S+) PEERS (\S+)", out)}
    busy, peers = found[1]
    assert peers > busy > 0  # stage 1 sat idle for stage 0's eight layers longer than it computed its one


SCHEDULES = r'''
import sys
import torch, torch.distributed as dist
from torch import nn
import torch.distributed.pipelining as pp

dist.init_process_group(device_id=torch.device("simhpu", 0))
rank, world, dev = dist.get_rank(), dist.get_world_size(), torch.device("simhpu", 0)
name = sys.argv[1]
single = name in ("ScheduleGPipe", "Schedule1F1B")
total = world * (1 if single else 2)
indices = ([rank] if single else [rank, 2 * world - 1 - rank] if name in ("ScheduleZBVZeroBubble", "ScheduleDualPipeV")
           else [rank, rank + world])
# (stage 0 is four layers, the others one: the bubble is the slow first stage's)
stages = [pp.PipelineStage(nn.Sequential(*[nn.Linear(256, 256) for _ in range(4 if i == 0 else 1)]).to(dev), i, total, dev)
          for i in indices]
schedule = getattr(pp, name)(stages[0] if single else stages, n_microbatches=4,
                             loss_fn=lambda y, t: (y - t).square().mean())
x, target = torch.randn(32, 256, device=dev), torch.randn(32, 256, device=dev)
kwargs = dict(target=target, losses=[]) if total - 1 in indices else {}
schedule.step(x, **kwargs) if 0 in indices else schedule.step(**kwargs)
torch.simhpu.synchronize()
print(f"STEPPED {rank}")
dist.destroy_process_group()
'''


@pytest.mark.parametrize("schedule", ["ScheduleGPipe", "Schedule1F1B", "ScheduleInterleaved1F1B", "ScheduleLoopedBFS",
                                      "ScheduleInterleavedZeroBubble", "ScheduleZBVZeroBubble", "ScheduleDualPipeV"])
def test_every_pytorch_pipeline_schedule_runs_under_phantom_execution_a_process_a_stage(tmp_path, schedule):
    """Each of torch.distributed.pipelining's schedules, unchanged, two simulated ranks under phantom
    execution with their clocks joined: the stages exchange their shapes as pickled objects (through
    the joined processes' store: torch_simhpu/simulation/simulated_objects.py), and a stage waits for its peer."""
    (tmp_path / "schedules.py").write_text(SCHEDULES)
    code = ("import sys; from torch_simhpu.simulation import main; "
            "sys.exit(main(['--profile', 'h100-sxm', '--world', '2', '--rank', '0,1', '--no-execute', "
            f"'schedules.py', {schedule!r}]))")
    out = run_python(code, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "STEPPED 0" in out.stdout and "STEPPED 1" in out.stdout
    idle = [float(x) for x in re.findall(r"for joined peers ([\d.]+)%", out.stdout)]
    assert idle and max(idle) > 10, out.stdout[-3000:]  # (a stage sat idle for its peer: the schedule's bubble)


OBJECTS = r'''
import torch, torch.distributed as dist
dist.init_process_group()
rank = dist.get_rank()
gathered = [None] * dist.get_world_size()
dist.all_gather_object(gathered, {"rank": rank})
print("GATHERED", [g["rank"] for g in gathered])
box = [{"from": rank}]
dist.broadcast_object_list(box, src=rank)  # (its own: known here)
try:
    dist.recv_object_list([None], src=3)
except RuntimeError as error:
    print("REFUSED", error)
'''


def test_object_collectives_of_a_rank_alone_answer_what_it_can_and_name_what_it_cannot(tmp_path):
    (tmp_path / "objects.py").write_text(OBJECTS)
    code = ("import sys; from torch_simhpu.simulation import main; "
            "sys.exit(main(['--profile', 'h100-sxm', '--world', '4', '--rank', '2', '--no-execute', 'objects.py']))")
    out = run_python(code, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "GATHERED [2, 2, 2, 2]" in out.stdout  # (ranks no process plays: alike this one)
    assert re.search(r"REFUSED torch\.distributed\.recv_object_list: rank 3's objects are unknown here: no process "
                     r"plays it \(this one plays rank 2\)\. Play it too \(--rank 2,3\)", out.stdout), out.stdout[-2000:]


def test_a_pipeline_job_reports_its_bubble_and_draws_one_page_a_row_a_stage(tmp_path):
    """GPipe over two stages, the first four times the second's work: the second stage's report
    gives its bubble (compute idle while the first computes), and --html writes, beside each rank's
    page, the job's page with a row a stage, drawn by headless Chromium."""
    from tests.device.test_planner_report import rendered_dom

    (tmp_path / "schedules.py").write_text(SCHEDULES)
    code = ("import sys; from torch_simhpu.simulation import main; "
            "sys.exit(main(['--profile', 'h100-sxm', '--world', '2', '--rank', '0,1', '--no-execute', "
            "'--html', 'job.html', 'schedules.py', 'ScheduleGPipe']))")
    out = run_python(code, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    reports = dict(zip(*[iter(re.split(r"^== rank (\d) ==$", out.stdout, flags=re.M)[1:])] * 2))
    bubbles = {rank: re.search(r"pipeline bubble a step: [^=]+= ([\d.]+)% of the step", text)
               for rank, text in reports.items()}
    assert bubbles["1"] and float(bubbles["1"].group(1)) > 20, reports["1"]
    # (the light last stage waits for the heavy first more than the first waits for it)
    assert not bubbles["0"] or float(bubbles["0"].group(1)) < float(bubbles["1"].group(1)), out.stdout
    assert "the job's page (a row a rank) written to job.html" in out.stdout
    assert (tmp_path / "job.rank0.html").exists() and (tmp_path / "job.rank1.html").exists()
    page = tmp_path / "job.html"
    data = json.loads(re.search(r'id="report-data">(.*?)</script>', page.read_text(), re.S).group(1))
    assert data["streams"] == ["rank 0", "rank 1"]
    assert {row for row, *_ in data["launches"]} == {0, 1}
    assert "== rank 0 ==" in data["summary"] and "== rank 1 ==" in data["summary"]
    dom = rendered_dom(page, tmp_path)
    assert 'data-rendered="yes"' in dom and "data-error" not in dom
    assert dom.count('class="launch"') == len(data["launches"])


def test_a_program_whose_import_fails_fails_in_its_ranks_naming_the_module_and_the_rank(tmp_path):
    """The command imports the program's top-level imports once before forking its ranks; one that
    fails there is left to the ranks, which fail on it as a program run alone would."""
    (tmp_path / "broken.py").write_text("import torch\nimport no_such_module_here\nprint('RAN')\n")
    code = ("import sys; from torch_simhpu.simulation import main; "
            "sys.exit(main(['--profile', 'h100-sxm', '--world', '2', '--rank', '0,1', 'broken.py']))")
    out = run_python(code, cwd=tmp_path)
    assert out.returncode != 0 and "RAN" not in out.stdout
    assert "ModuleNotFoundError: No module named 'no_such_module_here'" in out.stderr, out.stderr[-3000:]
    assert re.search(r"rank [01] failed \(exit status 1\); the others were stopped", out.stderr), out.stderr[-3000:]
