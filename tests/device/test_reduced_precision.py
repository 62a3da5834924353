"""Reduced precision computed at float32 (csrc/aten/reduced_precision.h): the setting torch_npu's
face turns on, under which a half or bfloat16 call runs its CPU kernel on float32 copies and
rounds its results once, as an accelerator's kernels do.

PyTorch's op_db runs in bfloat16 with the setting on, forward, in place and out=: each result
must be the CPU's computed at float32 and rounded once (the call was promoted) or the CPU's own
bfloat16 result (it was not: mixed precisions, randomness). Beside it, what the setting is for
(a result the CPU's step-by-step rounding gets wrong, kernels the CPU has no reduced dtype for),
and what it must not change (in-place writes, mixed dtypes the CPU refuses, the setting's scope).
"""

import pytest
import torch
import torch.nn.functional as F
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_flatten, tree_map

import torch_simhpu
from torch_simhpu import _C

import opdb_harness as harness  # (loaded by conftest.py)

MODES = ("forward", "inplace", "out")


@pytest.fixture
def promoted():
    assert not _C._reduced_precision_in_float32(), "the setting is off unless a front end turns it on"
    _C._set_reduced_precision_in_float32(True)
    try:
        yield
    finally:
        torch.simhpu.synchronize()
        _C._set_reduced_precision_in_float32(False)


def _in_float32(sample):
    return sample.transform(lambda t: t.detach().float() if isinstance(t, torch.Tensor)
                            and t.dtype == torch.bfloat16 else t)


def _run(runner, op, sample, device_sample=None):
    try:
        torch.manual_seed(0)
        return runner(op, sample, device_sample), None
    except Exception as error:  # noqa: BLE001 - a refusal is a result here
        return None, error


def _rounded(result, like):
    """The float32 run's results in the dtypes of the bfloat16 run's (bfloat16 where that refused)."""
    if like is None:
        return tree_map(lambda t: t.to(torch.bfloat16) if isinstance(t, torch.Tensor)
                        and t.dtype == torch.float32 else t, result)
    leaves, spec = tree_flatten(result)
    like_leaves, _ = tree_flatten(like)
    return spec.unflatten([a.to(b.dtype) if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) else a
                           for a, b in zip(leaves, like_leaves)])


def _matches(expected, actual) -> str | None:
    try:
        harness.compare(expected, actual, **harness.tolerance(None, torch.bfloat16))
        return None
    except AssertionError as mismatch:
        return str(mismatch).splitlines()[0][:200]


def _cases():
    for op in op_db:
        if torch.bfloat16 not in op.supported_dtypes("cpu") and torch.float32 not in op.supported_dtypes("cpu"):
            continue
        for mode in MODES:
            name = f"{op.name}{'.' + op.variant_test_name if op.variant_test_name else ''}-{mode}"
            key = (op.name, op.variant_test_name, mode)
            marks = ([pytest.mark.xfail(reason=harness.KNOWN_DIFFERENCES[key], strict=True)]
                     if key in harness.KNOWN_DIFFERENCES else [])
            yield pytest.param(op, mode, id=name, marks=marks)


@pytest.mark.parametrize("op, mode", list(_cases()))
def test_op_db_in_bfloat16_is_the_cpus_float32_rounded_once(op, mode, promoted):
    runner = {"forward": harness.forward, "inplace": harness.inplace, "out": harness.out_variant}[mode]
    if mode == "inplace" and op.inplace_variant is None or mode == "out" and not op.supports_out:
        pytest.skip(f"no {mode} variant")
    if op.name in harness.NOT_COMPARABLE:
        pytest.skip(harness.NOT_COMPARABLE[op.name])
    try:
        pairs = harness.paired_samples(op, torch.bfloat16, requires_grad=False)
    except harness.SamplesUnavailable as unavailable:
        pytest.skip(str(unavailable))
    failures, ran = [], 0
    for sample, device_sample in pairs:
        if harness.is_random(lambda: _run(runner, op, sample), sample):
            continue
        native, native_error = _run(runner, op, sample)
        wide, wide_error = _run(runner, op, _in_float32(sample))
        actual, device_error = _run(runner, op, sample, device_sample)
        try:
            torch.simhpu.synchronize()
        except Exception as asynchronous:  # noqa: BLE001 - a kernel refused it on the device
            actual, device_error = None, asynchronous
        ran += 1
        if device_error is not None:
            if native_error is None:
                failures.append(f"the CPU computes it in bfloat16, the device raises "
                                f"{type(device_error).__name__}: {str(device_error).splitlines()[0][:200]}")
            continue
        if native_error is not None and wide_error is not None:
            failures.append(f"the CPU refuses it at both precisions ({type(wide_error).__name__}), the device accepts it")
            continue
        misses = [why for why in (_matches(_rounded(wide, native), actual) if wide_error is None else "refused",
                                  _matches(native, actual) if native_error is None else "refused") if why]
        if len(misses) == 2:
            failures.append(f"neither float32 rounded once nor the CPU's bfloat16: {misses[0]}")
    assert not failures, f"{op.name} ({mode}):\n" + "\n".join(failures)
    if not ran:
        pytest.skip("random, or no samples")


def _double_rounding_sample():
    """An addmm whose CPU half kernel rounds the product before adding, and so misses the
    float32 result rounded once; found by search, so the test below can fail."""
    generator = torch.Generator().manual_seed(0)
    for _ in range(100):
        bias, a, b = (torch.randn(shape, generator=generator).mul(8).half() for shape in ((16, 16), (16, 64), (64, 16)))
        once = torch.addmm(bias.float(), a.float(), b.float()).half()
        if not torch.equal(torch.addmm(bias, a, b), once):
            return bias, a, b, once
    pytest.skip("the CPU's half addmm rounds once on this machine")


def test_a_half_addmm_is_rounded_once_where_the_cpu_rounds_twice(promoted):
    bias, a, b, once = _double_rounding_sample()
    result = torch.addmm(bias.to("simhpu"), a.to("simhpu"), b.to("simhpu")).cpu()
    torch.testing.assert_close(result, once, rtol=0, atol=0)


def test_a_kernel_the_cpu_has_no_reduced_dtype_for_runs_promoted_and_only_then():
    x = torch.randn(1, 2, 4, 4, 4).to(torch.bfloat16)
    with pytest.raises(RuntimeError, match="not implemented for 'BFloat16'"):
        F.avg_pool3d(x.to("simhpu"), 2).cpu()
    torch.simhpu.synchronize()
    _C._set_reduced_precision_in_float32(True)
    try:
        result = F.avg_pool3d(x.to("simhpu"), 2).cpu()
    finally:
        _C._set_reduced_precision_in_float32(False)
    assert result.dtype == torch.bfloat16
    torch.testing.assert_close(result, F.avg_pool3d(x.float(), 2).to(torch.bfloat16), rtol=0, atol=0)


@pytest.mark.parametrize("call", [
    lambda x, y: x.mul_(y), lambda x, y: torch.mul(x, y, out=x), lambda x, y: x.exp_(),
    lambda x, y: x.clamp_(max=1.0), lambda x, y: torch.addcmul(x, x, y, out=x),
], ids=["mul_", "mul-out-self", "exp_", "clamp_", "addcmul-out-self"])
def test_an_in_place_call_writes_its_promoted_result_back(call, promoted):
    x, y = torch.randn(2, 33).half(), torch.randn(2, 33).half()
    expected = call(x.float(), y.float()).half()
    on_device = x.to("simhpu")
    call(on_device, y.to("simhpu"))
    torch.testing.assert_close(on_device.cpu(), expected, rtol=0, atol=0)


def test_a_strided_out_view_is_written_where_it_points(promoted):
    base = torch.zeros(4, 8, dtype=torch.half, device="simhpu")
    x = torch.randn(4, 4).half()
    torch.exp(x.to("simhpu"), out=base[:, ::2])
    expected = torch.zeros(4, 8, dtype=torch.half)
    expected[:, ::2] = torch.exp(x.float()).half()
    torch.testing.assert_close(base.cpu(), expected, rtol=0, atol=0)


def test_mixed_precisions_are_refused_as_the_cpu_refuses_them(promoted):
    a, b = torch.randn(4, 4).half(), torch.randn(4, 4)
    with pytest.raises(RuntimeError) as cpu_error:
        torch.mm(a, b)
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.mm(a.to("simhpu"), b.to("simhpu")).cpu()
    assert "same dtype" in str(cpu_error.value)
    torch.simhpu.synchronize()
    assert torch.ones(2, device="simhpu").sum().item() == 2  # the device stays usable


def test_an_operator_defined_by_its_dtypes_precision_is_not_promoted(promoted):
    x, y = torch.tensor([1.0, -2.0], dtype=torch.bfloat16), torch.tensor([2.0, 0.0], dtype=torch.bfloat16)
    torch.testing.assert_close(torch.nextafter(x.to("simhpu"), y.to("simhpu")).cpu(), torch.nextafter(x, y),
                               rtol=0, atol=0)


@pytest.mark.parametrize("call", [
    lambda x: torch.le(x, 0.30003),  # 0.30003 is half's 0.30005: true in half, false at float32
    lambda x: torch.eq(x, 0.30003),
    lambda x: torch.lt(x, 0.30003),
    lambda x: x.clone().ge_(0.30003),
    lambda x: torch.nan_to_num(x / 0),  # inf becomes half's largest value, not float32's rounded to inf
    lambda x: torch.bincount(torch.tensor([0, 1, 1], device=x.device), weights=x.expand(3)),  # float64 sums
])
def test_comparisons_and_dtype_bound_results_keep_their_precision(call, promoted):
    x = torch.tensor([0.30004882], dtype=torch.half)
    expected = call(x)
    got = call(x.to("simhpu")).cpu()
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_a_call_that_names_its_result_dtype_keeps_it(promoted):
    x = torch.randn(100).half()
    result = torch.sum(x.to("simhpu"), dtype=torch.float32)
    assert result.dtype == torch.float32
    torch.testing.assert_close(result.cpu(), torch.sum(x, dtype=torch.float32))
    unique = torch.unique(x.to("simhpu"))  # (the synchronised path: no meta kernel names its dtype)
    assert unique.dtype == torch.half


@pytest.mark.parametrize("op,reference", [(torch.ops.aten._softmax, torch.softmax),
                                          (torch.ops.aten._log_softmax, torch.log_softmax)],
                         ids=["softmax", "log_softmax"])
def test_a_half_softmax_into_float32_runs_as_the_parts_one_pass(op, reference, promoted):
    """_softmax(x, dim, half_to_float=True), which CUDA's and Ascend's kernels run (reading half,
    writing float32) and the CPU's refuse: here its float32 input gives the same result."""
    x = torch.randn(4, 33).half()
    with pytest.raises(RuntimeError, match="half to float"):
        op(x, -1, True)
    result = op(x.to("simhpu"), -1, True)
    assert result.dtype == torch.float32
    torch.testing.assert_close(result.cpu(), reference(x.float(), -1), rtol=0, atol=0)


def test_a_half_softmax_into_float32_is_refused_as_the_cpu_refuses_it_without_the_setting():
    x = torch.randn(4, 33).half().to("simhpu")
    with pytest.raises(RuntimeError, match="half to float"):
        torch.ops.aten._softmax(x, -1, True).cpu()
    torch.simhpu.synchronize()
    assert torch.ones(2, device="simhpu").sum().item() == 2  # the device stays usable


@pytest.mark.parametrize("op", [torch.ops.aten._softmax_backward_data, torch.ops.aten._log_softmax_backward_data],
                         ids=["softmax", "log_softmax"])
def test_the_backward_of_a_half_softmax_into_float32_gives_a_half_gradient(op, promoted):
    grad, output = torch.randn(4, 33), torch.softmax(torch.randn(4, 33), -1)
    with pytest.raises(RuntimeError):
        op(grad, output, -1, torch.half)  # (the CPU's kernel refuses it)
    result = op(grad.to("simhpu"), output.to("simhpu"), -1, torch.half)
    assert result.dtype == torch.half
    torch.testing.assert_close(result.cpu(), op(grad, output, -1, torch.float32).half(), rtol=0, atol=0)


def test_the_setting_is_off_in_a_simhpu_process():
    assert torch_simhpu._C._reduced_precision_in_float32() is False


def test_a_synchronised_call_resizes_its_promoted_out_and_writes_it_back(promoted):
    """masked_select's shape follows its mask's values: the synchronised path runs it on a host copy
    of out=, which the promoted call's float32 copy resizes; the result lands in out, in half."""
    x, mask = torch.randn(5, 4).half(), torch.rand(5, 4) > 0.5
    out = torch.empty(0, dtype=torch.half, device="simhpu")
    torch.masked_select(x.to("simhpu"), mask.to("simhpu"), out=out)
    assert out.dtype == torch.half
    torch.testing.assert_close(out.cpu(), torch.masked_select(x, mask), rtol=0, atol=0)
