"""The STUB route: five of ATen's dispatch stubs (a unary, add_stub with alpha,
a comparison, a reduction, fill_stub) have simhpu kernels from
op_plugin_functions.yaml's `stub:` entries. ATen's own kernels build the
TensorIterator; the stub's kernel runs on the stream's worker."""
import json

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

import torch_simhpu
from helpers import race, side_stream

D = "simhpu"
STUBS = {"abs": "abs_stub", "add": "add_stub", "lt": "lt_stub", "sum": "sum_stub", "fill": "fill_stub"}


def kernels_run(fn, tmp_path):
    """The device kernels `fn` launched, in order."""
    path = tmp_path / "trace.json"
    with torch.simhpu.trace(path):
        fn()
    return [e["name"] for e in json.loads(path.read_text())["traceEvents"] if e["cat"] == "kernel"]


@pytest.mark.parametrize("name", sorted(STUBS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_op_db_samples_run_through_the_stub_and_match_the_cpu(name, dtype, tmp_path):
    info = next(op for op in op_db if op.name == name and op.variant_test_name == "")
    samples = list(info.sample_inputs("cpu", dtype))
    assert samples
    for sample in samples:
        expected = info(sample.input, *sample.args, **sample.kwargs)
        moved = sample.transform(lambda t: t.to(D) if isinstance(t, torch.Tensor) else t)
        launched = kernels_run(lambda: info(moved.input, *moved.args, **moved.kwargs), tmp_path)
        result = info(moved.input, *moved.args, **moved.kwargs)
        torch.testing.assert_close(result.cpu(), expected, equal_nan=True)
        on_device = all(t.device.type == D for t in [moved.input, *moved.args] if isinstance(t, torch.Tensor))
        # (add's functional form has a kernel of its own, an exec: entry; its out= and in-place forms are the stub's)
        if expected.numel() and on_device and name != "add":
            assert STUBS[name] in launched, (sample, launched)
        if info.supports_out and expected.numel() and on_device:
            out = torch.empty(0, dtype=expected.dtype, device=D)
            launched = kernels_run(lambda: info(moved.input, *moved.args, **moved.kwargs, out=out), tmp_path)
            torch.testing.assert_close(out.cpu(), expected, equal_nan=True)
            assert STUBS[name] in launched, (sample, "out=", launched)


@pytest.mark.parametrize("call, stub", [
    (lambda x, y: torch.abs(x, out=torch.empty(0, device=D)), "abs_stub"),
    (lambda x, y: x.clone().abs_(), "abs_stub"),
    (lambda x, y: torch.add(x, y, alpha=-2, out=torch.empty(0, device=D)), "add_stub"),
    (lambda x, y: x.clone().add_(y, alpha=0.5), "add_stub"),
    (lambda x, y: torch.lt(x, y, out=torch.empty(x.shape, dtype=torch.bool, device=D)), "lt_stub"),
    (lambda x, y: x.clone().lt_(y), "lt_stub"),
    (lambda x, y: torch.sum(x, (0,), keepdim=True, out=torch.empty(0, device=D)), "sum_stub"),
    (lambda x, y: x.clone().fill_(-3.5), "fill_stub"),
], ids=["abs.out", "abs_", "add.out", "add_", "lt.out", "lt_", "sum.out", "fill_"])
def test_out_and_in_place_forms_reach_the_stub(call, stub, tmp_path):
    x, y = torch.randn(3, 4), torch.randn(4)
    launched = kernels_run(lambda: call(x.to(D), y.to(D)), tmp_path)
    assert stub in launched, launched
    torch.testing.assert_close(call(x.to(D), y.to(D)).cpu(), on_cpu(call, x, y))


def on_cpu(call, x, y):
    """The same call on the CPU: the out= tensors `call` makes on "simhpu" made on the CPU."""
    global D
    D = "cpu"
    try:
        return call(x, y)
    finally:
        D = "simhpu"


def test_a_stub_kernel_runs_asynchronously_on_the_worker():
    x = torch.randn(1000, device=D)
    torch.simhpu.synchronize()
    torch_simhpu._C._sleep_on_device(x[:1], 200_000)
    y = torch.abs(x)  # returns while the stream is still busy
    assert not torch.simhpu.current_stream().query()
    torch.testing.assert_close(y.cpu(), x.cpu().abs())


def test_dtypes_the_entry_does_not_declare_take_the_reference_path(tmp_path):
    z = torch.randn(5, dtype=torch.complex64)
    launched = kernels_run(lambda: torch.abs(z.to(D)), tmp_path)
    assert "abs_stub" not in launched
    torch.testing.assert_close(torch.abs(z.to(D)).cpu(), z.abs())
    b = torch.tensor([True, False])
    torch.testing.assert_close(torch.add(b.to(D), b.to(D)).cpu(), b + b)


def test_mixed_dtypes_are_promoted_as_on_the_cpu():
    a, b = torch.arange(6, dtype=torch.int32).reshape(2, 3), torch.randn(3, dtype=torch.float64)
    torch.testing.assert_close(torch.add(a.to(D), b.to(D), alpha=2).cpu(), torch.add(a, b, alpha=2))
    torch.testing.assert_close(torch.lt(a.to(D), b.to(D)).cpu(), torch.lt(a, b))
    torch.testing.assert_close(torch.sum(a.to(D), 1).cpu(), torch.sum(a, 1))
    out = torch.empty(2, 3, dtype=torch.float64, device=D)
    torch.testing.assert_close(torch.add(a.to(D), a.to(D), out=out).cpu(), (a + a).double())


def test_bad_input_is_refused_as_the_cpu_refuses_it_and_leaves_the_device_usable():
    x, y = torch.randn(3, 4, device=D), torch.randn(5, device=D)
    with pytest.raises(RuntimeError, match="The size of tensor a \\(4\\) must match the size of tensor b \\(5\\)"):
        torch.add(x, y)
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        torch.add(x, x, out=torch.empty(3, 4, dtype=torch.long, device=D))
    torch.testing.assert_close(torch.add(x, x).cpu(), x.cpu() * 2)


def test_the_sanitizer_sees_a_stub_launch_like_any_kernel():
    x = torch.randn(8, device=D)
    with torch.simhpu.sanitizer.enabled():
        s = side_stream()
        with torch.simhpu.stream(s):
            y = torch.abs(x)
        with race(["aten::abs.out", f"stream {s.stream_id}"]):
            y.add_(1)
    torch.simhpu.synchronize()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced", "size-1 dims"])
@pytest.mark.parametrize("dim", [(0, 1), (1,), (2,), (0, 2), (0, 1, 2), ()])
def test_sums_are_the_cpus_bit_for_bit(dtype, layout, dim, tmp_path):
    """sum_stub's kernel adds in the CPU's order, over dense and strided inputs, and over
    dimensions of size 1 (which the iterator drops: a sum over nothing is a copy, not a sum
    over everything), so its sums are the CPU's exactly (a bias gradient: dims (0, 1))."""
    shape = (1, 64, 1) if layout == "size-1 dims" else (8, 64, 48)
    x = torch.randn(*shape, dtype=torch.float64).to(dtype)
    if layout == "transposed":
        x = x.transpose(0, 2)
    elif layout == "sliced":
        x = x[:, ::2, 1:]
    d = x.to("simhpu")
    kernels = kernels_run(lambda: torch.sum(d, dim), tmp_path)
    assert "sum_stub" in kernels
    c = d.cpu()  # the CPU's sum depends on the layout too: compare the same one
    assert c.stride() == d.stride()
    torch.testing.assert_close(torch.sum(d, dim).cpu(), torch.sum(c, dim), rtol=0, atol=0)
    torch.testing.assert_close(torch.sum(d, dim, dtype=torch.float64).cpu(), torch.sum(c, dim, dtype=torch.float64),
                               rtol=0, atol=0)
