"""scaled_dot_product_attention on simhpu takes the CPU's fused (flash) kernels
where the CPU would, through PyTorch's "overrideable" backend or cuDNN's
operators, as the program's backend order says (csrc/aten/fused_attention.cpp),
and the math decomposition elsewhere; against the CPU, forward and backward,
eager and compiled."""
import contextlib

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

# The overrideable operators run the CPU's flash kernels, which op_routes sees.
FUSED = "aten::_scaled_dot_product_flash_attention_for_cpu"


def inputs(dtype=torch.float32, heads=(4, 4, 4), lengths=(16, 16), mask=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, heads[0], lengths[0], 8, generator=g, dtype=dtype)
    k = torch.randn(2, heads[1], lengths[1], 8, generator=g, dtype=dtype)
    v = torch.randn(2, heads[2], lengths[1], 8, generator=g, dtype=dtype)
    if mask == "float":
        mask = torch.randn(lengths[0], lengths[1], generator=g, dtype=dtype)
    elif mask == "bool":
        mask = torch.rand(lengths[0], lengths[1], generator=g) > 0.3
        mask[:, 0] = True  # every query sees a key
    return [q, k, v], mask


def run(device, tensors, mask, **kwargs):
    leaves = [t.to(device).requires_grad_() for t in tensors]
    out = F.scaled_dot_product_attention(*leaves, attn_mask=None if mask is None else mask.to(device), **kwargs)
    out.backward(torch.ones_like(out))
    return [out.detach().cpu()] + [t.grad.cpu() for t in leaves]


def tolerance(dtype):
    return dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else dict(atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("mask, is_causal", [(None, False), (None, True), ("float", False), ("bool", False)])
def test_fused_attention_matches_the_cpu_forward_and_backward(dtype, mask, is_causal):
    tensors, mask = inputs(dtype, mask=mask)
    with torch.simhpu.op_routes() as routes:
        got = run("simhpu", tensors, mask, is_causal=is_causal)
    expected = run("cpu", tensors, mask, is_causal=is_causal)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, **tolerance(dtype))
    assert FUSED in routes.counts and f"{FUSED}_backward" in routes.counts, routes
    assert routes.counts[FUSED]["synchronized"] == 0  # queued like any kernel: the host does not wait
    assert "aten::bmm.out" not in routes.counts, routes  # no math decomposition


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("is_causal", [False, True])
def test_grouped_query_attention_takes_the_fused_operators(dtype, is_causal):
    """Llama 3's attention (8 query heads per key/value head there; 2 here): the fused
    kernels, as a GPU's flash kernels take it, not the math decomposition."""
    tensors, mask = inputs(dtype, heads=(4, 2, 2))
    with torch.simhpu.op_routes() as routes:
        got = run("simhpu", tensors, mask, is_causal=is_causal, enable_gqa=True)
    for g, e in zip(got, run("cpu", tensors, mask, is_causal=is_causal, enable_gqa=True)):
        torch.testing.assert_close(g, e, **tolerance(dtype))
    assert FUSED in routes.counts and f"{FUSED}_backward" in routes.counts, routes
    assert "aten::bmm.out" not in routes.counts, routes


@pytest.mark.parametrize("case", ["dropout", "grouped-query with heads that do not divide", "mask that requires grad"])
def test_what_the_fused_operators_cannot_carry_takes_the_math_path(case):
    uneven = case.startswith("grouped-query")
    tensors, mask = inputs(heads=(3, 2, 2) if uneven else (4, 4, 4), mask="float")
    kwargs = {"enable_gqa": True} if uneven else {}
    if case == "dropout":
        with torch.simhpu.op_routes() as routes:
            out = F.scaled_dot_product_attention(*[t.to("simhpu") for t in tensors], dropout_p=0.5)
        assert torch.isfinite(out.cpu()).all()
        assert FUSED not in routes.counts
        return
    if case == "mask that requires grad":
        dev_mask = mask.to("simhpu").requires_grad_()
        cpu_mask = mask.clone().requires_grad_()
        with torch.simhpu.op_routes() as routes:
            out = F.scaled_dot_product_attention(*[t.to("simhpu") for t in tensors], attn_mask=dev_mask)
            out.sum().backward()
        F.scaled_dot_product_attention(*tensors, attn_mask=cpu_mask).sum().backward()
        torch.testing.assert_close(dev_mask.grad.cpu(), cpu_mask.grad, atol=1e-5, rtol=1e-5)
        assert FUSED not in routes.counts
        return
    with torch.simhpu.op_routes() as routes, pytest.raises(RuntimeError) as raised:
        run("simhpu", tensors, mask, **kwargs)
    with pytest.raises(RuntimeError) as on_cpu:
        run("cpu", tensors, mask, **kwargs)
    assert str(on_cpu.value).split("\n")[0] in str(raised.value), (raised.value, on_cpu.value)
    assert FUSED not in routes.counts


def test_the_cpu_kernel_is_queued_when_it_draws_no_randomness():
    # Tagged nondeterministic_seeded, it could draw from the CPU's generator:
    # such calls run synchronised, seeded from the device's. At dropout_p=0 it
    # draws nothing and is queued like any kernel; with dropout the call runs
    # synchronised and refuses as the CPU does.
    q = torch.randn(1, 2, 4, 8, device="simhpu")
    with torch.simhpu.op_routes() as routes:
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, q, q, 0.0)
        with pytest.raises(RuntimeError, match="do not support dropout > 0"):
            torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, q, q, 0.5)
    assert routes.counts[FUSED]["reference"] == 1  # the refused call raised at the call: synchronised
    torch.testing.assert_close((q + 1).cpu(), q.cpu() + 1)  # the device goes on


def test_fused_attention_gradcheck():
    tensors, _ = inputs(torch.float64, lengths=(5, 6))
    leaves = [t.to("simhpu").requires_grad_() for t in tensors]
    assert torch.autograd.gradcheck(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                                    leaves)


def test_fused_attention_compiled_matches_eager():
    torch._dynamo.reset()
    tensors, mask = inputs(mask="float")

    def step(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m) * 2

    def grads(fn):
        leaves = [t.to("simhpu").requires_grad_() for t in tensors]
        out = fn(*leaves, mask.to("simhpu"))
        out.sum().backward()  # the compiled backward
        return [out.detach().cpu()] + [t.grad.cpu() for t in leaves]

    for c, e in zip(grads(torch.compile(step)), grads(step)):
        torch.testing.assert_close(c, e, atol=1e-5, rtol=1e-5)


def test_simulated_time_prices_fused_attention_by_its_flops():
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count
    tensors, _ = inputs()
    q, k, v = [t.to("simhpu").requires_grad_() for t in tensors]
    with torch.simhpu.simulate("h100-sxm") as sim:
        F.scaled_dot_product_attention(q, k, v).sum().backward()
    by_op = {x.op: x for x in sim.launches}
    forward = by_op["aten::_scaled_dot_product_flash_attention_for_cpu"]
    backward = by_op["aten::_scaled_dot_product_flash_attention_for_cpu_backward"]
    assert forward.work == backward.work == "matrix"
    assert forward.flops == sdpa_flop_count(q.shape, k.shape, v.shape)
    assert backward.flops == sdpa_backward_flop_count(q.shape, q.shape, k.shape, v.shape)


def test_the_overrideable_operators_refuse_what_they_cannot_carry_and_the_device_goes_on():
    """Called directly (scaled_dot_product_attention never asks them to), the operators
    refuse dropout, a debug mask and a mask's gradient with the operator and the reason."""
    (q, k, v), _ = inputs()
    q, k, v = (t.to("simhpu") for t in (q, k, v))
    forward = torch.ops.aten._scaled_dot_product_fused_attention_overrideable
    with pytest.raises(RuntimeError, match="_scaled_dot_product_fused_attention_overrideable on simhpu: dropout_p "
                                           "must be 0 .got 0.5"):
        forward(q, k, v, None, 0.5)
    with pytest.raises(RuntimeError, match="overrideable on simhpu: no debug mask"):
        forward(q, k, v, None, 0.0, False, True)
    out, logsumexp = forward(q, k, v, None)[:2]
    bias, none = torch.zeros(16, 16, device="simhpu"), torch.empty(0, device="simhpu")
    with pytest.raises(RuntimeError, match="overrideable_backward on simhpu: no gradient for attn_bias"):
        torch.ops.aten._scaled_dot_product_fused_attention_overrideable_backward(
            torch.ones_like(out), q, k, v, bias, [True, True, True, True], out, logsumexp, none, none, 16, 16,
            0.0, False, none, none)
    cpu_out = F.scaled_dot_product_attention(*(t.cpu() for t in (q, k, v)))
    torch.testing.assert_close(out.cpu(), cpu_out)  # the refusals left the device usable


class OperatorNames(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


def attention_operators(names):
    return sorted({n.split(".")[1] for n in names if "attention" in n})


# torchtitan's order (cuDNN first, as a Hopper part takes it), the default order (flash first),
# and a program that put math first.
@pytest.mark.parametrize("order, operator", [
    ([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.MATH], "_scaled_dot_product_cudnn_attention"),
    (None, "_scaled_dot_product_fused_attention_overrideable"),
    ([SDPBackend.MATH, SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION], None),
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_fused_operator_named_follows_the_programs_backend_order(order, operator, dtype):
    tensors, _ = inputs(dtype, heads=(4, 2, 2))
    names = OperatorNames()
    ordered = sdpa_kernel(order, set_priority=True) if order else contextlib.nullcontext()
    with ordered, names:
        got = run("simhpu", tensors, None, is_causal=True, enable_gqa=True)
    for g, e in zip(got, run("cpu", tensors, None, is_causal=True, enable_gqa=True)):
        torch.testing.assert_close(g, e, **tolerance(dtype))
    expected = [operator, operator + "_backward"] if operator else []
    assert attention_operators(names.names) == sorted(expected), names.names


def test_the_cudnn_operators_pass_opcheck_and_compile():
    from torch.library import opcheck
    (q, k, v), mask = inputs(mask="float")
    args = [t.to("simhpu").requires_grad_() for t in (q, k, v)]
    for bias in (None, mask.to("simhpu")):
        opcheck(torch.ops.aten._scaled_dot_product_cudnn_attention.default, (*args, bias, True, 0.0, bias is None),
                test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))
    torch._dynamo.reset()

    def step(q, k, v):
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH], set_priority=True):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True) * 2

    def grads(fn):
        leaves = [t.detach().to("simhpu").requires_grad_() for t in (q, k, v)]
        out = fn(*leaves)
        out.sum().backward()
        return [out.detach().cpu()] + [t.grad.cpu() for t in leaves]

    for c, e in zip(grads(torch.compile(step)), grads(step)):
        torch.testing.assert_close(c, e, atol=1e-5, rtol=1e-5)


def test_the_cudnn_operators_refuse_what_they_cannot_carry_and_the_device_goes_on():
    (q, k, v), _ = inputs()
    q, k, v = (t.to("simhpu") for t in (q, k, v))
    forward = torch.ops.aten._scaled_dot_product_cudnn_attention
    with pytest.raises(RuntimeError, match="_scaled_dot_product_cudnn_attention on simhpu: query, key and value "
                                           "must be 4-D .batch, heads, length, dim. .got 3-D"):
        forward(q[0], k[0], v[0], None, True)
    with pytest.raises(RuntimeError, match="_scaled_dot_product_cudnn_attention on simhpu: dropout_p must be 0"):
        forward(q, k, v, None, True, 0.5)
    out, logsumexp = forward(q, k, v, None, True)[:2]
    assert logsumexp.shape == (*q.shape[:3], 1) and logsumexp.dtype == torch.float32
    none = torch.empty(0, device="simhpu")
    with pytest.raises(RuntimeError, match="cudnn_attention_backward on simhpu: logsumexp must be the forward's"):
        torch.ops.aten._scaled_dot_product_cudnn_attention_backward(
            torch.ones_like(out), q, k, v, out, logsumexp.squeeze(-1), none, none, none, none, none, 16, 16, 0.0,
            False)
    torch.testing.assert_close(out.cpu(), F.scaled_dot_product_attention(*(t.cpu() for t in (q, k, v))))
