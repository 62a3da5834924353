"""What PyTorch expects of a device beyond operators: torch.accelerator,
serialization, autocast."""
import io

import pytest
import torch

import torch_simhpu


def test_torch_accelerator_sees_simhpu():
    assert str(torch.accelerator.current_accelerator()) == "simhpu"
    assert torch.accelerator.device_count() == torch.simhpu.device_count()
    assert torch.accelerator.current_device_index() == 0
    torch.accelerator.synchronize()
    assert torch.accelerator.current_stream().device.type == "simhpu"


def test_accelerator_memory_stats_come_from_the_device_allocator():
    before = torch.accelerator.memory_allocated(0)
    x = torch.empty(256, device="simhpu")
    assert torch.accelerator.memory_allocated(0) >= before + 1024
    assert torch.simhpu.memory_allocated(0) == torch.accelerator.memory_allocated(0)
    del x


def test_save_and_load_tensors_and_modules():
    x = torch.randn(3, 4).simhpu()
    module = torch.nn.Linear(4, 2).simhpu()
    buffer = io.BytesIO()
    torch.save({"x": x, "state": module.state_dict()}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    assert loaded["x"].device == x.device
    torch.testing.assert_close(loaded["x"].cpu(), x.cpu())
    buffer.seek(0)
    on_cpu = torch.load(buffer, map_location="cpu")
    assert on_cpu["state"]["weight"].device.type == "cpu"
    buffer.seek(0)
    on_1 = torch.load(buffer, map_location="simhpu:1")
    assert on_1["x"].device == torch.device("simhpu", 1)
    restored = torch.nn.Linear(4, 2).simhpu()
    restored.load_state_dict(loaded["state"])
    torch.testing.assert_close(restored(x).cpu(), module(x).cpu())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_casts_matmul_like_ops(dtype):
    a, b = torch.randn(4, 8).simhpu(), torch.randn(8, 3).simhpu()
    with torch.autocast("simhpu", dtype=dtype):
        product = a @ b
        linear = torch.nn.functional.linear(a, b.t())
        summed = a + a  # not on autocast's lists: keeps float32
        exponent = torch.exp(product)  # on the float32 list
    assert product.dtype == dtype and linear.dtype == dtype
    assert summed.dtype == torch.float32 and exponent.dtype == torch.float32
    torch.testing.assert_close(product.float().cpu(), (a.cpu() @ b.cpu()), atol=5e-2, rtol=5e-2)


def test_runtime_trace_is_a_chrome_trace_of_queue_and_run_times(tmp_path):
    import json
    path = tmp_path / "trace.json"
    x = torch.ones(16, device="simhpu")
    with torch.simhpu.trace(str(path)):
        torch_simhpu._C._sleep_on_device(x, 20_000)
        y = torch_simhpu.npu_add_custom(x, x)  # queued behind the 20 ms kernel
        with torch.simhpu.stream(torch.simhpu.Stream()):
            torch_simhpu.npu_swish(x)
    events = json.loads(path.read_text())["traceEvents"]
    kernels = {e["name"]: e for e in events if e["cat"] == "kernel"}
    assert {"sleep_on_device", "add_custom", "swish"} <= set(kernels)
    add = kernels["add_custom"]
    assert add["args"]["op"] == "npu_add_custom" and add["tid"] == "stream 0" and add["pid"] == "simhpu:0"
    assert add["args"]["launched at"].startswith(__file__ + ":")
    assert add["args"]["queued (us)"] >= 15_000  # waited for the sleeping kernel
    assert kernels["sleep_on_device"]["dur"] >= 19_000
    assert kernels["swish"]["tid"] != "stream 0"
    del y


def test_device_random_numbers_are_reproducible():
    torch.simhpu.manual_seed(3)
    a = torch.randn(100, device="simhpu").cpu()
    torch.simhpu.manual_seed(3)
    b = torch.randn(100, device="simhpu").cpu()
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert torch.simhpu.initial_seed() == 3
    torch.manual_seed(7)  # seeds every device too
    c = torch.rand(5, device="simhpu").cpu()
    torch.manual_seed(7)
    torch.testing.assert_close(torch.rand(5, device="simhpu").cpu(), c, rtol=0, atol=0)


def test_device_generator_is_independent_of_the_cpu_one():
    torch.manual_seed(0)
    expected = torch.randn(3)
    torch.manual_seed(0)
    torch.simhpu.manual_seed(123)
    torch.randn(10, device="simhpu")
    torch.testing.assert_close(torch.randn(3), expected, rtol=0, atol=0)


def test_rng_state_and_private_generators():
    state = torch.simhpu.get_rng_state()
    first = torch.rand(4, device="simhpu").cpu()
    torch.simhpu.set_rng_state(state)
    torch.testing.assert_close(torch.rand(4, device="simhpu").cpu(), first, rtol=0, atol=0)
    g = torch.Generator(device="simhpu")
    assert g.device == torch.device("simhpu", 0)
    g.manual_seed(5)
    x = torch.randint(0, 100, (8,), device="simhpu", generator=g).cpu()
    g.manual_seed(5)
    torch.testing.assert_close(torch.randint(0, 100, (8,), device="simhpu", generator=g).cpu(), x)
    with pytest.raises(RuntimeError, match="normal_: expected a generator of simhpu:1, got one of simhpu:0"):
        torch.randn(2, device="simhpu:1", generator=g)


@pytest.mark.parametrize("make,check", [
    (lambda g: torch.randn(20000, device="simhpu", generator=g),
     lambda v: abs(v.mean()) < 0.05 and abs(v.std() - 1) < 0.05),
    (lambda g: torch.rand(20000, device="simhpu", generator=g),
     lambda v: v.min() >= 0 and v.max() < 1 and abs(v.mean() - 0.5) < 0.02),
    (lambda g: torch.empty(20000, device="simhpu").bernoulli_(0.3, generator=g),
     lambda v: set(v.unique().tolist()) == {0.0, 1.0} and abs(v.mean() - 0.3) < 0.02),
    (lambda g: torch.randint(3, 9, (20000,), device="simhpu", generator=g),
     lambda v: set(v.unique().tolist()) == set(range(3, 9))),
])
def test_random_fills_have_the_right_distribution(make, check):
    g = torch.Generator(device="simhpu")
    g.manual_seed(0)
    values = make(g).cpu().double()
    assert values.numel() == 20000 and check(values)
