"""Chaos scheduling (SIMHPU_CHAOS=SEED): a program that reads another stream's
work without waiting for it passes on timing alone without chaos, and fails
under it for most seeds; its synchronised twin passes for every seed."""
import json
import time

import pytest
import torch

import torch_simhpu
from helpers import run_python

D = "simhpu"
SEEDS = range(20)


def producer_consumer_steps(synchronised: bool) -> bool:
    """Five steps of: a side stream writes x (two asynchronous kernels), the host
    does a little other work, the default stream reads x. True if every read saw
    its step's value."""
    s = torch.simhpu.Stream()
    x = torch.zeros(1000, device=D)
    s.wait_stream(torch.simhpu.current_stream())
    reads = []
    for step in range(5):
        with torch.simhpu.stream(s):
            x.fill_(float(step))
            x.add_(1)
        if synchronised:
            torch.simhpu.current_stream().wait_stream(s)
        time.sleep(0.005)  # the host's own work: long enough for the side stream, as timing goes
        reads.append(x * 1)
        s.wait_stream(torch.simhpu.current_stream())  # the next write waits for the read
    torch.simhpu.synchronize()
    return all(float(r[0].cpu()) == step + 1 for step, r in enumerate(reads))


def test_without_chaos_the_unsynchronised_program_passes_on_timing():
    assert torch.simhpu.chaos.seed() is None
    assert all(producer_consumer_steps(synchronised=False) for _ in range(3))


def test_with_chaos_the_unsynchronised_program_fails_for_most_seeds():
    failed = []
    for seed in SEEDS:
        with torch.simhpu.chaos.scheduling(seed):
            if not producer_consumer_steps(synchronised=False):
                failed.append(seed)
    assert len(failed) > len(SEEDS) // 2, f"failed only for seeds {failed}"


def test_with_chaos_the_synchronised_twin_passes_for_every_seed():
    for seed in SEEDS:
        with torch.simhpu.chaos.scheduling(seed):
            assert producer_consumer_steps(synchronised=True), f"seed {seed}"


def test_scheduling_restores_what_was_on_and_refuses_a_bad_seed():
    with torch.simhpu.chaos.scheduling(7):
        assert torch.simhpu.chaos.seed() == 7
        with torch.simhpu.chaos.scheduling(None):
            assert torch.simhpu.chaos.seed() is None
        assert torch.simhpu.chaos.seed() == 7
    assert torch.simhpu.chaos.seed() is None
    with pytest.raises(ValueError, match="the seed must be an int from 0 to 2\\*\\*64-1, got -1"):
        with torch.simhpu.chaos.scheduling(-1):
            pass


def test_the_seed_is_announced_and_named_in_device_errors_sanitizer_reports_and_traces(tmp_path):
    trace = tmp_path / "trace.json"
    code = f"""
import torch, torch_simhpu
assert torch.simhpu.chaos.seed() == 1234
with torch.simhpu.trace({str(trace)!r}):
    (torch.ones(4, device="simhpu") * 2).cpu()
x = torch.ones(4, device="simhpu")
try:
    torch.ones(4, device="simhpu").index_select(0, torch.tensor([9], device="simhpu")).cpu()
except (RuntimeError, IndexError) as e:
    print("DEVICE ERROR:", e)
torch.simhpu.sanitizer.enable("record")
s = torch.simhpu.Stream()
with torch.simhpu.stream(s):
    y = x * 2
y.add_(1)
print("SANITIZER:", torch.simhpu.sanitizer.reports()[0])
"""
    done = run_python(code, tmp_path, SIMHPU_CHAOS="1234")
    assert done.returncode == 0, done.stderr
    assert "torch_simhpu: chaos scheduling on, SIMHPU_CHAOS=1234" in done.stderr
    note = "chaos scheduling was on: SIMHPU_CHAOS=1234 draws the same holds for each stream's launches again"
    device_error = next(line for line in done.stdout.splitlines() if line.startswith("DEVICE ERROR:"))
    assert note in device_error, done.stdout
    assert note in next(line for line in done.stdout.splitlines() if line.startswith("SANITIZER:"))
    assert json.loads(trace.read_text())["otherData"] == {"SIMHPU_CHAOS": 1234}


HOLDS_OF_A_PROGRAM = """
import json, torch, torch_simhpu
x = torch.zeros(1024, device="simhpu")
side = torch.simhpu.Stream()
with torch.simhpu.stream(side):
    y = torch.zeros(1024, device="simhpu")
side.synchronize()
for step in range(40):
    # Each launch is its stream's only one, waited for: each worker finds it after going idle.
    x.add_(1)
    torch.simhpu.current_stream().synchronize()
    with torch.simhpu.stream(side):
        y.add_(1)
    side.synchronize()
print(json.dumps([list(d) for d in torch.simhpu.chaos.draws()]))
"""


def test_the_same_seed_draws_the_same_holds_at_the_same_launches(tmp_path):
    """What SIMHPU_CHAOS=SEED promises, across processes: each stream's n-th launch
    draws the same, so where the worker found it the same way (after going idle, or
    not: the program's synchronisation decides that, and on a loaded machine the
    host's timing can too) it is held, or not, for the same time. Another seed draws
    other holds."""
    def draws_with(seed):
        done = run_python(HOLDS_OF_A_PROGRAM, tmp_path, SIMHPU_CHAOS=str(seed))
        assert done.returncode == 0, done.stderr
        return {(d[0], d[1], d[2]): d[3:] for d in json.loads(done.stdout.strip().splitlines()[-1])}
    first, again, other = draws_with(1234), draws_with(1234), draws_with(99)
    assert len({stream for _, stream, _ in first}) == 2 and len(first) >= 80
    assert first.keys() == again.keys()
    found_alike = [launch for launch in first if first[launch][0] == again[launch][0]]
    assert len(found_alike) >= 0.8 * len(first)  # each launch waited for: almost all found after idling
    assert sum(first[launch][1] for launch in found_alike) > 10  # held at about half of them
    assert all(first[launch] == again[launch] for launch in found_alike)
    assert [first[k] for k in sorted(first)] != [other[k] for k in sorted(other) if k in first]


@pytest.mark.parametrize("value", ["-3", "seven", str(2**64)])
def test_a_bad_environment_value_is_refused_at_import(tmp_path, value):
    done = run_python("import torch, torch_simhpu", tmp_path, SIMHPU_CHAOS=value)
    assert done.returncode != 0
    assert f"SIMHPU_CHAOS={value!r}: expected a seed, a whole number from 0 to 2**64-1" in done.stderr
