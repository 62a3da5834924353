"""Graph mode on simhpu: torch.compile's default compiler (Inductor) and
backend="simhpu", each compiled call launched as one cluster, and
torch.simhpu.Graph capture/replay. Results are compared with the same code run
eagerly on the CPU from the same start."""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.testing import CompileCounterWithBackend

import torch_simhpu
from torch_simhpu import _C


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def launches_in(fn, *args, with_ops=False):
    """(result, the kernel of each launch record the call queued), from the device's trace;
    with_ops: (kernel, launching operator) pairs."""
    torch.simhpu.synchronize()
    mark = _C._start_trace()
    try:
        result = fn(*args)
    finally:
        _C._synchronize_all()
        entries = _C._stop_trace(mark)
    return result, [(e[0], e[1]) if with_ops else e[0] for e in entries]


def to_device(*tensors):
    return [t.to("simhpu") for t in tensors]


# --- torch.compile with no backend argument ---------------------------------

@pytest.mark.parametrize("fn", [
    lambda x, y: (x.sin() + y * 2).relu(),
    lambda x, y: x.sum(dim=1) + y.amax(dim=1),
    lambda x, y: (x @ y.T).softmax(-1),
    lambda x, y: torch.where(x > 0, x, y).cumsum(0),
], ids=["pointwise", "reduction", "matmul_softmax", "where_cumsum"])
def test_default_compile_equals_cpu(fn):
    x, y = torch.randn(16, 32), torch.randn(16, 32)
    out = torch.compile(fn)(*to_device(x, y))
    assert out.device.type == "simhpu"
    torch.testing.assert_close(out.cpu(), fn(x, y))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int64])
def test_default_compile_other_dtypes(dtype):
    """Inductor computes half types in float32 and rounds once: compare with Inductor on the CPU."""
    x = (torch.randn(8, 8) * 10).to(dtype)
    fn = lambda a: (a * 3 + a.sum(0)).abs()  # noqa: E731
    torch.testing.assert_close(torch.compile(fn)(x.to("simhpu")).cpu(), torch.compile(fn)(x))


def mlp_step(model, x, target):
    loss = F.cross_entropy(model(x), target)
    loss.backward()
    return loss


def test_mlp_training_step_equals_cpu():
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                              torch.nn.Linear(32, 4))
    dev = copy.deepcopy(cpu).to("simhpu")
    x, target = torch.randn(8, 16), torch.randint(0, 4, (8,))
    cpu_opt = torch.optim.SGD(cpu.parameters(), lr=0.1)
    dev_opt = torch.optim.SGD(dev.parameters(), lr=0.1)
    step_cpu, step_dev = torch.compile(mlp_step), torch.compile(mlp_step)
    for _ in range(3):
        loss_cpu = step_cpu(cpu, x, target)
        loss_dev = step_dev(dev, x.to("simhpu"), target.to("simhpu"))
        torch.testing.assert_close(loss_dev.cpu(), loss_cpu)
        for p_cpu, p_dev in zip(cpu.parameters(), dev.parameters()):
            torch.testing.assert_close(p_dev.grad.cpu(), p_cpu.grad, atol=1e-5, rtol=1e-4)
        cpu_opt.step(), dev_opt.step()
        cpu_opt.zero_grad(), dev_opt.zero_grad()


def test_npu_ops_inside_compiled_graph_forward_and_backward():
    x, gamma = torch.randn(4, 8), torch.rand(8) + 0.5

    def block(x, gamma):
        y, _ = torch_simhpu.npu_rms_norm(x, gamma)
        return torch_simhpu.npu_swish(y * 2).sum()

    xd, gd = (t.to("simhpu").requires_grad_() for t in (x, gamma))
    xe, ge = (t.to("simhpu").requires_grad_() for t in (x, gamma))
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(block, backend=counter, fullgraph=True)
    out = compiled(xd, gd)
    out.backward()
    expected = block(xe, ge)
    expected.backward()
    torch.testing.assert_close(out.cpu(), expected.cpu())
    torch.testing.assert_close(xd.grad.cpu(), xe.grad.cpu())
    torch.testing.assert_close(gd.grad.cpu(), ge.grad.cpu())
    assert counter.frame_count == 1


def test_recompiles_on_shape_change_and_dynamic_shapes_compile_once():
    fn = lambda x: (x * x.mean()).tanh()  # noqa: E731
    static = CompileCounterWithBackend("inductor")
    compiled = torch.compile(fn, backend=static, dynamic=False)
    for n in (4, 6):
        x = torch.randn(n, 3)
        torch.testing.assert_close(compiled(x.to("simhpu")).cpu(), fn(x))
    assert static.frame_count == 2
    torch._dynamo.reset()
    dynamic = CompileCounterWithBackend("inductor")
    compiled = torch.compile(fn, backend=dynamic, dynamic=True)
    for n in (4, 6, 9):
        x = torch.randn(n, 3)
        torch.testing.assert_close(compiled(x.to("simhpu")).cpu(), fn(x))
    assert dynamic.frame_count == 1


def test_compiled_graph_runs_on_the_stream_not_the_calling_thread():
    """The call returns while the device is still busy with earlier work: its
    kernels are queued behind it, in stream order."""
    x = torch.randn(64, device="simhpu")
    compiled = torch.compile(lambda t: t * 2 + 1)
    compiled(x)  # compile outside the timed part
    torch.simhpu.synchronize()
    _C._sleep_on_device(x, 200_000)
    out = compiled(x)
    assert not torch.simhpu.current_stream().query()
    torch.testing.assert_close(out.cpu(), x.cpu() * 2 + 1)


# --- clustering ---------------------------------------------------------------

@pytest.mark.parametrize("backend", ["inductor", "simhpu"])
def test_one_launch_per_compiled_call(backend):
    x, y = to_device(torch.randn(16, 16), torch.randn(16, 16))

    def fn(x, y):
        a = (x.sin() @ y).relu()
        return a.sum(0) + (a * y).amax(1), torch.cat([a, y]).cos()

    compiled = torch.compile(fn, backend=backend)
    compiled(x, y)
    (out1, out2), kernels = launches_in(compiled, x, y)
    assert kernels == ["cluster"]
    expected = fn(*[t.cpu() for t in (x, y)])
    torch.testing.assert_close(out1.cpu(), expected[0])
    torch.testing.assert_close(out2.cpu(), expected[1])


def test_cluster_off_launches_each_kernel(monkeypatch):
    x = torch.randn(16, 16, device="simhpu")
    with torch_simhpu._inductor.config.patch(cluster=False):
        compiled = torch.compile(lambda t: (t.sin() @ t).relu().sum(0))
        compiled(x)
        _, kernels = launches_in(compiled, x)
    assert "cluster" not in kernels and len(kernels) >= 2


def test_training_step_is_one_launch_forward_one_backward():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to("simhpu")
    x = torch.randn(4, 8, device="simhpu")
    step = torch.compile(lambda m, x: m(x).square().mean().backward())
    step(model, x)
    model.zero_grad(set_to_none=True)  # so the autograd engine adds no gradients up
    _, kernels = launches_in(step, model, x, with_ops=True)
    # The forward graph, the engine's seed gradient for backward(), the backward graph.
    assert kernels == [("cluster", "compiled graph"), ("fill_stub", "aten::fill_.Scalar"), ("cluster", "compiled graph")]


def test_a_host_wait_inside_the_call_splits_the_cluster():
    """nonzero's output size depends on the data: inside the graph (dynamo told to
    keep it there), the host waits for it, so what the call collected before is
    launched first: two clusters, and the right result."""
    x = torch.randn(32)
    fn = lambda t: (t.relu() * 2).nonzero().float().sum() + t.cos().sum()  # noqa: E731
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        counter = CompileCounterWithBackend("inductor")
        compiled = torch.compile(fn, backend=counter, fullgraph=True)
        compiled(x.to("simhpu"))
        out, kernels = launches_in(compiled, x.to("simhpu"))
    assert counter.frame_count == 1
    torch.testing.assert_close(out.cpu(), fn(x))
    assert kernels.count("cluster") == 2, kernels


def test_kernel_error_inside_a_cluster_names_kernel_and_user_line_and_leaves_device_usable():
    table = torch.randn(10, 4, device="simhpu")

    def lookup(idx):
        return (table[idx] * 2).sum(1)

    compiled = torch.compile(lookup)
    ok = compiled(torch.tensor([1, 2], device="simhpu"))
    torch.testing.assert_close(ok.cpu(), (table.cpu()[[1, 2]] * 2).sum(1))
    bad = compiled(torch.tensor([1, 50], device="simhpu"))
    with pytest.raises(RuntimeError, match=r"simhpu kernel 'cluster'.*simhpu kernel 'cpp_fused_\w+'.*out of bounds") as err:
        torch.simhpu.synchronize()
    # The failing kernel is reported at the user's line it was compiled from, not the generated wrapper's.
    assert f"{__file__}:{lookup.__code__.co_firstlineno + 1} failed" in str(err.value)
    del bad
    torch.testing.assert_close(compiled(torch.tensor([3], device="simhpu")).cpu(), (table.cpu()[[3]] * 2).sum(1))


def test_trace_reports_compiled_launches_at_the_users_line():
    x = torch.randn(8, 8, device="simhpu")

    def fn(t):
        return (t @ t).relu()

    with torch_simhpu._inductor.config.patch(cluster=False):
        compiled = torch.compile(fn)
        compiled(x)
        torch.simhpu.synchronize()
        mark = _C._start_trace()
        compiled(x)
        _C._synchronize_all()
        entries = _C._stop_trace(mark)
    sites = {(e[2], e[3]) for e in entries}
    assert sites == {(__file__, fn.__code__.co_firstlineno + 1)}


# --- capture and replay -----------------------------------------------------------

def test_graph_replay_equals_eager_and_follows_static_inputs():
    static_x = torch.randn(8, 8, device="simhpu")
    w = torch.randn(8, 8, device="simhpu")
    g = torch.simhpu.Graph()
    with torch.simhpu.graph(g):
        static_y = (static_x @ w).relu() + static_x.sin()
    assert g.kernel_count >= 3
    for _ in range(3):
        new_x = torch.randn(8, 8)
        static_x.copy_(new_x.to("simhpu"))
        g.replay()
        torch.testing.assert_close(static_y.cpu(), (new_x @ w.cpu()).relu() + new_x.sin())


def test_replay_is_one_launch():
    x = torch.randn(64, device="simhpu")
    g = torch.simhpu.Graph()
    with torch.simhpu.graph(g):
        for _ in range(20):
            x.mul_(1.01)
    _, kernels = launches_in(g.replay)
    assert kernels == ["graph_replay"]
    assert g.kernel_count == 20


def test_graph_captures_a_compiled_call():
    x = torch.randn(16, 16, device="simhpu")
    compiled = torch.compile(lambda t: (t.sin() @ t).relu())
    compiled(x)
    g = torch.simhpu.Graph()
    with torch.simhpu.graph(g):
        y = compiled(x)
    x.copy_(torch.ones(16, 16, device="simhpu"))
    g.replay()
    ones = torch.ones(16, 16)
    torch.testing.assert_close(y.cpu(), (ones.sin() @ ones).relu())


@pytest.mark.parametrize("host_wait", [lambda t: t.sum().item(), lambda t: t.cpu(), lambda t: t.nonzero(),
                                       lambda t: torch.simhpu.synchronize()],
                         ids=["item", "cpu", "nonzero", "synchronize"])
def test_host_wait_during_capture_raises_and_device_stays_usable(host_wait):
    x = torch.randn(8, device="simhpu")
    g = torch.simhpu.Graph()
    with pytest.raises(RuntimeError, match="being captured into a torch.simhpu.Graph"):
        with torch.simhpu.graph(g):
            host_wait(x * 2)
    assert not _C._capturing_graph()
    with pytest.raises(RuntimeError, match="nothing was captured"):
        g.replay()
    torch.testing.assert_close((x + 1).cpu(), x.cpu() + 1)


def test_launch_on_another_stream_during_capture_raises():
    x = torch.randn(8, device="simhpu")
    g = torch.simhpu.Graph()
    with pytest.raises(RuntimeError, match="only work on the capturing stream can be captured"):
        with torch.simhpu.graph(g):
            with torch.simhpu.stream(torch.simhpu.Stream()):
                x.add_(1)
    torch.testing.assert_close((x * 1).cpu(), x.cpu())


def test_graph_api_misuse_is_reported():
    g = torch.simhpu.Graph()
    with pytest.raises(RuntimeError, match="capture_begin was not called"):
        g.capture_end()
    g.capture_begin()
    with pytest.raises(RuntimeError, match="already capturing"):
        torch.simhpu.Graph().capture_begin()
    g.capture_end()
    with pytest.raises(RuntimeError, match="already holds a capture"):
        g.capture_begin()
    g.reset()
    with pytest.raises(RuntimeError, match="nothing was captured"):
        g.replay()


def test_failing_kernel_in_replay_is_reported_and_device_stays_usable():
    x = torch.randn(4, device="simhpu")
    g = torch.simhpu.Graph()
    with torch.simhpu.graph(g):
        _C._launch_failing_kernel(x)
    g.replay()
    with pytest.raises(RuntimeError, match="simhpu kernel 'graph_replay'.*fail_on_device"):
        torch.simhpu.synchronize()
    torch.testing.assert_close((torch.ones(3, device="simhpu") * 2).cpu(), torch.full((3,), 2.0))


def test_a_replay_after_a_failed_one_rewrites_the_graphs_own_memory():
    """A failure leaves what the graph wrote undefined; the next replay writes it anew, so it runs."""
    table = torch.randn(10, 4, device="simhpu")
    static_idx = torch.tensor([1, 2, 3], device="simhpu")
    g = torch.simhpu.Graph()
    with torch.simhpu.graph(g):
        static_out = torch.nn.functional.embedding(static_idx, table).sum(1) * 2
    static_idx.copy_(torch.tensor([1, 20, 3]))
    g.replay()
    with pytest.raises(RuntimeError, match=r"graph_replay.*index out of range|graph_replay.*out of"):
        torch.simhpu.synchronize()
    with pytest.raises(RuntimeError, match="undefined"):
        static_out.cpu()
    static_idx.copy_(torch.tensor([4, 5, 6]))
    g.replay()
    torch.testing.assert_close(static_out.cpu(), table.cpu()[[4, 5, 6]].sum(1) * 2)


def test_memory_a_failed_replay_left_undefined_outside_the_graph_stays_undefined():
    """Only the graph's own memory is rewritten by a replay: a user's tensor it wrote in place is not."""
    user = torch.ones(4, device="simhpu")
    g = torch.simhpu.Graph()
    with torch.simhpu.graph(g):
        _C._launch_failing_kernel(user)
    g.replay()
    with pytest.raises(RuntimeError, match="fail_on_device"):
        torch.simhpu.synchronize()
    g.replay()
    with pytest.raises(RuntimeError, match="fail_on_device"):
        torch.simhpu.synchronize()
    with pytest.raises(RuntimeError, match="undefined"):
        user.cpu()


# --- mode="reduce-overhead" ------------------------------------------------------

def test_reduce_overhead_replays_a_captured_graph_and_equals_cpu():
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    dev = copy.deepcopy(cpu).to("simhpu")
    fn = lambda m, x: m(x).square().mean()  # noqa: E731
    compiled = torch.compile(fn, mode="reduce-overhead")
    losses = []
    for i in range(4):
        x = torch.randn(5, 8)
        loss = compiled(dev, x.to("simhpu"))
        losses.append(loss)
        torch.testing.assert_close(loss.cpu(), fn(cpu, x))
    # Results stay valid after later calls (unlike torch.cuda's static outputs).
    assert len({float(v) for v in losses}) == 4
    x = torch.randn(5, 8)
    loss, kernels = launches_in(compiled, dev, x.to("simhpu"))
    assert kernels == ["cluster"]
    torch.testing.assert_close(loss.cpu(), fn(cpu, x))


def test_reduce_overhead_training_step_equals_cpu():
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    dev = copy.deepcopy(cpu).to("simhpu")
    cpu_opt, dev_opt = torch.optim.SGD(cpu.parameters(), lr=0.05), torch.optim.SGD(dev.parameters(), lr=0.05)
    step = torch.compile(mlp_step, mode="reduce-overhead")
    for _ in range(4):
        x, target = torch.randn(6, 8), torch.randint(0, 3, (6,))
        loss_dev = step(dev, x.to("simhpu"), target.to("simhpu"))
        loss_cpu = mlp_step(cpu, x, target)
        torch.testing.assert_close(loss_dev.cpu(), loss_cpu)
        cpu_opt.step(), dev_opt.step()
        cpu_opt.zero_grad(), dev_opt.zero_grad()
    for p_cpu, p_dev in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(p_dev.detach().cpu(), p_cpu.detach(), atol=1e-5, rtol=1e-4)


def test_reduce_overhead_mutated_input_is_written_back():
    def fn(buf, x):
        buf.add_(x)
        return buf * 2

    compiled = torch.compile(fn, mode="reduce-overhead")
    buf_dev, buf_cpu = torch.zeros(4, device="simhpu"), torch.zeros(4)
    for i in range(4):
        x = torch.full((4,), float(i + 1))
        out = compiled(buf_dev, x.to("simhpu"))
        torch.testing.assert_close(out.cpu(), fn(buf_cpu, x))
        torch.testing.assert_close(buf_dev.cpu(), buf_cpu)


def test_tiny_gpt2_compiled_training_equals_cpu_eager():
    """A transformers model nobody here wrote, forward+backward under torch.compile on
    simhpu, against the same model run eagerly on the CPU from the same weights."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    cpu = transformers.GPT2LMHeadModel(config)
    dev = copy.deepcopy(cpu).to("simhpu")
    batch = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
    cpu_opt, dev_opt = torch.optim.SGD(cpu.parameters(), lr=0.1), torch.optim.SGD(dev.parameters(), lr=0.1)

    def forward_backward(model, batch):
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        return loss

    compiled = torch.compile(forward_backward)
    for _ in range(3):
        loss_dev = compiled(dev, batch.to("simhpu"))
        loss_cpu = forward_backward(cpu, batch)
        torch.testing.assert_close(loss_dev.cpu(), loss_cpu, atol=1e-5, rtol=1e-5)
        for (name, p_cpu), p_dev in zip(cpu.named_parameters(), dev.parameters()):
            torch.testing.assert_close(p_dev.grad.cpu(), p_cpu.grad, atol=1e-5, rtol=1e-4, msg=name)
        cpu_opt.step(), dev_opt.step()
        cpu_opt.zero_grad(), dev_opt.zero_grad()


# --- every npu_* operator under Inductor ----------------------------------------------

def _npu_args():
    x, y, z = torch.randn(4, 8), torch.randn(4, 8), torch.randn(4, 8)
    gamma, rstd = torch.rand(8) + 0.5, torch.rand(4, 1) + 0.5
    return {
        "npu_add_custom": (x, torch.randn(8)),
        "npu_scaled_add": (x, y, 2.5),
        "npu_swish": (x, 1.5),
        "npu_rms_norm": (x, gamma, 1e-6),
        "npu_rms_norm_backward": (y, x, gamma, rstd),
        "npu_sum_dims": (torch.randn(3, 4, 5), [0, 2], True),
        "npu_mul_add": (x, y, z),
        "npu_weighted_sum": (x, [y, z], torch.randn(8)),
        "npu_add_rms_norm": (x, y, gamma, 1e-6),
        "npu_softplus_beta": (x, 2.0, 10.0),
        "npu_lerp_scalar": (x, y, 0.25),
        "npu_broadcast_to": (torch.randn(8), [4, 8]),
        "npu_rms_norm_scaled": (x, gamma, 0.5, 1e-6),
        "npu_add_custom_v0": (x, y),
    }


def test_every_npu_op_has_compile_arguments_here():
    assert set(_npu_args()) == set(torch_simhpu._generated.CUSTOM_OPS)


@pytest.mark.parametrize("name", sorted(_npu_args()))
def test_every_npu_op_compiles_with_inductor_inside_other_ops(name):
    """Each npu_* op between two ops Inductor generates kernels for, fullgraph,
    against the same call run eagerly on the device."""
    op = getattr(torch_simhpu, name)
    args = [a.to("simhpu") if isinstance(a, torch.Tensor) else
            [t.to("simhpu") for t in a] if isinstance(a, list) and a and isinstance(a[0], torch.Tensor) else a
            for a in _npu_args()[name]]

    def block(first, *rest):
        out = op(first * 1.5, *rest)
        return [o.relu() for o in out] if isinstance(out, (tuple, list)) else out.relu()

    expected = block(*args)
    actual = torch.compile(block, fullgraph=True)(*args)
    torch.testing.assert_close([t.cpu() for t in actual] if isinstance(actual, list) else actual.cpu(),
                               [t.cpu() for t in expected] if isinstance(expected, list) else expected.cpu())


def test_reduce_overhead_graph_that_waits_on_the_host_warns_and_still_runs():
    x = torch.randn(16)

    def fn(t):
        return torch.cat([t.relu(), t[t > 0.5]]).sum()  # boolean mask: the host waits for the sizes

    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        compiled = torch.compile(fn, mode="reduce-overhead", fullgraph=True)
        compiled(x.to("simhpu"))
        with pytest.warns(UserWarning, match="cannot capture this compiled graph"):
            out = compiled(x.to("simhpu"))
        torch.testing.assert_close(out.cpu(), fn(x))
        torch.testing.assert_close(compiled(x.to("simhpu")).cpu(), fn(x))


# --- what the launcher refuses ---------------------------------------------------------

def test_unsupported_kernel_argument_type_names_kernel_and_type():
    from torch_simhpu._inductor.kernels import argument_kinds

    assert argument_kinds("k", ["const float*", "bfloat16*", "const int64_t", "const float"]) == "rwif"
    with pytest.raises(NotImplementedError, match=r"cpp_fused_x_0 takes an argument of C\+\+ type 'const double'"):
        argument_kinds("cpp_fused_x_0", ["float*", "const double"])


def test_compiled_kernel_launcher_checks_its_arguments():
    with pytest.raises(RuntimeError, match="'k': no entry point"):
        _C._CompiledKernel("k", 0, "r")
    with pytest.raises(RuntimeError, match="unknown argument kind 'x'"):
        _C._CompiledKernel("k", 1, "rx")
    kernel = _C._CompiledKernel("cpp_fused_k_0", 1, "wi")  # never launched: every call below is refused
    x = torch.zeros(4, device="simhpu")
    with pytest.raises(TypeError, match="'cpp_fused_k_0' takes 2 arguments, got 1"):
        kernel(x)
    with pytest.raises(TypeError, match="argument 1 must be an int, got str"):
        kernel(x, "4")
    with pytest.raises(TypeError, match="argument 0 must be a tensor, got int"):
        kernel(3, x)
    with pytest.raises(RuntimeError, match="no simhpu tensor among its arguments"):
        kernel(torch.zeros(4), 4)
    with pytest.raises(RuntimeError, match="argument 0 is on cpu, expected simhpu:0"):
        _C._CompiledKernel("cpp_fused_k_1", 1, "wr")(torch.zeros(4), x)
    torch.testing.assert_close((x + 1).cpu(), torch.ones(4))


def test_control_flow_subgraphs_launch_on_the_device():
    """torch.cond's branches are subgraphs emitted inside the module: their kernels
    are device launches too, and the predicate's host read splits the cluster."""
    def fn(x, y):
        return torch.cond(x.sum() > 0, lambda a, b: (a.sin() + b).relu(), lambda a, b: (a.cos() - b).abs(), (x, y))

    compiled = torch.compile(fn, fullgraph=True)
    for sign in (1, -1):
        x, y = torch.rand(8) * sign, torch.randn(8)
        torch.testing.assert_close(compiled(x.to("simhpu"), y.to("simhpu")).cpu(), fn(x, y))


def test_reduce_overhead_captures_again_for_other_parameters():
    """The capture reads parameters in place: a model with other parameters (same
    shapes, same compiled graph) must not replay the first model's capture."""
    torch.manual_seed(0)
    first, second = (torch.nn.Linear(8, 3) for _ in range(2))
    devices = [copy.deepcopy(m).to("simhpu") for m in (first, second)]
    compiled = torch.compile(lambda m, x: m(x).tanh(), mode="reduce-overhead")
    for _ in range(3):
        for cpu_model, dev_model in zip((first, second), devices):
            x = torch.randn(4, 8)
            torch.testing.assert_close(compiled(dev_model, x.to("simhpu")).cpu(), cpu_model(x).tanh())


def test_graph_capture_cannot_begin_inside_a_cluster():
    assert _C._begin_cluster(0)
    try:
        with pytest.raises(RuntimeError, match="cannot begin a graph capture inside a compiled graph's call"):
            torch.simhpu.Graph().capture_begin()
    finally:
        _C._end_cluster()
    with pytest.raises(RuntimeError, match="end_cluster without begin_cluster"):
        _C._end_cluster()


def test_reduce_overhead_works_again_after_one_call_with_a_bad_index():
    table = torch.randn(10, 4, device="simhpu")
    fn = lambda idx: (torch.nn.functional.embedding(idx, table) * 2).sum(1)  # noqa: E731
    compiled = torch.compile(fn, mode="reduce-overhead")
    good = torch.tensor([1, 2, 3], device="simhpu")
    for _ in range(3):
        torch.testing.assert_close(compiled(good).cpu(), fn(good).cpu())
    with pytest.raises(RuntimeError, match=rf"launched by .* at {__file__}:\d+ failed"):
        compiled(torch.tensor([1, 20, 3], device="simhpu")).cpu()
    for _ in range(2):
        torch.testing.assert_close(compiled(good).cpu(), fn(good).cpu())
