"""A host thread that waits for a stream runs its queued kernels itself when the
worker is not running them, and a launching thread runs a small kernel itself
when the worker sleeps with nothing queued (runtime/launch_queue.h). Either way
the kernels run in stream order, under the worker's state, and fail as on the
worker. The trace says which thread ran each kernel."""
import json
import time

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import torch_simhpu
from helpers import run_python

BIG = 64 * 1024  # floats: 256 KiB, more than a launching thread runs itself


def ran_on_host(path) -> list[bool]:
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    return [e["args"]["ran on"].startswith("the host") for e in events if e.get("cat") == "kernel"]


def let_the_worker_fall_asleep():
    torch.simhpu.synchronize()
    time.sleep(0.005)  # its polling lasts 50 us


def test_a_host_waiting_for_a_sleeping_worker_runs_the_queued_kernels_itself(tmp_path):
    a = torch.randn(BIG, device="simhpu")
    b = torch.randn(BIG, device="simhpu")
    results = []
    with torch.simhpu.trace(tmp_path / "t.json"):
        for _ in range(50):
            let_the_worker_fall_asleep()
            # Too big to run at launch: the worker is woken, and the host, synchronising
            # at once, takes the kernel unless the woken worker is scheduled first.
            results.append(torch_simhpu.npu_add_custom(a, b))
            torch.simhpu.synchronize()
    expected = a.cpu() + b.cpu()
    for r in results:
        torch.testing.assert_close(r.cpu(), expected)
    by_host = ran_on_host(tmp_path / "t.json")
    assert len(by_host) == 50 and sum(by_host) >= 5, sum(by_host)


def test_a_small_kernel_launched_while_the_worker_sleeps_runs_on_the_launching_thread(tmp_path):
    x = torch.ones(4, device="simhpu")
    with torch.simhpu.trace(tmp_path / "t.json"):
        let_the_worker_fall_asleep()
        y = torch_simhpu.npu_add_custom(x, x)
    assert ran_on_host(tmp_path / "t.json") == [True]
    assert y.tolist() == [2.0] * 4


def test_a_burst_of_launches_wakes_the_worker(tmp_path):
    zero = torch.zeros(4, device="simhpu")
    # The premise is launches a few microseconds apart. On a loaded machine the
    # launching thread may be descheduled for longer than the worker polls, and
    # then running the next launch itself is right; such attempts are repeated.
    for attempt in range(5):
        x = torch.ones(4, device="simhpu")
        trace = tmp_path / f"t{attempt}.json"
        with torch.simhpu.trace(trace):
            let_the_worker_fall_asleep()
            start = time.perf_counter()
            for _ in range(200):
                x = torch_simhpu.npu_add_custom(x, zero)
            launching = time.perf_counter() - start
            time.sleep(0.05)  # not a synchronisation: the woken worker runs them meanwhile
        if launching < 200 * 5e-6:
            break
    else:
        pytest.skip(f"launches were never a burst here (the last 200 took {launching * 1e3:.1f} ms)")
    by_host = ran_on_host(trace)
    assert len(by_host) == 200 and sum(by_host) <= 20, sum(by_host)
    assert x.tolist() == [1.0] * 4


def test_kernels_a_waiting_host_runs_keep_stream_order(tmp_path):
    """Chains of dependent kernels, each chain queued while the worker sleeps, then
    waited for: the host takes over what the worker has not reached, so it runs the
    later links of a chain after the worker ran the earlier ones (or all of them).
    The chain is launched back to back (its expected values are worked out, not
    computed on the CPU between launches, which would give the worker time to run
    every link itself)."""
    x = torch.zeros(BIG, device="simhpu")
    expected = 0.0
    by_host = []
    for attempt in range(3):  # a loaded machine may let the worker run every link
        trace = tmp_path / f"t{attempt}.json"
        with torch.simhpu.trace(trace):
            for _ in range(20):
                let_the_worker_fall_asleep()
                for _ in range(10):
                    x.add_(1)  # each reads what the one before wrote
                x.mul_(2)
                expected = (expected + 10) * 2
                assert x[-1].item() == expected  # synchronises: the host may run them
        by_host = ran_on_host(trace)
        if any(by_host):
            break
    torch.testing.assert_close(x.cpu(), torch.full((BIG,), expected))
    # The test is about kernels the host ran (here 109 to 154 of the 220): without one it tests nothing.
    assert any(by_host), f"the host ran none of the {len(by_host)} kernels, three times"


class SeesCpuOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.cpu_ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if any(isinstance(a, torch.Tensor) and a.device.type == "cpu" for a in args):
            self.cpu_ops.append(func)
        return out


def test_kernels_a_host_runs_run_under_the_worker_state_not_the_hosts(tmp_path):
    """A Python dispatch mode, autocast and grad mode on the waiting host thread
    must not reach the kernels it runs for the device (they would reroute, record
    autograd or cast the CPU kernels the reference path calls)."""
    state = torch.ones(4, dtype=torch.int64, device="simhpu")
    x = torch.randn(BIG, device="simhpu")
    mode = SeesCpuOps()
    with torch.simhpu.trace(tmp_path / "t.json"):
        for _ in range(10):
            let_the_worker_fall_asleep()
            torch_simhpu._C._report_worker_state(state)
            y = torch.exp(x)  # the reference path: the CPU kernel called on the running thread
            with torch.enable_grad(), torch.autocast("cpu", dtype=torch.bfloat16), mode:
                torch.simhpu.synchronize()
            assert state.tolist() == [0, 0, 0, 0]
    assert any(ran_on_host(tmp_path / "t.json")), "no kernel ran on the host: the test proved nothing"
    assert mode.cpu_ops == []
    torch.testing.assert_close(y.cpu(), x.cpu().exp())


def test_a_kernel_failing_on_the_host_fails_as_on_the_worker():
    x = torch.ones(4, device="simhpu")
    let_the_worker_fall_asleep()
    torch_simhpu._C._launch_failing_kernel(x)  # small: runs at launch, on this thread
    with pytest.raises(RuntimeError, match=r"simhpu kernel 'fail_on_device' .* failed: device-side check failed"):
        torch.simhpu.synchronize()
    assert (torch.ones(4, device="simhpu") + 1).tolist() == [2.0] * 4  # the device goes on


def test_host_runs_can_be_turned_off(tmp_path):
    code = (
        "import json, time, torch, torch_simhpu\n"
        "x = torch.ones(4, device='simhpu')\n"
        "with torch.simhpu.trace('t.json'):\n"
        "    for _ in range(20):\n"
        "        torch.simhpu.synchronize(); time.sleep(0.002)\n"
        "        x = torch_simhpu.npu_add_custom(x, x); torch.simhpu.synchronize()\n"
        "events = json.load(open('t.json'))['traceEvents']\n"
        "print(sum(e['args']['ran on'].startswith('the host') for e in events if e.get('cat') == 'kernel'))\n"
    )
    assert run_python(code, tmp_path, SIMHPU_HOST_RUNS="0").stdout.split()[-1] == "0"
    assert int(run_python(code, tmp_path).stdout.split()[-1]) >= 10
