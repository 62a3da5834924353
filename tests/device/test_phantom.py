"""Phantom execution (torch.simhpu.simulate(execute=False), SIMHPU_EXECUTE=0,
csrc/phantom): the program runs, launches are priced and placed on the simulated
clocks, and no kernel runs; device memory has the profile's capacity and is never
touched; host reads of values get counted placeholders."""
import json
import os
import re
import subprocess
import sys
import time

import pytest
import torch

from torch_simhpu import _C
from torch_simhpu.simulation import host_memory
from tests.device.test_simulation import ROUND
from tests.helpers import run_python

D = "simhpu"
# The device of this process already has its capacity: in-process runs use a profile that agrees.
PROFILE = dict(ROUND, name="phantom-round", memory_capacity=float(_C._memory_limit()))


def phantom(**kwargs):
    return torch.simhpu.simulate(PROFILE, host_time="modelled", execute=False, **kwargs)


def test_no_kernel_runs_but_every_launch_is_priced():
    a = torch.ones(256, 256, device=D)
    torch.simhpu.synchronize()
    with phantom() as sim:
        b = a @ a
        c = (b * 2).relu()
    assert [x.op for x in sim.kernels()] == ["aten::mm.out", "aten::mul.Tensor", "aten::relu"]
    assert sim.kernels()[0].work == "matrix" and sim.kernels()[0].flops == 2 * 256 ** 3
    # (only the Python number 2, moved to the device for the multiplication, ran: the host knows it)
    assert sim.phantom and sim.known_launches == 1 and "phantom: 1 ran" in sim.report()
    # What phantom execution launched never ran: the memory of its results was not written.
    assert _C._phantom_enabled() is False
    torch.simhpu.synchronize()
    # (Out of phantom execution again, kernels run: the device is as usable as before.)
    torch.testing.assert_close((a @ a).cpu(), torch.full((256, 256), 256.0))
    del b, c


def test_host_reads_get_placeholders_counted_with_their_line():
    x = torch.zeros(4, device=D)
    with phantom() as sim:
        total = (x + 5).sum().item()  # READ-ITEM
        listed = (x - 3).tolist()  # READ-LIST
    assert total == 1.0 and listed == [1.0, 1.0, 1.0, 1.0]
    reads = {(r.op, r.line) for r in sim.host_reads}
    here = open(__file__).read().splitlines()
    item_line = next(n for n, l in enumerate(here, 1) if l.endswith("# READ-ITEM"))
    list_line = next(n for n, l in enumerate(here, 1) if l.endswith("# READ-LIST"))
    assert ("aten::_local_scalar_dense", item_line) in reads
    assert any(line == list_line for _, line in reads)
    assert "host reads of device values: 2" in sim.report()


def test_values_error_raises_at_the_first_read_and_names_it():
    x = torch.zeros(3, device=D)
    with pytest.raises(RuntimeError, match=r"aten::_local_scalar_dense read the values of a device tensor of "
                                           r"shape \[\] \(Float\) at .*test_phantom.py:\d+.*values=\"error\""):
        with phantom(values="error"):
            (x * 2).sum().item()
    torch.testing.assert_close((x + 1).cpu(), torch.ones(3))  # the device is usable after


@pytest.mark.parametrize("call", [lambda t: t.nonzero(), lambda t: t[t > 0], lambda t: torch.unique(t)],
                         ids=["nonzero", "boolean-mask", "unique"])
def test_data_dependent_shapes_are_a_clear_error_naming_the_op(call):
    x = torch.arange(6.0, device=D)
    with pytest.raises(RuntimeError, match=r"aten::\w+.* needs its inputs' values on the host .*phantom execution"):
        with phantom():
            call(x)
    assert call(x).numel() > 0  # and afterwards, executed, it works


def test_meta_model_moved_with_to_empty_initialises_and_steps():
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 8))
    with phantom() as sim:
        model.to_empty(device=D)
        for m in model:
            if hasattr(m, "reset_parameters"):
                m.reset_parameters()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        loss = model(torch.randn(32, 64, device=D)).square().mean()
        loss.backward()
        opt.step()
    ops = {x.op for x in sim.kernels()}
    assert {"aten::uniform_", "aten::addmm.out", "aten::mm.out"} <= ops
    assert {"aten::addcdiv.out", "aten::lerp.Scalar_out"} <= ops  # AdamW's step


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_storage_clone_copies_nothing():
    # (A host copy would fault in both blocks' pages: 2 GiB more resident.)
    with phantom():
        x = torch.empty(2**30, dtype=torch.uint8, device=D)
        before = resident_bytes()
        s = x.untyped_storage().clone()
        grown = resident_bytes() - before
    assert s.nbytes() == 2**30 and grown < 2**28, grown
    del x, s


def test_phantom_and_executed_give_the_same_timeline_and_the_same_peak():
    """Same kernels at the same simulated times, and the same allocator peak to the byte.
    (Execute mode launches blocking here: the CPU workers that stand in for the part hold
    a freed block until the kernels using it ran, which the part's stream-ordered
    allocator does not; blocking launches free in program order, as phantom does. And a
    step runs once first: an out= operator's first call with empty outputs checks its
    meta kernel synchronised, a host wait the part would not make.)"""
    out = run_python(_AGREEMENT, cwd=os.path.dirname(__file__), SIMHPU_LAUNCH_BLOCKING="1", SIMHPU_MEMORY_LIMIT="80GB")
    assert out.returncode == 0, out.stderr
    executed, phantom_run = (json.loads(line) for line in out.stdout.splitlines()[-2:])
    assert executed["launches"] == phantom_run["launches"]
    assert executed["peak"] == phantom_run["peak"] > 0
    assert len(executed["launches"]) > 50


_AGREEMENT = r"""
import json, torch, torch_simhpu
from torch import nn

def step(execute):
    torch.manual_seed(0)
    torch.simhpu.manual_seed(0)
    model = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, dropout=0.0).to("simhpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    x = torch.randn(8, 16, 64).to("simhpu")
    torch.simhpu.synchronize()
    torch.simhpu.reset_peak_memory_stats()
    with torch.simhpu.simulate("h100-sxm", host_time="modelled", execute=execute) as sim:
        for _ in range(2):
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
    launches = [(x.op, x.kernel, x.work, x.flops, x.bytes, round(x.start, 12), round(x.end, 12))
                for x in sim.launches]
    del model, opt, x, loss
    return {"launches": launches, "peak": torch.simhpu.max_memory_allocated()}

import os
step(True)  # a first call of an out= operator with empty outputs checks its meta kernel synchronised, once
results = [step(True)]
results.append(step(False))
for r in results:
    print(json.dumps(r))
"""


def test_a_part_larger_than_this_machine_allocates_and_runs_out_as_the_part_would(tmp_path):
    code = r"""
import torch, torch_simhpu
GiB = 2**30
props = torch.simhpu.get_device_properties(0)
assert props.total_memory == int(80e9), props.total_memory
held = [torch.empty(30 * GiB, dtype=torch.uint8, device="simhpu") for _ in range(2)]  # 60 GiB "on the part"
w = torch.empty(16384, 16384, device="simhpu", dtype=torch.bfloat16)
y = w @ w  # priced, not run
try:
    torch.empty(20 * GiB, dtype=torch.uint8, device="simhpu")
except torch.OutOfMemoryError as e:
    print("OOM:", str(e).splitlines()[0])
summary = torch.simhpu.memory_summary()
assert "Allocated memory" in summary or "allocated" in summary.lower(), summary
snapshot = torch.simhpu.memory._snapshot()
assert sum(s["total_size"] for s in snapshot["segments"]) >= 60 * GiB
# (this process's own peak: getrusage's ru_maxrss keeps the forking parent's, pytest's, across exec)
peak_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print("RSS_MB", peak_kb // 1024)
"""
    out = run_python(code, cwd=tmp_path, SIMHPU_DEVICE_PROFILE="h100-sxm", SIMHPU_EXECUTE="0")
    assert out.returncode == 0, out.stderr
    assert "OOM: simhpu: out of memory on device 0: tried to allocate 20.00 GiB" in out.stdout, out.stdout
    rss = int(out.stdout.split("RSS_MB")[1])
    assert rss < 2048, f"phantom memory reached the host: {rss} MB resident"


def test_simhpu_execute_0_needs_a_profile(tmp_path):
    out = run_python("import torch_simhpu", cwd=tmp_path, SIMHPU_EXECUTE="0", SIMHPU_DEVICE_PROFILE="")
    assert out.returncode != 0
    assert "SIMHPU_EXECUTE=0 (phantom execution) prices launches on a part: set SIMHPU_DEVICE_PROFILE" in out.stderr


def test_phantom_refuses_a_capacity_the_device_did_not_start_with():
    other = dict(PROFILE, name="phantom-other", memory_capacity=PROFILE["memory_capacity"] * 2)
    torch.ones(1, device=D)
    keep = torch.ones(1, device=D)
    with pytest.raises(ValueError, match="and tensors in it, so its capacity cannot change"):
        with torch.simhpu.simulate(other, execute=False):
            pass
    assert not _C._phantom_enabled() and torch.simhpu.simulation.profile() is None


def test_the_command_runs_a_script_in_phantom(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import torch, torch_simhpu\nw = torch.randn(4096, 4096, device='simhpu')\n"
                      "for _ in range(3):\n    w = w @ w\nprint('value', w.sum().item())\n")
    out = run_python(f"import sys; from torch_simhpu.simulation import main; "
                     f"sys.exit(main(['--profile', 'h100-sxm', '--no-execute', {str(script)!r}]))", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "value 1.0" in out.stdout and re.search(r"phantom: (none|\d+) ran", out.stdout)
    assert "host reads of device values: 1" in out.stdout


def test_the_report_gives_the_steady_step_and_tokens_per_second():
    model = torch.nn.Linear(256, 256).to(D)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(64, 256, device=D)
    with phantom(tokens_per_step=64) as sim:
        for _ in range(3):
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
    steps = sim.steps()
    assert len(steps) == 3 and steps[1] == pytest.approx(steps[2]) and steps[0] >= steps[1]
    assert sim.step_time() == pytest.approx(steps[1])
    assert f"3 optimizer step(s); the step: " in sim.report()
    assert f"{64 / steps[1]:,.0f} tokens/s per device" in sim.report()


def test_phantom_execution_gives_the_host_heaps_free_pages_back_while_it_runs(monkeypatch):
    """A stage of a joined job is one of many processes on this machine: what its program frees
    (a data loader's tokens at a step's start) goes back to the system within a second, not
    kept by glibc for reuse through the step; an executing run's heap is left as it is."""
    released = []
    monkeypatch.setattr(_C, "_release_free_host_memory", lambda: released.append(True) or True)
    monkeypatch.setattr(host_memory, "SECONDS_BETWEEN_RELEASES", 0.02)
    with phantom():
        time.sleep(0.5)  # (no launch, no optimizer step: the program's own host work)
    assert len(released) >= 5
    time.sleep(0.1)  # (a release under way as the block ended)
    count = len(released)
    with torch.simhpu.simulate(PROFILE, host_time="modelled"):
        time.sleep(0.2)
    assert len(released) == count


def test_where_the_c_library_cannot_release_the_thread_stops_at_its_first_try(monkeypatch):
    released = []
    monkeypatch.setattr(_C, "_release_free_host_memory", lambda: released.append(True) and False)
    monkeypatch.setattr(host_memory, "SECONDS_BETWEEN_RELEASES", 0.02)
    with phantom():
        time.sleep(0.3)
    assert released == [True]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="resident memory read from /proc")
def test_releasing_free_host_memory_shrinks_a_fragmented_heap():
    def resident() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    # A block in ten of 200,000 kept: the freed nine tenths lie between live ones, where
    # freeing alone returns none of them.
    blocks = [bytearray(1000) for _ in range(200_000)]
    kept = blocks[::10]
    del blocks
    before = resident()
    if not _C._release_free_host_memory():
        pytest.skip("this C library cannot give a heap's free pages back")
    assert before - resident() > 40 * 2**20
    del kept


def test_simhpu_execute_0_beside_the_commands_profile_runs_phantom_on_it(tmp_path):
    # (the command's --profile is the profile: no SIMHPU_DEVICE_PROFILE needed; a part's 40 GiB
    # tensor is held "on the part", which only phantom execution can do on this host)
    script = tmp_path / "step.py"
    script.write_text("import torch\nimport torch_simhpu\nfrom torch_simhpu.simulation import phantom\n"
                      "big = torch.empty(40 * 2**30, dtype=torch.uint8, device='simhpu')\n"
                      "w = torch.empty(8192, 8192, device='simhpu', dtype=torch.bfloat16)\n"
                      "print('phantom', phantom.enabled(), (w @ w).shape)\n")
    env = dict(os.environ, SIMHPU_EXECUTE="0", SIMHPU_DEVICE_PROFILE="")
    out = subprocess.run([sys.executable, "-m", "torch_simhpu.simulation", "--profile", "h100-sxm", str(script)],
                         cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "phantom True torch.Size([8192, 8192])" in out.stdout
    assert "h100-sxm" in out.stdout  # the report, on the command's profile
    # a value that is not 0 or 1 is still refused by name, before the script runs
    env["SIMHPU_EXECUTE"] = "maybe"
    out = subprocess.run([sys.executable, "-m", "torch_simhpu.simulation", "--profile", "h100-sxm", str(script)],
                         cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode != 0 and "SIMHPU_EXECUTE must be 1 or 0, got 'maybe'" in out.stderr
    assert "phantom" not in out.stdout


def test_values_the_host_knows_stay_known():
    before = torch.arange(4.0, device=D)  # (computed before phantom execution: not tracked, so unknown)
    with phantom() as sim:
        sizes = torch.tensor([5, 7], device=D)                       # host data
        doubled = (sizes * 2 + torch.arange(2, device=D)).tolist()   # small kernels over it alone
        pieces = torch.empty(12, 3, device=D).split(sizes.tolist())
        nonzero = torch.arange(6, device=D).nonzero().flatten().tolist()  # the host computes over known values
        unknown = (before + 1).tolist()
    assert doubled == [10, 15] and [p.shape[0] for p in pieces] == [5, 7] and nonzero == [1, 2, 3, 4, 5]
    assert unknown == [1.0, 1.0, 1.0, 1.0] and len(sim.host_reads) == 1  # a placeholder, counted
    assert sim.known_launches > 0 and "over values the host knew" in sim.report()


def test_an_operator_the_host_computes_over_known_expanded_values_gets_them():
    """Context parallelism's load balancer gathers positions made by arange(...).expand(batch, seq)
    with an expanded index: the host's copy of an expanded input keeps its shared elements."""
    with phantom() as sim:
        positions = torch.arange(8, dtype=torch.int32, device=D).expand(3, 8)
        order = torch.tensor([[7, 0, 6, 1, 5, 2, 4, 3]], device=D).expand(3, 8)
        gathered = torch.gather(positions, 1, order).tolist()
    assert gathered == [[7, 0, 6, 1, 5, 2, 4, 3]] * 3 and not sim.host_reads


_MADE_BEFORE = torch.ones(2, device=D)  # (before any phantom block: its values are not tracked)


def test_a_kernel_over_unknown_or_too_much_memory_does_not_run_and_what_it_writes_is_unknown():
    with phantom() as sim:
        x = torch.tensor([1.0, 2.0], device=D)
        x.mul_(_MADE_BEFORE)                             # an input the host does not know: x is unknown now
        big = torch.full((1 << 19,), 3.0, device=D)      # 2 MiB: more than the 1 MiB a kernel may hold
        values = x.tolist(), big.sum().item()
    assert values == ([1.0, 1.0], 1.0) and sum(r.count for r in sim.host_reads) == 2  # (one line, two reads)


def test_the_known_values_limit_is_a_setting_refused_by_name_when_it_does_not_parse(tmp_path):
    code = ("import torch, torch_simhpu\n"
            "x = torch.tensor([2, 3], device='simhpu')\n"
            "print('read', (x * x).tolist())\n")
    phantom_env = dict(SIMHPU_DEVICE_PROFILE="h100-sxm", SIMHPU_EXECUTE="0")
    known = run_python(code, tmp_path, **phantom_env)
    assert known.returncode == 0 and "read [4, 9]" in known.stdout, known.stderr[-2000:]
    none = run_python(code, tmp_path, **phantom_env, SIMHPU_PHANTOM_KNOWN_BYTES="0")
    assert none.returncode == 0 and "read [0, 0]" in none.stdout, none.stderr[-2000:]
    bad = run_python(code, tmp_path, **phantom_env, SIMHPU_PHANTOM_KNOWN_BYTES="lots")
    assert bad.returncode != 0 and "SIMHPU_PHANTOM_KNOWN_BYTES must be an int >= 0" in bad.stderr


_ROUTER = torch.nn.Linear(64, 8).to(D)  # (made before any phantom block: its values are unknown there)


def _routed_sizes():
    """A mixture-of-experts layer's split sizes under phantom execution, and its experts' GEMMs' rows."""
    experts = [torch.nn.Linear(64, 64).to(D) for _ in range(8)]
    with phantom() as sim:
        x = torch.randn(512, 64, device=D)
        chosen = _ROUTER(x).topk(2, dim=-1).indices.flatten()
        sizes = torch.histc(chosen.float(), bins=8, min=0, max=8).long().tolist()
        pieces = x.repeat_interleave(2, 0)[chosen.argsort()].split(sizes)
        for expert, piece in zip(experts, pieces):
            expert(piece)
    rows = [round(k.flops / (2 * 64 * 64)) for k in sim.kernels() if k.op.startswith("aten::addmm")][-8:]
    return sizes, rows, sim


def test_a_routers_histogram_over_unknown_tokens_is_the_stated_routing(monkeypatch, tmp_path):
    sizes, rows, sim = _routed_sizes()
    assert sizes == [128] * 8 and rows == sizes  # balanced, by default: the experts' GEMMs follow
    assert "routing (SIMHPU_PHANTOM_ROUTING): balanced, given to 1 router histogram" in sim.report()
    monkeypatch.setenv("SIMHPU_PHANTOM_ROUTING", "zipf:1.2")
    sizes, rows, _ = _routed_sizes()
    assert sum(sizes) == 1024 and sizes == sorted(sizes, reverse=True) and sizes[0] > 3 * sizes[-1] and rows == sizes
    real_run = tmp_path / "histogram.json"
    real_run.write_text(json.dumps({"counts": [0, 0, 10, 25, 0, 0, 65, 0]}))
    monkeypatch.setenv("SIMHPU_PHANTOM_ROUTING", str(real_run))
    sizes, rows, _ = _routed_sizes()
    assert sizes == [0, 0, 102, 256, 0, 0, 666, 0]  # (1,024 tokens: the largest remainder rounded up)


@pytest.mark.parametrize("setting, message", [
    ("zipf:steep", r"SIMHPU_PHANTOM_ROUTING='zipf:steep': expected \"balanced\", \"zipf:S\""),
    ("/no/such/histogram.json", r"SIMHPU_PHANTOM_ROUTING='/no/such/histogram.json': expected .*No such file"),
])
def test_a_routing_setting_that_does_not_parse_is_refused_by_name_before_any_launch(monkeypatch, setting, message):
    monkeypatch.setenv("SIMHPU_PHANTOM_ROUTING", setting)
    with pytest.raises(ValueError, match=message):
        with phantom():
            pass
    assert not _C._phantom_enabled()


def test_a_histogram_of_other_experts_than_the_models_is_refused_naming_both(monkeypatch, tmp_path):
    real_run = tmp_path / "histogram.json"
    real_run.write_text("[1, 2, 3, 4]")
    monkeypatch.setenv("SIMHPU_PHANTOM_ROUTING", str(real_run))
    with pytest.raises(RuntimeError, match=r"aten::histc: SIMHPU_PHANTOM_ROUTING=.*histogram.json gives a histogram "
                                           r"of 4 experts, but the router counts its tokens into 8 bins"):
        _routed_sizes()
    assert not _C._phantom_enabled()
    torch.testing.assert_close((torch.ones(2, device=D) * 3).cpu(), torch.full((2,), 3.0))  # the device is usable
