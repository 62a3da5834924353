"""The reference path: operators without a dedicated kernel run ATen's CPU kernel as
a device kernel, asynchronously, over the device memory. One test (or a few) per
finding of the issue that introduced it."""
import copy
import os
import subprocess
import sys
import time

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_simhpu
from torch_simhpu.simulation import part_fit, simulate

DEV = "simhpu"


def both(fn, *tensors):
    """fn on CPU tensors and on simhpu copies of them: (cpu result, device result on the CPU)."""
    expected = fn(*[t.clone() for t in tensors])
    actual = fn(*[t.to(DEV) for t in tensors])
    return expected, actual


# ---- 1. in-place and out= on strided tensors ---------------------------------

@pytest.mark.parametrize("write", [
    lambda x: x[::2].zero_(),
    lambda x: x.view(3, 4)[:, 0].fill_(1),
    lambda x: x.view(3, 4).t().mul_(torch.arange(3.0, device=x.device)),
    lambda x: x.view(3, 4)[:, :3].diagonal().fill_(7),
    lambda x: torch.add(x[::2][:3], 1, out=x[::2][:3]),
    lambda x: torch.add(torch.ones(6, device=x.device), 2, out=x[::2]),
    lambda x: torch.exp(torch.zeros(6, device=x.device), out=x[1::2]),
    lambda x: x.view(3, 4).t().clamp_(min=3),
], ids=["slice-zero_", "column-fill_", "transposed-mul_", "diagonal-fill_", "add-out-aliasing",
        "native-add-out", "exp-out-strided", "clamp_-transposed"])
def test_writes_through_strided_views_land_where_the_cpu_puts_them(write):
    base = torch.arange(12.0)
    expected_view = write(base)
    device_base = torch.arange(12.0, device=DEV)
    view = write(device_base)
    torch.testing.assert_close(device_base.cpu(), base)
    assert view.stride() == expected_view.stride()
    torch.testing.assert_close(view.cpu(), expected_view)


def test_out_tensor_of_the_wrong_size_is_resized_like_the_cpu_does():
    out_cpu, out_dev = torch.empty(0), torch.empty(0, device=DEV)
    torch.mul(torch.ones(2, 3), 2, out=out_cpu)
    torch.mul(torch.ones(2, 3, device=DEV), 2, out=out_dev)
    assert out_dev.shape == out_cpu.shape and out_dev.stride() == out_cpu.stride()
    torch.testing.assert_close(out_dev.cpu(), out_cpu)


def test_in_place_op_refuses_to_broadcast_its_self_like_the_cpu():
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        torch.ones(5, 1, dtype=torch.bool).logical_xor_(torch.ones(5, 5, dtype=torch.bool))
    x = torch.ones(5, 1, device=DEV, dtype=torch.bool)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        x.logical_xor_(torch.ones(5, 5, device=DEV, dtype=torch.bool))
    assert x.shape == (5, 1)
    assert (torch.ones(2, device=DEV) + 1).cpu().tolist() == [2.0, 2.0]  # still usable


# ---- 2. mutations a schema does not announce (BatchNorm running stats) -------

@pytest.mark.parametrize("norm", [nn.BatchNorm1d(4), nn.BatchNorm2d(4), nn.InstanceNorm1d(4, track_running_stats=True)])
def test_running_statistics_are_updated_in_train_mode(norm):
    x = torch.randn(8, 4, 5)
    if isinstance(norm, nn.BatchNorm2d):
        x = x.unsqueeze(-1)
    device_norm = copy.deepcopy(norm).to(DEV)
    for _ in range(2):
        norm(x)
        device_norm(x.to(DEV))
    torch.testing.assert_close(device_norm.running_mean.cpu(), norm.running_mean)
    torch.testing.assert_close(device_norm.running_var.cpu(), norm.running_var)
    assert int(device_norm.num_batches_tracked) == int(norm.num_batches_tracked)


# ---- 3. convolutions and recurrent cells ---------------------------------------

@pytest.mark.parametrize("make, shape", [
    (lambda: nn.Conv1d(3, 4, 3, padding=1), (2, 3, 9)),
    (lambda: nn.Conv2d(3, 4, 3, stride=2, groups=1, bias=False), (2, 3, 9, 9)),
    (lambda: nn.Conv2d(4, 4, 3, groups=2, dilation=2), (2, 4, 9, 9)),
    (lambda: nn.Conv3d(2, 3, 2), (1, 2, 5, 5, 5)),
    (lambda: nn.ConvTranspose2d(3, 2, 3, stride=2, output_padding=1), (2, 3, 5, 5)),
    (lambda: nn.Conv2d(3, 4, 3).to(memory_format=torch.channels_last), (2, 3, 8, 8)),
], ids=["conv1d", "conv2d-nobias", "conv2d-groups-dilation", "conv3d", "conv-transpose2d", "channels-last"])
def test_convolution_forward_and_backward_match_the_cpu(make, shape):
    torch.manual_seed(0)
    module = make()
    x = torch.randn(shape, requires_grad=True)
    if "channels" in str(module.weight.stride()) or module.weight.is_contiguous(memory_format=torch.channels_last):
        x = x.detach().to(memory_format=torch.channels_last).requires_grad_()
    device_module = copy.deepcopy(module).to(DEV)
    xd = x.detach().to(DEV).requires_grad_()
    expected, actual = module(x), device_module(xd)
    expected.square().sum().backward()
    actual.square().sum().backward()
    torch.testing.assert_close(actual.cpu(), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(xd.grad.cpu(), x.grad, atol=1e-5, rtol=1e-5)
    for p, q in zip(device_module.parameters(), module.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU, nn.RNN])
@pytest.mark.parametrize("bias", [True, False])
def test_recurrent_layers_match_the_cpu(cls, bias):
    torch.manual_seed(0)
    rnn = cls(4, 5, num_layers=2, bias=bias, batch_first=True)
    x = torch.randn(3, 6, 4)
    device_rnn = copy.deepcopy(rnn).to(DEV)
    out, _ = rnn(x)
    device_out, _ = device_rnn(x.to(DEV))
    out.sum().backward()
    device_out.sum().backward()
    torch.testing.assert_close(device_out.cpu(), out, atol=1e-5, rtol=1e-5)
    for p, q in zip(device_rnn.parameters(), rnn.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, atol=1e-5, rtol=1e-5)


def test_the_transformer_inference_fast_path_runs_on_the_device_and_matches_the_cpu():
    # (eval mode without grad: torch._transformer_encoder_layer_fwd and _native_multi_head_attention,
    # which ATen registers for the CPU and CUDA only; the device runs ATen's composites of them)
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True).eval()
    attention = nn.MultiheadAttention(32, 4, batch_first=True).eval()
    x = torch.randn(2, 5, 32)
    device_layer, device_attention = copy.deepcopy(layer).to(DEV), copy.deepcopy(attention).to(DEV)
    part = dict(part_fit._raw("h100-sxm"), memory_capacity=float(torch_simhpu._C._memory_limit()))
    with torch.no_grad(), simulate(part) as sim:  # (its timeline names each kernel the device ran)
        actual = device_layer(x.to(DEV))
        attended, _ = device_attention(x.to(DEV), x.to(DEV), x.to(DEV), need_weights=False)
    kernels = {k.op.split(".")[0] for k in sim.kernels()}
    assert {"aten::addmm", "aten::_addmm_activation", "aten::native_layer_norm"} <= kernels, kernels
    assert not kernels & {"aten::_transformer_encoder_layer_fwd", "aten::_native_multi_head_attention"}
    with torch.no_grad():
        torch.testing.assert_close(actual.cpu(), layer(x), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(attended.cpu(), attention(x, x, x, need_weights=False)[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU, nn.RNN])
def test_recurrent_layers_over_packed_sequences_match_the_cpu(cls):
    torch.manual_seed(0)
    rnn = cls(4, 5, num_layers=2, batch_first=True)
    x = torch.randn(3, 6, 4)
    lengths = torch.tensor([6, 4, 2])
    device_rnn = copy.deepcopy(rnn).to(DEV)
    out, _ = rnn(nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True))
    device_out, _ = device_rnn(nn.utils.rnn.pack_padded_sequence(x.to(DEV), lengths, batch_first=True))
    out.data.sum().backward()
    device_out.data.sum().backward()
    torch.testing.assert_close(device_out.data.cpu(), out.data, atol=1e-5, rtol=1e-5)
    for p, q in zip(device_rnn.parameters(), rnn.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("cls", [nn.LSTMCell, nn.GRUCell])
def test_fused_cells_gradcheck(cls):
    torch.manual_seed(0)
    cell = cls(3, 4).double().to(DEV)
    x = torch.randn(2, 3, dtype=torch.float64, device=DEV, requires_grad=True)
    h = torch.randn(2, 4, dtype=torch.float64, device=DEV, requires_grad=True)
    if cls is nn.LSTMCell:
        c = torch.randn(2, 4, dtype=torch.float64, device=DEV, requires_grad=True)
        assert torch.autograd.gradcheck(lambda x, h, c: cell(x, (h, c)), (x, h, c))
    else:
        assert torch.autograd.gradcheck(lambda x, h: cell(x, h), (x, h))


# ---- 4. conjugate and negative views -------------------------------------------

def test_conjugate_and_negative_views_copy_out_resolved():
    x = torch.randn(4, 3, dtype=torch.complex64)
    xd = x.to(DEV)
    torch.testing.assert_close(xd.conj().cpu(), x.conj())
    torch.testing.assert_close(torch._neg_view(xd).cpu(), torch._neg_view(x))
    torch.testing.assert_close(xd.conj().clone().cpu(), x.conj().clone())
    torch.testing.assert_close((xd.conj() * 2).cpu(), x.conj() * 2)


@pytest.mark.parametrize("fn", [torch.fft.ifft, torch.fft.hfft, lambda t: torch.fft.ihfft(t.real), lambda t: torch.fft.irfft(t)])
def test_fft_family_matches_the_cpu(fn):
    x = torch.randn(8, dtype=torch.complex64)
    torch.testing.assert_close(fn(x.to(DEV)).cpu(), fn(x), atol=1e-5, rtol=1e-5)


def test_eig_backward_matches_the_cpu():
    torch.manual_seed(0)
    a = torch.randn(4, 4, dtype=torch.float64, requires_grad=True)
    ad = a.detach().to(DEV).requires_grad_()
    for t in (a, ad):
        w, v = torch.linalg.eig(t)
        (w.abs().sum() + v.abs().sum()).backward()
    torch.testing.assert_close(ad.grad.cpu(), a.grad)


# ---- 5. views are views -----------------------------------------------------------

def test_unfold_view_as_real_and_view_as_complex_write_through_to_their_base():
    x = torch.arange(10.0, device=DEV)
    x.unfold(0, 3, 2).fill_(-1)
    assert x.cpu().tolist() == [-1.0] * 9 + [9.0]
    z = torch.ones(3, dtype=torch.complex64, device=DEV)
    torch.view_as_real(z)[:, 1] = 5
    assert z.cpu().tolist() == [1 + 5j] * 3
    r = torch.zeros(3, 2, device=DEV)
    torch.view_as_complex(r).mul_(0).add_(2 + 3j)
    assert r.cpu().tolist() == [[2.0, 3.0]] * 3
    assert torch.view_as_real(z)._base is z


def test_bilinear_with_a_batch_matches_the_cpu():
    torch.manual_seed(0)
    m = nn.Bilinear(3, 4, 5)
    a, b = torch.randn(6, 3), torch.randn(6, 4)
    torch.testing.assert_close(copy.deepcopy(m).to(DEV)(a.to(DEV), b.to(DEV)).cpu(), m(a, b), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("fn", [
    lambda a: torch.linalg.qr(a)[0].sum() + torch.linalg.qr(a)[1].sum(),
    lambda a: torch.linalg.eigh(a @ a.mT)[1].abs().sum(),
    lambda a: torch.linalg.householder_product(a, torch.tensor([0.5, 0.25], dtype=a.dtype, device=a.device)).sum(),
], ids=["qr", "eigh", "householder_product"])
def test_linear_algebra_gradients_match_the_cpu(fn):
    torch.manual_seed(0)
    a = torch.randn(4, 3, dtype=torch.float64)
    if "eigh" in str(fn):
        a = torch.randn(3, 3, dtype=torch.float64)
    ad = a.to(DEV).requires_grad_()
    a.requires_grad_()
    fn(a).backward()
    fn(ad).backward()
    torch.testing.assert_close(ad.grad.cpu(), a.grad)


# ---- 6. random numbers come from the device's generator -----------------------------

RANDOM_OPS = {
    "dropout": lambda: F.dropout(torch.ones(64, device=DEV), 0.5),
    "randperm": lambda: torch.randperm(32, device=DEV),
    "bernoulli": lambda: torch.bernoulli(torch.full((64,), 0.5, device=DEV)),
    "multinomial": lambda: torch.multinomial(torch.ones(8, device=DEV), 4),
    "normal": lambda: torch.normal(torch.zeros(16, device=DEV), torch.ones(16, device=DEV)),
    "exponential_": lambda: torch.empty(16, device=DEV).exponential_(),
    "rrelu": lambda: F.rrelu(-torch.ones(16, device=DEV), training=True),
    "randn": lambda: torch.randn(16, device=DEV),
}


@pytest.mark.parametrize("name", list(RANDOM_OPS))
def test_random_ops_follow_the_device_seed_and_not_the_cpu_seed(name):
    draw = RANDOM_OPS[name]
    torch.simhpu.manual_seed(1)
    first = draw().cpu()
    torch.simhpu.manual_seed(1)
    torch.rand(100)  # drawing from the CPU's generator must not matter
    again = draw().cpu()
    torch.testing.assert_close(again, first)
    different = draw().cpu()  # the sequence moves on
    assert not torch.equal(different, first) or name == "multinomial"


def test_a_device_generator_is_accepted_and_private():
    g = torch.Generator(device=DEV).manual_seed(5)
    a = torch.bernoulli(torch.full((64,), 0.5, device=DEV), generator=g).cpu()
    g.manual_seed(5)
    torch.randn(10, device=DEV)  # the default generator's draws do not disturb g
    b = torch.bernoulli(torch.full((64,), 0.5, device=DEV), generator=g).cpu()
    torch.testing.assert_close(a, b)
    with pytest.raises(RuntimeError, match="generator"):
        torch.bernoulli(torch.full((4,), 0.5, device=DEV), generator=torch.Generator().manual_seed(1))


def test_dropout_keeps_the_expected_fraction_and_scale():
    torch.simhpu.manual_seed(0)
    out = F.dropout(torch.ones(100_000, device=DEV), 0.3).cpu()
    kept = out != 0
    assert abs(kept.float().mean().item() - 0.7) < 0.01
    torch.testing.assert_close(out[kept], torch.full_like(out[kept], 1 / 0.7))


# ---- 7. device checks as CUDA's -------------------------------------------------

@pytest.mark.parametrize("call", [
    lambda: torch.ones(3, device=DEV) @ torch.ones(3, 2),
    lambda: torch.cat([torch.ones(2, device=DEV), torch.ones(2)]),
    lambda: nn.Linear(3, 2).to("simhpu:1")(torch.ones(1, 3, device="simhpu:0")),
    lambda: torch.ones(2, 2, device=DEV).exp_().mm(torch.ones(2, 2, device="simhpu:1")),
], ids=["matmul-cpu", "cat-cpu", "linear-other-device", "mm-other-device"])
def test_tensors_on_different_devices_are_refused(call):
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        call()
    assert (torch.ones(2, device=DEV) * 3).cpu().tolist() == [3.0, 3.0]


def test_cpu_scalars_and_cpu_indices_are_accepted_as_on_cuda():
    x = torch.arange(6.0, device=DEV)
    assert (x * torch.tensor(2.0)).cpu().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    assert x[torch.tensor([0, 5])].cpu().tolist() == [0.0, 5.0]


def test_indices_on_the_device_follow_a_cpu_tensor_they_index_as_atens_advanced_indexing_does():
    """AdvancedIndex moves indices to self's device: a CPU tensor written through device indices is
    written on the CPU, its indices read back (op-plugin's index_put test asks this of the part)."""
    x = torch.arange(6.0)
    x.index_put_((torch.tensor([1, 4], device=DEV),), torch.tensor([10.0, 40.0]))
    assert x.tolist() == [0.0, 10.0, 2.0, 3.0, 40.0, 5.0]
    summed = torch.zeros(3).index_put((torch.tensor([0, 0, 2], device=DEV),), torch.ones(3), accumulate=True)
    assert summed.device.type == "cpu" and summed.tolist() == [2.0, 0.0, 1.0]
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):  # values: not moved
        torch.zeros(3).index_put_((torch.tensor([0], device=DEV),), torch.ones(1, device=DEV))


def test_index_put_refuses_values_of_the_wrong_shape_at_the_call_as_the_cpu_does():
    """Its meta kernel takes values of any shape: where the indices say what they select, a call the
    CPU refuses runs synchronised, so the error comes at the call, not at a later synchronisation."""
    x = torch.zeros(3, 3, device=DEV)
    rows, cols = torch.tensor([0, 2]), torch.tensor([1, 0])
    with pytest.raises(RuntimeError, match=r"value tensor of shape \[2, 1, 1, 1\] cannot be broadcast"):
        x.index_put_((rows, cols), torch.ones(2, 1, 1, 1, device=DEV))
    with pytest.raises(IndexError, match="indexing tensors could not be broadcast together"):
        x.index_put_((rows, torch.tensor([1, 0, 2])), torch.ones(1, device=DEV))
    with pytest.raises(IndexError, match="indexing tensors could not be broadcast together"):  # (a mask: 2 trues)
        x.index_put_((torch.tensor([True, False, True]), torch.tensor([0, 1, 2])), torch.ones(1, device=DEV))
    x.index_put_((rows, cols), torch.tensor([5.0, 10.0], device=DEV))
    x[:, torch.tensor([2])] = torch.ones(3, 1, device=DEV)  # (the indexed block in the middle: values [3, 1])
    assert x.cpu().tolist() == [[0.0, 5.0, 1.0], [0.0, 0.0, 1.0], [10.0, 0.0, 1.0]]


# ---- 8. Module.to keeps parameters (and tied weights) ---------------------------------

def test_module_to_keeps_parameter_objects_and_ties():
    torch.manual_seed(0)
    emb = nn.Embedding(10, 4)
    head = nn.Linear(4, 10, bias=False)
    head.weight = emb.weight
    model = nn.ModuleDict({"emb": emb, "head": head})
    opt = torch.optim.SGD(model.parameters(), lr=0.5)  # built before .to(), as many scripts do
    weight = emb.weight
    model.to(DEV)
    assert model["emb"].weight is weight and model["head"].weight is model["emb"].weight
    assert weight.device.type == DEV
    before = weight.detach().cpu().clone()
    loss = model["head"](model["emb"](torch.tensor([1, 2], device=DEV))).sum()
    loss.backward()
    opt.step()
    assert not torch.equal(weight.detach().cpu(), before)  # the optimizer updated the model's tensor


def test_has_compatible_shallow_copy_type_as_cuda():
    assert torch._has_compatible_shallow_copy_type(torch.ones(1), torch.ones(1, device=DEV))
    assert torch._has_compatible_shallow_copy_type(torch.ones(1, device=DEV), torch.ones(1))


# ---- 9. loading with `import torch`, and the late import ---------------------------------

def _python(code, **env):
    # Outside the source tree: its torch_simhpu/ folder would shadow the installed package.
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300, cwd=os.path.dirname(sys.executable))


def test_import_torch_loads_the_device():
    r = _python("import torch; print(torch.randn(2, device='simhpu').device, "
                "'torch_simhpu' in __import__('sys').modules)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["simhpu:0", "True"]


def test_backward_works_when_loaded_by_import_torch_after_a_cpu_backward():
    r = _python("import torch\n"
                "x = torch.ones(2, requires_grad=True); x.sum().backward()\n"
                "y = torch.ones(2, device='simhpu', requires_grad=True); (y * 2).sum().backward()\n"
                "print(y.grad.cpu().tolist())")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[2.0, 2.0]"


def test_late_import_after_a_backward_is_a_clear_error():
    r = _python("import torch\n"
                "x = torch.ones(2, requires_grad=True); x.sum().backward()\n"
                "import torch_simhpu", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert r.returncode != 0
    assert "ImportError: torch_simhpu was imported after a backward pass" in r.stderr
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD" in r.stderr


# ---- 10. asynchronous, counted, no host synchronisation --------------------------

def test_reference_ops_return_before_the_device_ran_them():
    x = torch.ones(1000, device=DEV)
    torch.simhpu.synchronize()
    torch_simhpu._C._sleep_on_device(x, 200_000)  # the stream is busy for 0.2 s
    start = time.perf_counter()
    y = x.exp().cumsum(0).sin()  # reference-path ops: queued behind the sleep
    launched = time.perf_counter() - start
    assert launched < 0.1, f"launching took {launched:.3f} s: it waited for the device"
    torch.testing.assert_close(y.cpu(), torch.ones(1000).exp().cumsum(0).sin())


def test_reference_ops_keep_stream_order_across_streams():
    side = torch.simhpu.Stream()
    x = torch.zeros(4096, device=DEV)
    torch.simhpu.synchronize()
    with torch.simhpu.op_routes() as routes:
        with torch.simhpu.stream(side):
            torch_simhpu._C._sleep_on_device(x, 100_000)
            x.sub_(-1)  # reference path, on the side stream, after the sleep
        torch.simhpu.current_stream().wait_stream(side)
        y = x.cumsum(0)  # reference path, on the default stream: must see the side stream's write
    # Neither waited on the host: only the streams' order can make this right.
    assert routes.total("synchronized") == 0 and routes.total("reference") == 2
    assert y.cpu().equal(torch.arange(1.0, 4097.0))


def test_route_counts_and_no_host_synchronisation_for_shape_known_ops():
    x = torch.randn(8, 8, device=DEV)
    with torch.simhpu.op_routes() as routes:
        y = x.exp().softmax(-1).mm(x).relu_()
        torch.nonzero(y > 0)
        y.sum().item()
    assert routes.total("synchronized") == 2
    assert set(routes.ops("synchronized")) == {"aten::nonzero", "aten::_local_scalar_dense"}
    assert "aten::exp.out" in routes.ops("reference")
    assert routes.counts["aten::exp.out"]["reference"] == 1
    assert "synchronized" in str(routes)
    with pytest.raises(ValueError, match="route must be one of"):
        routes.ops("nowhere")


def test_empty_out_tensors_are_sized_like_the_cpu_and_then_launched_asynchronously():
    x = torch.arange(1.0, 7.0, device=DEV)
    for _ in range(2):  # the first call of an op may run synchronised, to check its meta kernel
        out = torch.empty(0, device=DEV)
        torch.cumprod(x, 0, out=out)
    with torch.simhpu.op_routes() as routes:
        out = torch.empty(0, device=DEV)
        torch.cumprod(x, 0, out=out)
    assert routes.ops("synchronized") == [] and routes.total("reference") == 1
    torch.testing.assert_close(out.cpu(), torch.arange(1.0, 7.0).cumprod(0))


def test_growing_a_storage_that_holds_data_copies_on_the_stream_without_a_wait():
    out = torch.ones(2, device=DEV)
    torch_simhpu._C._sleep_on_device(out, 50_000)  # the stream is busy: a wait would show
    out.mul_(3)
    with torch.simhpu.op_routes() as routes:
        out.resize_(1000)
    assert routes.total("synchronized") == 0
    assert out.cpu()[:2].tolist() == [3.0, 3.0]


def test_remembered_meta_results_follow_the_default_dtype():
    first = torch.arange(4.0, device=DEV)  # the float dtype of arange comes from the default dtype
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        second = torch.arange(4.0, device=DEV)
    finally:
        torch.set_default_dtype(old)
    assert first.dtype == torch.float32 and second.dtype == torch.float64
    assert second.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]


# ---- 11. errors name the operator, not the CPU backend ----------------------------

def test_kernel_failure_is_asynchronous_and_names_the_op_and_the_launch_site():
    idx = torch.tensor([[0, 7]], device=DEV)
    target = torch.zeros(1, 2, device=DEV)
    target.scatter_(1, idx, 1.0)  # index 7 is out of range: fails on the device
    with pytest.raises(RuntimeError) as err:
        torch.simhpu.synchronize()
    message = str(err.value)
    assert "aten::scatter" in message and "test_reference_path.py" in message
    assert "'CPU' backend" not in message
    assert (torch.ones(2, device=DEV) + 1).cpu().tolist() == [2.0, 2.0]


def test_a_failure_nobody_synchronised_fails_the_program_at_exit():
    r = _python("import torch\n"
                "t = torch.zeros(1, 2, device='simhpu')\n"
                "t.scatter_(1, torch.tensor([[0, 9]], device='simhpu'), 1.0)\n")
    assert r.returncode == 1
    assert "a kernel failed and no synchronising call reported it" in r.stderr
    assert "aten::scatter" in r.stderr and "index 9 is out of bounds" in r.stderr


def test_op_without_any_kernel_is_a_clear_not_implemented_error():
    with pytest.raises(NotImplementedError, match=r"simhpu: aten::_cudnn_rnn_flatten_weight has no simhpu kernel, "
                                                  r"and no CPU kernel to run as its reference kernel"):
        torch.ops.aten._cudnn_rnn_flatten_weight(
            [torch.ones(1, device=DEV)], 1, 1, 1, 1, 1, 1, False, False)


def test_errors_raised_at_launch_are_the_cpus_and_name_the_op():
    with pytest.raises(RuntimeError, match=r"size of tensor a \(3\) must match the size of tensor b \(4\)"):
        torch.ones(3, device=DEV).atan2(torch.ones(4, device=DEV))
    with pytest.raises(IndexError, match=r"Dimension out of range.*aten::unique_dim"):
        torch.unique(torch.ones(3, device=DEV), dim=5)
    assert (torch.ones(2, device=DEV) + 1).cpu().tolist() == [2.0, 2.0]


# ---- fallback controls (PyTorch's PrivateUse1 guide) ---------------------------------

def test_selective_fallback_refuses_unlisted_ops_with_a_way_to_allow_them():
    x = torch.ones(3, device=DEV)
    with torch.simhpu.fallback("selective", ["aten::sin", "cos"]):
        assert x.sin().cpu().allclose(torch.ones(3).sin())
        assert x.cos().cpu().allclose(torch.ones(3).cos())
        with pytest.raises(NotImplementedError, match=r"aten::exp.*selective.*SIMHPU_FALLBACK_OPS"):
            x.exp()
        assert (x + x).cpu().tolist() == [2.0] * 3  # a dedicated kernel needs no permission
    assert torch.simhpu.get_fallback() == ("global", [])
    assert x.exp().cpu().allclose(torch.ones(3).exp())


def test_blocklist_fallback_refuses_only_the_listed_ops():
    x = torch.ones(3, device=DEV)
    with torch.simhpu.fallback("blocklist", ["exp"]):
        with pytest.raises(NotImplementedError, match="aten::exp"):
            x.exp()
        x.sin()


def test_fallback_policy_from_the_environment():
    r = _python("import torch\n"
                "x = torch.ones(2, device='simhpu'); x.sin()\n"
                "try:\n    x.exp()\nexcept NotImplementedError as e:\n    print('refused')",
                SIMHPU_FALLBACK="selective", SIMHPU_FALLBACK_OPS="aten::sin, fill_")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "refused"
    bad = _python("import torch; torch.ones(2, device='simhpu').exp()", SIMHPU_FALLBACK="sometimes")
    assert bad.returncode != 0 and "SIMHPU_FALLBACK" in bad.stderr and "'selective'" in bad.stderr


def test_bad_fallback_mode_from_python():
    with pytest.raises(ValueError, match="expected 'global', 'selective' or 'blocklist'"):
        torch.simhpu.set_fallback("some")
    with pytest.raises(TypeError, match="list of operator names"):
        torch.simhpu.set_fallback("selective", "aten::exp")


# ---- operators registered with torch.library, whose kernels disagree on purpose ----------

_lib = torch.library.Library("simhpu_test", "DEF")  # noqa: TOR901 - a test-only namespace
_lib.define("shape_liar(Tensor x) -> Tensor")
_lib.impl("shape_liar", lambda x: x.new_zeros(3), "CPU")
_lib.impl("shape_liar", lambda x: x.new_empty(2), "Meta")


def _reshape_out(x, *, out):
    out.resize_(1)
    return out.fill_(1)


_lib.define("out_reshaper(Tensor x, *, Tensor(a!) out) -> Tensor(a!)")
_lib.impl("out_reshaper", _reshape_out, "CPU")
_lib.impl("out_reshaper", lambda x, *, out: out, "Meta")


def _size_out(n, fill):
    def kernel(x, *, out):
        out.resize_(n)
        return out.fill_(fill)
    return kernel


_lib.define("out_sizer(Tensor x, *, Tensor(a!) out) -> Tensor(a!)")
_lib.impl("out_sizer", _size_out(3, 7.0), "CPU")
_lib.impl("out_sizer", _size_out(2, 0.0), "Meta")

_lib.define("hidden_rand(Tensor x) -> Tensor", tags=(torch.Tag.nondeterministic_seeded,))
_lib.impl("hidden_rand", lambda x: torch.rand(x.shape), "CPU")
_lib.impl("hidden_rand", lambda x: torch.empty_like(x), "Meta")


META_CALLS = {"scaled": 0, "scaled_pointwise": 0}


def _counting_meta(name):
    def meta(x, s):
        META_CALLS[name] += 1
        return torch.empty_like(x)
    return meta


for _name, _tags in (("scaled", ()), ("scaled_pointwise", (torch.Tag.pointwise,))):
    _lib.define(f"{_name}(Tensor x, float s) -> Tensor", tags=_tags)
    _lib.impl(_name, lambda x, s: x * s, "CPU")
    _lib.impl(_name, _counting_meta(_name), "Meta")


def test_a_pointwise_operator_asks_its_meta_kernel_once_for_every_number_it_is_given():
    # An optimizer's step size changes every step; a pointwise operator's outputs
    # do not depend on it, so its remembered meta result serves every value. An
    # operator not tagged pointwise may shape its outputs by a number (an
    # upsample's scale): each new value asks its meta kernel again.
    x = torch.ones(3, device=DEV)
    for name in META_CALLS:
        before = META_CALLS[name]
        op = getattr(torch.ops.simhpu_test, name)
        results = [op(x, 0.5 + step) for step in range(5)]
        assert [r.cpu().tolist() for r in results] == [[0.5 + step] * 3 for step in range(5)]
        META_CALLS[name] -= before
    assert META_CALLS == {"scaled": 5, "scaled_pointwise": 1}


def test_a_cpu_result_unlike_the_meta_promise_is_an_error_not_a_broadcast():
    torch.ops.simhpu_test.shape_liar(torch.ones(4, device=DEV))
    with pytest.raises(RuntimeError, match=r"simhpu_test::shape_liar: its meta kernel promised an output of shape "
                                           r"\[2\].*its CPU kernel made one of shape \[3\]"):
        torch.simhpu.synchronize()
    assert (torch.ones(2, device=DEV) + 1).cpu().tolist() == [2.0, 2.0]


def test_a_written_argument_reshaped_unlike_the_meta_promise_is_an_error():
    out = torch.zeros(3, device=DEV)
    torch.ops.simhpu_test.out_reshaper(torch.ones(3, device=DEV), out=out)
    with pytest.raises(RuntimeError, match=r"simhpu_test::out_reshaper: its CPU kernel reshaped a written argument "
                                           r"to \[1\].*its meta kernel announced \[3\]"):
        torch.simhpu.synchronize()


def test_out_kernels_that_size_empty_outs_unlike_their_meta_stay_synchronised():
    x = torch.ones(2, device=DEV)
    with torch.simhpu.op_routes() as routes:
        for _ in range(3):
            out = torch.empty(0, device=DEV)
            torch.ops.simhpu_test.out_sizer(x, out=out)
            assert out.cpu().tolist() == [7.0, 7.0, 7.0]  # the CPU kernel's size and values
    assert routes.counts["simhpu_test::out_sizer"] == {"dedicated": 0, "reference": 0, "synchronized": 3}


def test_an_op_drawing_from_the_cpu_generator_is_seeded_by_the_device_and_leaves_the_cpu_alone():
    x = torch.ones(5, device=DEV)
    cpu_state = torch.get_rng_state()
    torch.simhpu.manual_seed(3)
    with torch.simhpu.op_routes() as routes:
        first = torch.ops.simhpu_test.hidden_rand(x)
    first = first.cpu()
    torch.simhpu.manual_seed(3)
    again = torch.ops.simhpu_test.hidden_rand(x).cpu()
    torch.testing.assert_close(again, first)
    assert not torch.equal(torch.ops.simhpu_test.hidden_rand(x).cpu(), first)
    assert torch.equal(torch.get_rng_state(), cpu_state)
    assert routes.ops("synchronized") == ["simhpu_test::hidden_rand"]


# Quantized tensors have no device form: refused at the call, naming the op ------------------------

@pytest.mark.parametrize("make, op", [
    (lambda t: torch.quantize_per_tensor(t, 0.1, 10, torch.qint8), "aten::quantize_per_tensor"),
    (lambda t: torch.quantize_per_tensor_dynamic(t, torch.quint8, False), "aten::quantize_per_tensor_dynamic"),
    (lambda t: torch.quantize_per_channel(t.view(2, 2), torch.ones(2, device="simhpu"),
                                          torch.zeros(2, dtype=torch.long, device="simhpu"), 0, torch.qint8),
     "aten::quantize_per_channel"),
    (lambda t: torch.quantize_per_tensor(t.cpu(), 0.1, 10, torch.qint8).to("simhpu"), "aten::empty_quantized"),
    (lambda t: torch.zeros(3, dtype=torch.quint8, device="simhpu"), "aten::empty"),
    (lambda t: t.to(torch.qint32), "aten::empty"),
])
def test_quantized_tensors_are_refused_at_the_call(make, op):
    t = torch.randn(4, device="simhpu")
    with pytest.raises(NotImplementedError, match=rf"simhpu: {op}.*quantized tensors do not exist on the simhpu device"):
        make(t)
    torch.simhpu.synchronize()  # nothing was queued that fails later
    torch.testing.assert_close((t * 2).cpu(), t.cpu() * 2)
    assert torch.qint8 not in torch.accelerator.get_device_capability("simhpu")["supported_dtypes"]


@pytest.mark.parametrize("op, outputs", [
    (lambda x: torch.relu(x), 1),                                     # a functional kernel, one result
    (lambda x: torch.var_mean(x, dim=1), 2),                          # two results of one size
    (lambda x: torch.native_layer_norm(x, [5], None, None, 1e-5), 3),  # three, two of one size
    (lambda x: F.conv2d(x[None], torch.ones(2, 4, 3, 3, device=x.device)), 1),
])
def test_functional_results_are_written_in_place_and_match_the_cpu(op, outputs):
    """Their CPU kernel's allocation of each result takes the device output's memory
    (csrc/aten/result_placement.h): nothing is copied. Convolution's oneDNN takes
    buffers by raw_allocate, which must work with such memory too."""
    x = torch.randn(4, 6, 5, generator=torch.Generator().manual_seed(0))
    xd = x.to("simhpu")
    before = torch_simhpu._C._results_placed()
    got = op(xd)
    torch.simhpu.synchronize()
    assert torch_simhpu._C._results_placed() - before == outputs  # no result copied
    expected = op(x)
    torch.testing.assert_close(torch.utils._pytree.tree_map(lambda t: t.cpu(), got), expected)


def test_results_are_copied_when_placement_is_turned_off(tmp_path):
    code = ("import torch, torch_simhpu; x = torch.randn(8, device='simhpu'); "
            "torch.testing.assert_close(torch.relu(x).cpu(), torch.relu(x.cpu())); "
            "print(torch_simhpu._C._result_placement_available(), torch_simhpu._C._results_placed())")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env=dict(os.environ, SIMHPU_RESULT_PLACEMENT="0"), timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "0"]
