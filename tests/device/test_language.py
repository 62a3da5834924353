"""Every feature of the YAML language, through the built wheel: generated
elementwise kernels, out= and in-place variants, composite and deprecated ops,
type promotion, explicit output shapes, several outputs, and each argument type."""
import warnings

import pytest
import torch
import torch.nn.functional as F

import torch_simhpu
from helpers import f64, tol

FLOAT_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
OPCHECK_UTILS = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")




# --- elementwise: the held-apart example, an op with no C++ written -----------

@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4)])
def test_generated_elementwise_kernel_matches_cpu(dtype, shape):
    x = torch.randn(shape, dtype=dtype) * 8
    out = torch_simhpu.npu_softplus_beta(x.simhpu(), beta=1.5, threshold=6.0)
    ref = F.softplus(x.double(), beta=1.5, threshold=6.0).to(dtype)
    torch.testing.assert_close(out.cpu(), ref, **tol(dtype))


def test_generated_elementwise_kernel_on_a_strided_view():
    x = torch.randn(6, 8)
    view = x.simhpu().t()[::2]
    torch.testing.assert_close(torch_simhpu.npu_softplus_beta(view).cpu(), F.softplus(x.t()[::2]))


def test_elementwise_backward_double_backward_compile_and_opcheck():
    x = f64(3, 4)
    assert torch.autograd.gradcheck(lambda t: torch_simhpu.npu_softplus_beta(t, 1.5, 2.0), (x,))
    assert torch.autograd.gradgradcheck(lambda t: torch_simhpu.npu_softplus_beta(t, 1.5, 2.0), (x,))
    torch._dynamo.reset()
    fn = torch.compile(lambda t: torch_simhpu.npu_softplus_beta(t, 2.0) * 3, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(fn(x).cpu(), (torch_simhpu.npu_softplus_beta(x, 2.0) * 3).cpu())
    torch.library.opcheck(torch.ops.npu.npu_softplus_beta.default, (x, 2.0, 5.0), test_utils=OPCHECK_UTILS)


@pytest.mark.parametrize("a_dtype,b_dtype", [(torch.float32, torch.float64), (torch.float16, torch.float32),
                                             (torch.bfloat16, torch.bfloat16)])
def test_binary_elementwise_broadcasts_and_promotes(a_dtype, b_dtype):
    a, b = torch.randn(4, 1, 5, dtype=a_dtype), torch.randn(3, 5, dtype=b_dtype)
    out = torch_simhpu.npu_lerp_scalar(a.simhpu(), b.simhpu(), 0.3)
    expected_dtype = torch.result_type(a, b)
    assert out.dtype == expected_dtype and out.shape == (4, 3, 5)
    ref = torch.lerp(a.to(expected_dtype), b.to(expected_dtype), 0.3)
    torch.testing.assert_close(out.cpu(), ref, **tol(expected_dtype))


def test_promotion_to_an_unsupported_dtype_is_reported():
    a = torch.ones(3, dtype=torch.int64).simhpu()
    with pytest.raises(TypeError, match=r"npu_lerp_scalar: arguments 'self', 'end' promote to dtype Long, "
                                        r"which is not supported; supported dtypes: Float"):
        torch_simhpu.npu_lerp_scalar(a, a, 0.5)


def test_binary_elementwise_gradients():
    a, b = f64(2, 3), f64(3)
    assert torch.autograd.gradcheck(lambda x, y: torch_simhpu.npu_lerp_scalar(x, y, 0.25), (a, b))


# --- out= and in-place variants ----------------------------------------------

def test_out_variant_writes_into_the_given_tensor():
    x = torch.randn(4, 5).simhpu()
    out = torch.empty(4, 5, device="simhpu")
    result = torch_simhpu.npu_softplus_beta(x, 2.0, out=out)
    assert result.data_ptr() == out.data_ptr()
    torch.testing.assert_close(out.cpu(), F.softplus(x.cpu(), beta=2.0))
    assert torch.ops.npu.npu_softplus_beta.out(x, 1.0, 20.0, out=out) is None  # mutating ops return nothing
    torch.testing.assert_close(out.cpu(), F.softplus(x.cpu()))


def test_out_variant_resizes_with_a_warning_and_checks_dtype():
    x = torch.randn(3).simhpu()
    with pytest.warns(UserWarning, match=r"npu_softplus_beta: out= argument 'out' of shape \[7\] is resized to \[3\]"):
        torch_simhpu.npu_softplus_beta(x, out=torch.empty(7, device="simhpu"))
    empty = torch.empty(0, device="simhpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch_simhpu.npu_softplus_beta(x, out=empty)  # an empty out= resizes silently
    assert empty.shape == (3,)
    with pytest.raises(TypeError, match=r"npu_softplus_beta: expected out= argument 'out' of dtype Float, "
                                        r"but it has Double"):
        torch_simhpu.npu_softplus_beta(x, out=torch.empty(3, dtype=torch.float64, device="simhpu"))


def test_out_variant_with_several_outputs():
    x, y, z = (torch.randn(2, 3).simhpu() for _ in range(3))
    prod, total = torch.empty(2, 3, device="simhpu"), torch.empty(2, 3, device="simhpu")
    got = torch_simhpu.npu_mul_add(x, y, z, out=(prod, total))
    assert got[0].data_ptr() == prod.data_ptr() and got[1].data_ptr() == total.data_ptr()
    torch.testing.assert_close(prod.cpu(), (x * y).cpu())
    torch.testing.assert_close(total.cpu(), (x + z).cpu())
    with pytest.raises(ValueError, match="npu_mul_add: out= takes 2 tensors, got 1"):
        torch_simhpu.npu_mul_add(x, y, z, out=[prod])


def test_inplace_variant():
    x = torch.randn(3, 4)
    d = x.simhpu()
    ptr = d.data_ptr()
    assert torch_simhpu.npu_softplus_beta_(d, 2.0).data_ptr() == ptr
    torch.testing.assert_close(d.cpu(), F.softplus(x, beta=2.0))
    a, b = torch.randn(2, 3).simhpu(), torch.randn(3).simhpu()
    expected = torch.lerp(a.cpu(), b.cpu(), 0.5)
    torch_simhpu.npu_lerp_scalar_(a, b, 0.5)
    torch.testing.assert_close(a.cpu(), expected)


def test_inplace_variant_rejects_results_that_do_not_fit_self():
    small, big = torch.randn(3).simhpu(), torch.randn(2, 3).simhpu()
    with pytest.raises(ValueError, match=r"npu_lerp_scalar_: the result has shape \[2, 3\], which cannot be "
                                         r"written in place into 'self' of shape \[3\]"):
        torch_simhpu.npu_lerp_scalar_(small, big, 0.5)
    with pytest.raises(TypeError, match=r"npu_lerp_scalar_: the result has dtype Double"):
        torch_simhpu.npu_lerp_scalar_(small, torch.randn(3, dtype=torch.float64).simhpu(), 0.5)


@pytest.mark.parametrize("overload,args", [
    ("npu_softplus_beta.out", lambda: ((torch.randn(4).simhpu(), 2.0, 20.0), {"out": torch.empty(4).simhpu()})),
    ("npu_softplus_beta_", lambda: ((torch.randn(4).simhpu(), 2.0, 20.0), {})),
    ("npu_lerp_scalar_", lambda: ((torch.randn(2, 3).simhpu(), torch.randn(3).simhpu(), 0.5), {})),
    ("npu_mul_add.out", lambda: ((*(torch.randn(3).simhpu() for _ in range(3)),),
                                 {"prod": torch.empty(3).simhpu(), "total": torch.empty(3).simhpu()})),
])
def test_opcheck_variants(overload, args):
    name, _, kind = overload.partition(".")
    packet = getattr(torch.ops.npu, name)
    op = getattr(packet, kind or "default")
    positional, kwargs = args()
    torch.library.opcheck(op, positional, kwargs, test_utils=OPCHECK_UTILS)


def test_variants_under_compile():
    torch._dynamo.reset()

    def fn(x, buf):
        torch_simhpu.npu_softplus_beta(x, out=buf)
        y = x.clone()
        torch_simhpu.npu_softplus_beta_(y, 3.0)
        return buf + y

    x = torch.randn(5).simhpu()
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x, torch.empty(5).simhpu()).cpu(), fn(x, torch.empty(5).simhpu()).cpu())


def test_backward_through_an_out_variant_is_an_error():
    x = f64(3)
    out = torch.empty(3, dtype=torch.float64).simhpu()
    with pytest.raises(RuntimeError):
        torch_simhpu.npu_softplus_beta(x, out=out).sum().backward()


# --- explicit output shape ---------------------------------------------------

def test_output_shape_from_an_int_list_argument():
    x = torch.randn(3, 1)
    out = torch_simhpu.npu_broadcast_to(x.simhpu(), [2, 3, 4])
    torch.testing.assert_close(out.cpu(), x.expand(2, 3, 4))
    assert torch.autograd.gradcheck(lambda t: torch_simhpu.npu_broadcast_to(t, [2, 3, 4]), (f64(3, 1),))
    with pytest.raises(ValueError, match=r"npu_broadcast_to: argument 'self' of shape \[3, 1\] does not "
                                         r"broadcast to the output shape \[2, 4\]"):
        torch_simhpu.npu_broadcast_to(x.simhpu(), [2, 4])
    torch.library.opcheck(torch.ops.npu.npu_broadcast_to.default, (x.simhpu(), [2, 3, 4]),
                          test_utils=OPCHECK_UTILS)


# --- several outputs: grads[i], grad_input_mask, unused outputs ----------------

def test_multi_output_gradients():
    x, y, z = f64(2, 3), f64(2, 3), f64(2, 3)
    assert torch.autograd.gradcheck(torch_simhpu.npu_mul_add, (x, y, z))


def test_gradient_of_one_output_only():
    x, y, z = f64(4), f64(4), f64(4)
    prod, _ = torch_simhpu.npu_mul_add(x, y, z)
    prod.sum().backward()  # total's gradient is undefined and stands in as zeros
    torch.testing.assert_close(x.grad.cpu(), y.detach().cpu())
    # z only reaches `total`, whose unused gradient stands in as zeros (as in PyTorch)
    torch.testing.assert_close(z.grad.cpu(), torch.zeros(4, dtype=torch.float64))


def test_grad_input_mask_skips_inputs_that_need_no_gradient():
    x = f64(3)
    y = torch.randn(3, dtype=torch.float64).simhpu()
    z = torch.randn(3, dtype=torch.float64).simhpu()
    prod, total = torch_simhpu.npu_mul_add(x, y, z)
    (prod + total).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), (y + 1).cpu())


# --- composite and deprecated ops -----------------------------------------------

def test_composite_op_forward_backward_compile_opcheck():
    x, gamma = f64(3, 6), f64(6)
    ref = torch_simhpu.npu_rms_norm(x, gamma)[0] * 0.5
    torch.testing.assert_close(torch_simhpu.npu_rms_norm_scaled(x, gamma, 0.5).cpu(), ref.cpu())
    assert torch.autograd.gradcheck(lambda a, g: torch_simhpu.npu_rms_norm_scaled(a, g, 0.5), (x, gamma))
    torch._dynamo.reset()
    compiled = torch.compile(lambda a, g: torch_simhpu.npu_rms_norm_scaled(a, g, 2.0), fullgraph=True,
                             backend="aot_eager")
    torch.testing.assert_close(compiled(x, gamma).cpu(), (torch_simhpu.npu_rms_norm(x, gamma)[0] * 2).cpu())
    torch.library.opcheck(torch.ops.npu.npu_rms_norm_scaled.default, (x.detach(), gamma.detach(), 2.0, 1e-6),
                          test_utils=("test_schema", "test_faketensor"))


def test_deprecated_op_warns_once_naming_the_replacement(tmp_path):
    import subprocess
    import sys
    code = (
        "import warnings, torch, torch_simhpu\n"
        "warnings.simplefilter('always')\n"
        "x = torch.ones(2).simhpu()\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    for _ in range(3):\n"
        "        y = torch_simhpu.npu_add_custom_v0(x, x)\n"
        "print(len(caught), y.cpu().tolist())\n"
        "print(caught[0].message)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    count, message = out.stdout.strip().split("\n", 1)
    assert count == "1 [2.0, 2.0]"
    assert message.startswith("torch_simhpu.npu_add_custom_v0 is deprecated and will be removed; "
                              "use torch_simhpu.npu_add_custom instead")
    assert "Deprecated: use npu_add_custom instead." in torch_simhpu.npu_add_custom_v0.__doc__


# --- every argument type reaches the kernel ---------------------------------------

def ref_weighted_sum(x, others, bias=None, reduction="sum", offset=None, accumulate=None, repeat=1, negate=False):
    acc = accumulate or x.dtype
    result = x.to(acc) * repeat
    if others:
        stacked = torch.stack([o.to(acc) for o in others])
        result = result + {"sum": stacked.sum(0), "mean": stacked.mean(0), "max": stacked.max(0).values}[reduction]
    if bias is not None:
        result = result + bias.to(acc)
    if offset is not None:
        result = result + offset
    return (-result if negate else result).to(x.dtype)


@pytest.mark.parametrize("kwargs", [
    {},
    {"reduction": "mean"},
    {"reduction": "max", "negate": True},
    {"offset": 2.5, "repeat": 3},
    {"offset": True, "accumulate": torch.float64},
    {"accumulate": torch.float16, "reduction": "sum"},
])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("n_others", [0, 1, 3])
def test_every_argument_type(kwargs, with_bias, n_others):
    x = torch.randn(2, 3)
    others = [torch.randn(2, 3) for _ in range(n_others)]
    bias = torch.randn(2, 3) if with_bias else None
    got = torch_simhpu.npu_weighted_sum(x.simhpu(), [o.simhpu() for o in others],
                                        bias.simhpu() if with_bias else None, **kwargs)
    # float16 accumulation rounds each step to half precision; float32 and float64 are compared as float32
    tolerance = dict(atol=1e-2, rtol=1e-2) if kwargs.get("accumulate") == torch.float16 else {}
    torch.testing.assert_close(got.cpu(), ref_weighted_sum(x, others, bias, **kwargs), **tolerance)


def test_argument_type_errors():
    x = torch.randn(2, 3).simhpu()
    with pytest.raises(ValueError, match=r"npu_weighted_sum: expected 'self' and 'others\[1\]' to have the same "
                                         r"shape, but got \[2, 3\] and \[3\]"):
        torch_simhpu.npu_weighted_sum(x, [x, torch.randn(3).simhpu()])
    with pytest.raises(RuntimeError, match=r"npu_weighted_sum: expected argument 'others\[0\]' on a simhpu device"):
        torch_simhpu.npu_weighted_sum(x, [torch.randn(2, 3)])
    with pytest.raises(TypeError):
        torch_simhpu.npu_weighted_sum(x, [x], None, "sum")  # reduction is keyword-only
    torch.library.opcheck(torch.ops.npu.npu_weighted_sum.default, (x, [x, x], x),
                          {"reduction": "mean", "offset": 1, "accumulate": torch.float64, "repeat": 2,
                           "negate": True}, test_utils=OPCHECK_UTILS)


def test_inputs_without_formula_must_not_require_grad_unless_non_differentiable():
    x, other = f64(2, 3), f64(2, 3)
    bias = f64(2, 3)
    out = torch_simhpu.npu_weighted_sum(x, [other.detach()], bias, repeat=3, negate=True)
    out.sum().backward()
    torch.testing.assert_close(x.grad.cpu(), torch.full((2, 3), -3.0, dtype=torch.float64))
    assert bias.grad is None  # marked non_differentiable: a constant for autograd
    with pytest.raises(RuntimeError, match=r"npu_weighted_sum: the derivative for argument 'others' is not "
                                           r"implemented; add it to derivatives.yaml"):
        torch_simhpu.npu_weighted_sum(x, [other])
    assert torch.autograd.gradcheck(lambda t: torch_simhpu.npu_weighted_sum(t, [], repeat=2), (x,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_generated_float_math_at_the_edges(dtype):
    """exp and log1p on float are the runtime's own vectorised versions: they must
    agree with PyTorch at infinities, NaN, zero, tiny and huge arguments too."""
    edges = [float("-inf"), -1e30, -200.0, -104.0, -103.9, -87.5, -20.0, -1.0, -1e-7, -1e-30, -0.0, 0.0,
             1e-30, 1e-7, 0.5, 1.0, 9.99, 10.0, 44.0, 88.0, 1e30, float("inf"), float("nan")]
    x = torch.cat([torch.tensor(edges), torch.linspace(-120, 60, 100_003)]).to(dtype)
    for beta, threshold in ((1.0, 20.0), (2.0, 1e9), (0.5, 100.0)):
        out = torch_simhpu.npu_softplus_beta(x.simhpu(), beta, threshold).cpu()
        ref = F.softplus(x, beta=beta, threshold=threshold)  # in dtype: overflow to inf alike
        torch.testing.assert_close(out, ref, equal_nan=True)
