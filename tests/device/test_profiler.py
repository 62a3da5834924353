"""The device in PyTorch's profilers, and torch.simhpu.trace: kernel rows with their stream, queue
wait and run time, linked to the host ops that launched them."""
from __future__ import annotations

import json

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import torch_simhpu


def train_step(model, optimizer, x, y):
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


@pytest.fixture
def cnn():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 5)).to("simhpu")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(4, 3, 8, 8, device="simhpu")
    y = torch.randint(0, 5, (4,), device="simhpu")
    train_step(model, optimizer, x, y)  # warm the meta cache and the optimizer state
    torch.simhpu.synchronize()
    return model, optimizer, x, y


def test_profiler_has_a_device_kernel_row_for_every_launch_of_a_training_step(cnn, tmp_path):
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        loss = train_step(*cnn)
        torch.simhpu.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1]
    assert len(kernels) > 20
    names = {e.name for e in kernels}
    assert any(n.startswith("reference: aten::convolution_backward") for n in names), names
    assert any("native_batch_norm" in n for n in names), names

    # Every kernel hangs under the host op that launched it: device time adds up there.
    ops = {e.key: e for e in prof.key_averages()}
    assert ops["aten::addmm"].device_time_total > 0
    assert ops["aten::convolution_backward"].device_time_total > 0
    assert sum(e.self_device_time_total for e in prof.key_averages()) > 0
    assert "Self SIMHPU" in prof.key_averages().table(sort_by="self_device_time_total", row_limit=5)

    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    device_rows = [e for e in events if e.get("cat") == "kernel"]
    assert len(device_rows) == len(kernels)
    host_ids = {e["args"]["External id"] for e in events if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    for row in device_rows:
        assert row["args"]["External id"] in host_ids  # linked to its host op by correlation id
        assert row["args"]["stream"] == "0" and row["args"]["device"] == "simhpu:0"
        assert float(row["args"]["ran (us)"]) >= 0 and float(row["args"]["queued (us)"]) >= 0
    # Backward kernels are launched by autograd's thread, where no Python line is running.
    sites = {row["args"]["launched at"].rsplit(":", 1)[0] for row in device_rows if "launched at" in row["args"]}
    assert __file__ in sites
    assert torch.isfinite(loss.cpu())


def test_profiler_kernels_keep_their_stream_and_queue_wait():
    x = torch.ones(16, device="simhpu")
    side = torch.simhpu.Stream()
    side.wait_stream(torch.simhpu.current_stream())  # x is written on the default stream
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        torch_simhpu._C._sleep_on_device(x, 20_000)
        torch_simhpu.npu_add_custom(x, x)  # queued behind the 20 ms kernel
        with torch.simhpu.stream(side):
            torch_simhpu.npu_swish(x)
    kernels = {e.name: e for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1}
    sleep = kernels["sleep_on_device: _sleep_on_device"]
    assert sleep.device_time_total >= 19_000
    add = kernels["add_custom: npu_add_custom"]
    assert add.time_range.start >= sleep.time_range.end - 1  # waited in the queue
    rows = prof.profiler.kineto_results.events()
    streams = {e.name(): e.device_resource_id() for e in rows if e.device_type() == torch.autograd.DeviceType.PrivateUse1}
    assert streams["swish: npu_swish"] == side.stream_id != streams["add_custom: npu_add_custom"]


def test_profiler_without_the_device_activity_records_no_kernels():
    x = torch.ones(16, device="simhpu")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        (x + 1).sum().item()
    assert not [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1]
    assert "aten::add" in {e.key for e in prof.key_averages()}


def test_autograd_profiler_with_use_device_times_ops_on_the_device(recwarn):
    a = torch.randn(64, 64, device="simhpu")
    with torch.autograd.profiler.profile(use_device="simhpu") as prof:
        (a @ a).sum().item()
    mm = next(e for e in prof.key_averages() if e.key == "aten::mm")
    assert mm.device_time_total > 0
    assert mm.cpu_time_total > 0 and all(e.cpu_time_total >= 0 for e in prof.key_averages())
    assert not [w for w in recwarn if "not enabled" in str(w.message)]


def test_a_kernel_failing_under_the_profiler_is_raised_at_its_exit_and_the_next_profile_works():
    """The profiler's exit synchronises the device (as it does CUDA), so that is where the failure is raised."""
    x = torch.ones(4, device="simhpu")
    with pytest.raises(RuntimeError, match="fail_on_device"):
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]):
            torch_simhpu._C._launch_failing_kernel(x)
    y = torch.ones(4, device="simhpu")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        torch_simhpu.npu_swish(y)
    assert "swish: npu_swish" in {e.name for e in prof.events()}
    torch.testing.assert_close(torch_simhpu.npu_swish(y).cpu(), torch.nn.functional.silu(torch.ones(4)))


# torch.simhpu.trace -----------------------------------------------------------------------------

def kernels_in(path):
    return [e["name"] for e in json.loads(path.read_text())["traceEvents"] if e["cat"] == "kernel"]


def test_nested_traces_each_hold_the_kernels_of_their_own_block(tmp_path):
    x, weight = torch.ones(8, device="simhpu"), torch.ones(4, device="simhpu")
    outer, inner = tmp_path / "outer.json", tmp_path / "inner.json"
    with torch.simhpu.trace(outer):
        torch_simhpu.npu_swish(x)
        with torch.simhpu.trace(inner):
            torch_simhpu.npu_add_custom(x, x)
        torch_simhpu.npu_rms_norm(x.view(2, 4), weight)
    assert kernels_in(inner) == ["add_custom"]
    assert kernels_in(outer) == ["swish", "add_custom", "rms_norm"]


def test_reference_path_kernels_are_named_by_their_op(tmp_path):
    # One kernel runs every op without a kernel of its own: its rows must say which op.
    path = tmp_path / "trace.json"
    x = torch.ones(4, device="simhpu")
    with torch.simhpu.trace(path):
        torch.exp(x)
        torch_simhpu.npu_swish(x)
    names = kernels_in(path)
    assert names[-1] == "swish"
    assert [n for n in names[:-1] if n.startswith("reference: aten::exp")], names
    assert "reference" not in names


def test_a_trace_is_written_when_a_kernel_in_its_block_failed(tmp_path):
    path = tmp_path / "trace.json"
    x = torch.ones(4, device="simhpu")
    with pytest.raises(RuntimeError, match="fail_on_device"):
        with torch.simhpu.trace(path):
            torch_simhpu.npu_swish(x)
            torch_simhpu._C._launch_failing_kernel(x)
    assert kernels_in(path) == ["swish", "fail_on_device"]
    torch.testing.assert_close((torch.ones(2, device="simhpu") * 3).cpu(), torch.full((2,), 3.0))


def test_a_trace_is_written_when_its_block_raised(tmp_path):
    path = tmp_path / "trace.json"
    x = torch.ones(4, device="simhpu")
    with pytest.raises(KeyError):
        with torch.simhpu.trace(path):
            torch_simhpu.npu_swish(x)
            raise KeyError("the user's own error")
    assert kernels_in(path) == ["swish"]


@pytest.mark.parametrize("path, error", [(None, TypeError), ("/nonexistent-folder/trace.json", FileNotFoundError)])
def test_a_bad_trace_path_is_refused_before_the_block_runs(path, error):
    ran = []
    with pytest.raises(error):
        with torch.simhpu.trace(path):
            ran.append(True)
    assert not ran
