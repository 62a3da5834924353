"""Simulated time (torch.simhpu.set_profile / simulate, csrc/simclock): every figure
here is computed by hand from ROUND, a profile of round numbers, with the host's
time modelled (its launch overhead alone), so the timeline is exact and does not
depend on this machine."""
import json
import math
import subprocess
import sys

import pytest
import torch

import torch_simhpu
from torch_simhpu import _C
from torch_simhpu.simulation import ProfileError, load_profile

D = "simhpu"
US = 1e-6

ROUND = {
    "name": "round",
    "matrix_flops": {"default": 100e12},
    "vector_flops": {"default": 10e12},
    "memory_bandwidth": 1e12,
    "memory_capacity": 1e9,
    "kernel_overhead": 1 * US,
    "launch_latency": 2 * US,
    "host_op_overhead": 4 * US,
    "host_launch_overhead": 5 * US,
    "sync_latency": 3 * US,
    "host_link": {"bandwidth": 10e9, "pageable_bandwidth": 5e9, "latency": 10 * US},
    "fabric": {"devices_per_node": 8, "intra_node": {"bandwidth": 100e9, "latency": 1 * US},
               "inter_node": {"bandwidth": 10e9, "latency": 10 * US}},
    "efficiency": {"matrix": 0.5, "vector": 0.5, "memory": 0.5, "host_link": 0.5, "fabric": 0.5},
}
MATRIX, VECTOR, MEMORY = 100e12 * 0.5, 10e12 * 0.5, 1e12 * 0.5  # what ROUND's kernels reach


def simulate():
    torch.simhpu.synchronize()
    return torch.simhpu.simulate(ROUND, host_time="modelled")


def only(launches, op):
    found = [x for x in launches if x.op == op]
    assert len(found) == 1, (op, [x.op for x in launches])
    return found[0]


# -- profiles --------------------------------------------------------------------------------

def test_the_shipped_profiles_load_and_describe_their_part():
    assert torch.simhpu.profiles() == ["a100-sxm", "ascend-910b", "b200", "cpu-host", "edge", "gaudi2", "gaudi3",
                                       "h100-hbm2e-96gb", "h100-pcie", "h100-sxm", "h200", "mi300x"]
    for name in torch.simhpu.profiles():
        p = load_profile(name)
        assert p["name"] == name
        assert p["matrix_flops"][torch.bfloat16] > p["vector_flops"][torch.bfloat16]
    h100 = load_profile("h100-sxm")
    assert h100["matrix_flops"][torch.bfloat16] == 989.4e12 and h100["memory_bandwidth"] == 3.35e12


@pytest.mark.parametrize("change, fragments", [
    (lambda p: p.pop("memory_bandwidth"), ["'memory_bandwidth'", "present"]),
    (lambda p: p["efficiency"].update(memory=1.5), ["'efficiency.memory'", "(0, 1]"]),
    (lambda p: p["matrix_flops"].update(float33=1e12), ["'matrix_flops'", "float33"]),
    (lambda p: p["fabric"].update(devices_per_node=0), ["'fabric.devices_per_node'", "int >= 1"]),
    (lambda p: p["host_link"].update(latency="fast"), ["'host_link.latency'", "'fast'"]),
])
def test_a_bad_profile_names_the_field_and_what_was_expected(change, fragments):
    profile = json.loads(json.dumps(ROUND))
    change(profile)
    with pytest.raises(ProfileError) as info:
        torch.simhpu.set_profile(profile)
    for fragment in fragments:
        assert fragment in str(info.value)
    assert torch.simhpu.simulation.profile() is None  # nothing half-set


def test_a_profile_file_names_its_line_or_the_shipped_ones(tmp_path):
    bad = tmp_path / "mine.json"
    bad.write_text('{"name": "mine",\n "memory_bandwidth": }')
    with pytest.raises(ProfileError, match=r"mine.json:2: not valid JSON"):
        load_profile(str(bad))
    with pytest.raises(ProfileError, match=r"'h300'.*shipped: a100-sxm, ascend-910b, b200, cpu-host, edge, gaudi2, gaudi3, "
                                            r"h100-hbm2e-96gb, h100-pcie, h100-sxm, h200, mi300x"):
        load_profile("h300")
    good = tmp_path / "round.json"
    good.write_text(json.dumps(ROUND))
    assert load_profile(str(good))["memory_bandwidth"] == 1e12


# -- a cost per launch -----------------------------------------------------------------------

def test_a_matmul_is_priced_by_flop_counter_and_a_vector_op_by_its_bytes(device):
    a = torch.randn(1024, 1024, device=device)
    b = torch.randn(1024, 1024, device=device)
    v = torch.randn(1 << 20, device=device)
    with simulate() as sim:
        a @ b
        v + v
    mm, add = only(sim.launches, "aten::mm.out"), only(sim.launches, "aten::add.Tensor")
    assert mm.work == "matrix" and mm.flops == 2 * 1024 ** 3 and mm.bytes == 3 * 1024 * 1024 * 4
    assert mm.bound == "compute"
    assert mm.duration == pytest.approx(1 * US + 2 * 1024 ** 3 / MATRIX, rel=1e-12)
    assert mm.peak_fraction == pytest.approx(2 * 1024 ** 3 / mm.duration / 100e12, rel=1e-12)
    assert add.work == "vector" and add.bytes == 3 * 4 * (1 << 20) and add.bound == "memory"
    assert add.duration == pytest.approx(1 * US + 3 * 4 * (1 << 20) / MEMORY, rel=1e-12)


def test_a_tiny_kernel_is_latency_bound(device):
    x = torch.ones(4, device=device)
    with simulate() as sim:
        x.add_(1)
    (add,) = sim.kernels()
    # it reads and writes x (the 1 is a kernel argument): 2 x 16 bytes
    assert add.bound == "latency" and add.duration == pytest.approx(1 * US + 2 * 16 / MEMORY, rel=1e-12)


def test_nested_readers_of_the_launch_log_each_get_their_own_launches_numbered_alike(device):
    # (the last reader is handed the log rather than a copy of it, and frees it as it reads: a step
    # of a large job logs hundreds of thousands of launches)
    x = torch.ones(4, device=device)
    with simulate():
        outer = _C._simclock_start_log()
        x.add_(1)
        inner = _C._simclock_start_log()
        x.mul_(2)
        x.sub_(3)
        inner_entries = _C._simclock_stop_log(inner)
        x.div_(4)
        outer_entries = _C._simclock_stop_log(outer)
    def stems(entries):
        return [e[1].split("::")[1].split(".")[0].rstrip("_") for e in entries]
    assert stems(inner_entries) == ["mul", "sub"] and stems(outer_entries) == ["add", "mul", "sub", "div"]
    assert [e[0] for e in outer_entries] == list(range(outer, outer + 4)) and inner_entries[0][0] == inner
    assert [e[0] for e in inner_entries] == [e[0] for e in outer_entries[1:3]]
    same_bytes = {}  # (launches of equal bytes: one Python float for them all)
    for e in outer_entries:
        same_bytes.setdefault(e[13], set()).add(id(e[13]))
    assert all(len(ids) == 1 for ids in same_bytes.values()) and len(same_bytes) < len(outer_entries)


def test_copies_to_the_device_are_priced_by_the_host_link(device):
    pinned = torch.ones(1 << 20).pin_memory()
    pageable = torch.ones(1 << 20)
    with simulate() as sim:
        pinned.to(device, non_blocking=True)
        pageable.to(device)
        torch.ones(4).to(device).add_(torch.tensor(1.0))  # a 0-dim host tensor is a kernel argument
    fast, slow = [x for x in sim.launches if x.work == "host-to-device" and x.bytes == 4 << 20]
    assert fast.duration == pytest.approx(10 * US + 4 * (1 << 20) / (10e9 * 0.5), rel=1e-12)
    assert slow.duration == pytest.approx(10 * US + 4 * (1 << 20) / (5e9 * 0.5), rel=1e-12)
    assert fast.bound == "host-link"
    assert len([x for x in sim.launches if x.work == "host-to-device"]) == 3  # and torch.ones(4)'s


def test_yaml_cost_and_elementwise_expressions_price_generated_kernels(device):
    x = torch.randn(64, 256, device=device)
    gamma = torch.randn(256, device=device)
    end = torch.randn(64, 256, device=device)
    with simulate() as sim:
        torch_simhpu.npu_rms_norm(x, gamma)
        torch_simhpu.npu_lerp_scalar(x, end, 0.5)
    rms, lerp = only(sim.launches, "npu_rms_norm"), only(sim.launches, "npu_lerp_scalar")
    assert rms.flops == 4 * x.numel()  # cost: {flops: "4 * x.numel()"}
    assert lerp.flops == 3 * x.numel()  # self + weight * (end - self): three operations per element


# -- clocks ----------------------------------------------------------------------------------

def test_a_kernel_that_waits_on_an_event_starts_after_it_and_one_that_does_not_does_not(device):
    a = torch.randn(1024, 1024, device=device)
    side = torch.simhpu.Stream()
    side.wait_stream(torch.simhpu.current_stream())
    with simulate() as sim:
        with torch.simhpu.stream(side):
            p = a @ a
            done = torch.simhpu.Event()
            done.record(side)
        unordered = a.sum()  # [default stream, not waiting]
        torch.simhpu.current_stream().wait_event(done)
        ordered = p.sum()  # [default stream, after the wait]
    mm = only(sim.launches, "aten::mm.out")
    first, second = [x for x in sim.launches if x.op == "aten::sum.IntList_out"]
    assert mm.stream == side.stream_id and first.stream == second.stream == 0
    assert first.start < mm.end  # the two streams overlapped
    assert second.start == mm.end and second.cause == "event" and second.after == mm.id
    del unordered, ordered


def test_the_host_clock_jumps_to_the_device_on_a_synchronisation(device):
    a = torch.randn(1024, 1024, device=device)
    with simulate() as sim:
        a @ a
        torch.simhpu.synchronize()
        after_sync = _C._simclock_host_now()
    mm = only(sim.launches, "aten::mm.out")
    assert mm.launched == pytest.approx(sim.begin + 4 * US + 5 * US)  # an operator's dispatch, a kernel's launch
    assert mm.start == pytest.approx(mm.launched + 2 * US)
    assert after_sync == pytest.approx(mm.end + 3 * US, rel=1e-12)


def test_elapsed_time_is_simulated_time(device):
    v = torch.randn(1 << 20, device=device)
    start, end = torch.simhpu.Event(enable_timing=True), torch.simhpu.Event(enable_timing=True)
    with simulate():
        start.record()
        v + v
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end)
    # the add is dispatched and launched after the start event; it then runs, and the end event follows it
    assert ms == pytest.approx((4 * US + 5 * US + 1 * US + 3 * 4 * (1 << 20) / MEMORY) * 1e3, rel=1e-12)
    with simulate():
        late = torch.simhpu.Event(enable_timing=True)
        late.record()
        late.synchronize()
        with pytest.raises(RuntimeError, match="recorded before it was turned on"):
            start.elapsed_time(late)


def test_a_graph_replay_runs_its_kernels_back_to_back(device):
    x = torch.zeros(16, device=device)
    side = torch.simhpu.Stream()
    side.wait_stream(torch.simhpu.current_stream())
    g = torch.simhpu.Graph()
    with torch.simhpu.stream(side):
        with torch.simhpu.graph(g):
            for _ in range(50):
                x.add_(1)
    torch.simhpu.current_stream().wait_stream(side)
    with simulate() as sim:
        g.replay()
    kernels = sim.kernels()
    assert len(kernels) == 50
    assert kernels[0].start == pytest.approx(sim.begin + 5 * US + 2 * US)
    for before, after in zip(kernels, kernels[1:]):
        assert after.start == before.end and after.launched == kernels[0].launched
    one = 1 * US + 2 * 64 / MEMORY
    assert kernels[-1].end - kernels[0].start == pytest.approx(50 * one, rel=1e-9)


def test_measured_host_time_counts_the_host_work_between_launches(device):
    x = torch.ones(4, device=device)
    torch.simhpu.synchronize()
    with torch.simhpu.simulate(ROUND, host_time="measured") as sim:
        x.add_(1)
        sum(range(200_000))  # host work between the launches
        x.add_(1)
    first, second = sim.kernels()
    assert second.launched - first.launched > 5 * US + 1e-3  # the loop took well over a millisecond here


def test_modelled_host_time_is_the_default_and_leaves_the_programs_own_time_out(device):
    x = torch.ones(4, device=device)
    torch.simhpu.synchronize()
    with torch.simhpu.simulate(ROUND) as sim:
        x.add_(1)
        sum(range(200_000))  # host work between the launches: this machine's, not the part's
        x.add_(1)
    first, second = sim.kernels()
    assert second.launched - first.launched < 1e-4  # the part's dispatch and launch, not the loop's milliseconds


# -- collectives -----------------------------------------------------------------------------

def test_collectives_take_the_fastest_of_ring_tree_and_hierarchical_over_the_right_links():
    torch.simhpu.set_profile(ROUND)
    try:
        mb64 = 64 << 20
        ring_2 = 2 * (1 / 2) * mb64 / (100e9 * 0.5) + 2 * 1 * US
        assert _C._simclock_collective_seconds("all_reduce", mb64, 2) == pytest.approx(ring_2, rel=1e-12)
        ring_64 = 2 * (63 / 64) * mb64 / (10e9 * 0.5) + 2 * 63 * 10 * US  # beyond a node: the network
        tree_64 = 2 * 6 * 10 * US + 2 * mb64 / (10e9 * 0.5)  # (63 latencies cost more than 6)
        assert tree_64 < ring_64
        # 8 nodes of 8: inside each node over its links, between nodes each rank's link with an eighth,
        # the two pipelined (the slower sets the time)
        layered_64 = (2 * max((7 / 8) * mb64 / (100e9 * 0.5), (7 / 8) * (mb64 / 8) / (10e9 * 0.5))
                      + 2 * (7 * 1 * US + 7 * 10 * US))
        assert layered_64 < tree_64
        assert _C._simclock_collective_seconds("all_reduce", mb64, 64) == pytest.approx(layered_64, rel=1e-12)
        ring_16 = 2 * (15 / 16) * mb64 / (10e9 * 0.5) + 2 * 15 * 10 * US
        layered_16 = (2 * max((7 / 8) * mb64 / (100e9 * 0.5), (1 / 2) * (mb64 / 8) / (10e9 * 0.5))
                      + 2 * (7 * 1 * US + 1 * 10 * US))
        assert layered_16 < ring_16 / 4  # (what the flat ring priced it at before: several times too slow)
        assert _C._simclock_collective_seconds("all_reduce", mb64, 16) == pytest.approx(layered_16, rel=1e-12)
        # one rank a node (a data-parallel group at stride 8): no node to share, the flat ring
        assert _C._simclock_collective_seconds("all_reduce", mb64, 16, 8) == pytest.approx(ring_16, rel=1e-12)
        # small and wide: the tree wins, up and down its depth, 7 steps inside a node, log2(128) = 7 between
        tree_1024 = 2 * (7 * 1 * US + 7 * 10 * US) + 2 * 1024 / (10e9 * 0.5)
        assert _C._simclock_collective_seconds("all_reduce", 1024, 1024) == pytest.approx(tree_1024, rel=1e-12)
        gather_8 = (7 / 8) * mb64 / (100e9 * 0.5) + 7 * 1 * US
        assert _C._simclock_collective_seconds("all_gather", mb64, 8) == pytest.approx(gather_8, rel=1e-12)
        gather_16 = max((7 / 8) * mb64 / (100e9 * 0.5), (1 / 2) * (mb64 / 8) / (10e9 * 0.5)) + 7 * 1 * US + 10 * US
        assert _C._simclock_collective_seconds("all_gather", mb64, 16) == pytest.approx(gather_16, rel=1e-12)
    finally:
        torch.simhpu.set_profile(None)


# -- the report and the trace ----------------------------------------------------------------

def test_the_report_of_a_training_step(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(64, 256, device=device), torch.randint(0, 10, (64,), device=device)
    with simulate() as sim:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    report = sim.report()
    ops = {row["op"]: row for row in sim.operators()}
    assert ops["aten::addmm.out"]["flops"] == 2 * 64 * 256 * 512 + 2 * 64 * 512 * 10  # flop_counter's addmm formula
    assert "simulated on round" in report and "critical path" in report
    assert 0 < sim.busy() <= sim.span and sim.verdict() == "host-bound"  # small kernels, 5 us launches
    path = sim.critical_path()
    assert path[-1].end == max(k.end for k in sim.kernels())
    for before, after in zip(path, path[1:]):
        assert after.after == before.id and after.start >= before.end


def test_a_busy_device_is_device_bound(device):
    a = torch.randn(2048, 2048, device=device)
    with simulate() as sim:
        for _ in range(5):
            a = a @ a / 2048
    assert sim.verdict() == "device-bound" and sim.busy() / sim.span > 0.9


def test_the_trace_has_the_simulated_timeline_beside_the_hosts(device, tmp_path):
    a = torch.randn(256, 256, device=device)
    path = tmp_path / "trace.json"
    torch.simhpu.set_profile(ROUND, host_time="modelled")
    try:
        with torch.simhpu.trace(path):
            a @ a
    finally:
        torch.simhpu.set_profile(None)
    document = json.loads(path.read_text())
    simulated = [e for e in document["traceEvents"] if e["pid"].startswith("simulated round")]
    hosts = [e for e in document["traceEvents"] if e["pid"] == "simhpu:0"]
    assert simulated and hosts and document["otherData"]["simulated profile"] == "round"
    (mm,) = [e for e in simulated if e["args"]["op"] == "aten::mm.out"]
    assert mm["tid"] == "stream 0" and mm["args"]["work"] == "matrix"
    assert mm["args"]["bound"] == "memory"  # 256^2: its bytes take longer than its FLOPs here
    # (a passed as both operands is read once: its bytes and the output's)
    assert mm["dur"] == pytest.approx((1 * US + 2 * 256 * 256 * 4 / MEMORY) * 1e6, rel=1e-9)


def test_off_by_default_and_off_again_after_the_block(device):
    assert torch.simhpu.simulation.profile() is None
    with simulate():
        assert torch.simhpu.simulation.profile() == "round"
    assert torch.simhpu.simulation.profile() is None
    with pytest.raises(ValueError, match="no profile given and none set"):
        with torch.simhpu.simulate():
            pass


# -- from the environment and the command line ------------------------------------------------

def test_the_environment_sets_the_profile_and_the_memory_follows_it(tmp_path):
    code = ("import torch, torch_simhpu; print(torch.simhpu.simulation.profile(), "
            "torch.simhpu.mem_get_info(0)[1])")
    from helpers import run_python
    out = run_python(code, tmp_path, SIMHPU_DEVICE_PROFILE="edge", SIMHPU_MEMORY_LIMIT="")
    assert out.returncode == 0, out.stderr
    name, total = out.stdout.split()
    assert name == "edge" and abs(int(total) - 16e9) < 2 << 20
    out = run_python(code, tmp_path, SIMHPU_DEVICE_PROFILE="edge", SIMHPU_MEMORY_LIMIT="1GiB")
    assert out.stdout.split() == ["edge", str(1 << 30)]
    out = run_python(code, tmp_path, SIMHPU_DEVICE_PROFILE="nope")
    assert out.returncode != 0 and "'nope'" in out.stderr and "h100-sxm" in out.stderr


def test_the_command_line_runs_a_script_and_prints_the_report(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import sys, torch, torch_simhpu\n"
                      "a = torch.randn(512, 512, device='simhpu')\n"
                      "for _ in range(int(sys.argv[1])):\n"
                      "    a = (a @ a).relu()\n")
    out = subprocess.run([sys.executable, "-m", "torch_simhpu.simulation", "--profile", "h100-sxm",
                          "--host-time", "modelled", str(script), "3"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "simulated on h100-sxm" in out.stdout and "aten::mm.out" in out.stdout
    assert math.isfinite(float(out.stdout.split(": ")[1].split()[0]))


def test_compiled_code_is_priced_by_its_buffers_and_its_extern_calls(device):
    a = torch.randn(256, 256, device=device)
    f = torch.compile(lambda a: (a @ a).relu() + 1)
    f(a)
    with simulate() as sim:
        f(a)
    mm = only(sim.launches, "aten::mm.out")  # Inductor's extern call: an operator, priced by its formula
    assert mm.work == "matrix" and mm.flops == 2 * 256 ** 3
    (fused,) = [x for x in sim.kernels() if x is not mm]
    # its buffers as Inductor passes them: the product's, reused in place for the result
    assert fused.work == "vector" and fused.bytes == 256 * 256 * 4
    assert fused.start >= mm.end


def test_a_kernel_that_occupies_the_device_for_a_known_time_takes_it_on_the_part(device):
    t = torch.empty(1, device=device)
    with simulate() as sim:
        _C._sleep_on_device(t, 2000)  # 2 ms
    (sleep,) = sim.kernels()
    assert sleep.duration == pytest.approx(2e-3, rel=1e-12)
