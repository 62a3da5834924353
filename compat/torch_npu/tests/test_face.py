"""What code written against torch_npu uses: the npu device, torch.npu, torch_npu.npu_*, each against
the CPU or the documented answer, and bad input named."""
import pytest
import torch
import torch_npu

from torch.testing import assert_close


def test_tensors_move_to_npu_and_back():
    x = torch.randn(4, 8)
    on_device = x.npu()
    assert on_device.device == torch.device("npu", 0) and on_device.is_npu
    assert_close(torch.randn(3, device="npu").cpu().shape, torch.Size([3]))
    assert_close((on_device * 2 + 1).cpu(), x * 2 + 1)
    assert torch.nn.Linear(2, 3).npu().weight.device.type == "npu"


def test_torch_npu_is_torch_npu_npu_and_serves_the_device_module():
    assert torch.npu is torch_npu.npu
    assert torch.npu.is_available() and torch.npu.device_count() >= 1
    torch.npu.set_device("npu:0")
    assert torch.npu.current_device() == 0
    stream = torch.npu.Stream()
    with torch.npu.stream(stream):
        y = torch.ones(1024, device="npu") * 3
    event = stream.record_event()
    torch.npu.current_stream().wait_event(event)
    torch.npu.synchronize()
    assert y.sum().item() == 3072
    assert torch.npu.memory_allocated() > 0
    torch.npu.manual_seed(0)
    first = torch.rand(4, device="npu").cpu()
    torch.npu.manual_seed(0)
    assert_close(torch.rand(4, device="npu").cpu(), first)


def test_the_part_answers_as_an_ascend_part(monkeypatch):
    assert torch.npu.get_device_name() == "Ascend910B3" == torch_npu.npu.get_device_name(0)
    assert torch.npu.get_soc_version() == 223
    assert torch.npu.get_device_properties(0).name == "Ascend910B3"
    monkeypatch.setenv("SIMHPU_NPU_SOC", "Ascend910B1")
    assert (torch.npu.get_device_name(), torch.npu.get_soc_version()) == ("Ascend910B1", 220)
    monkeypatch.setenv("SIMHPU_NPU_SOC", "Ascend9000")
    with pytest.raises(RuntimeError, match="SIMHPU_NPU_SOC='Ascend9000' names no Ascend part"):
        torch.npu.get_device_name()
    with pytest.raises(Exception, match="device"):
        torch.npu.utils.get_device_name(99)


def test_cann_versions_compare_as_releases(monkeypatch):
    from torch_npu.npu import utils
    monkeypatch.setenv("SIMHPU_NPU_CANN_VERSION", "8.0.RC3")
    assert utils._is_gte_cann_version("8.0.RC2") and not utils._is_gte_cann_version("8.0.0")
    monkeypatch.setenv("SIMHPU_NPU_CANN_VERSION", "8.5.0")
    assert utils._is_gte_cann_version("8.1.RC1") and not utils._is_gte_cann_version("9.0.0")
    monkeypatch.setenv("SIMHPU_NPU_CANN_VERSION", "latest")
    with pytest.raises(RuntimeError, match="SIMHPU_NPU_CANN_VERSION='latest' is not a CANN version"):
        utils.get_cann_version()


def test_settings_programs_write_are_kept():
    torch.npu.config.allow_internal_format = True
    torch.npu.set_compile_mode(jit_compile=False)
    assert torch.npu.is_jit_compile_false()
    torch.npu.matmul.allow_hf32 = True
    torch.npu.set_option({"ACL_PRECISION_MODE": "allow_fp32_to_fp16"})
    torch_npu.npu.use_compatible_impl(True)
    with pytest.raises(TypeError, match="set_compile_mode: jit_compile must be a bool"):
        torch.npu.set_compile_mode(jit_compile="no")
    torch.npu.config.allow_internal_format = False


def test_autocast_and_grad_scaler_on_npu():
    x = torch.randn(8, 8, device="npu")
    with torch.npu.amp.autocast(dtype=torch.bfloat16):
        assert (x @ x).dtype == torch.bfloat16
    model = torch.nn.Linear(8, 1).npu()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.npu.amp.GradScaler()
    scaler.scale(model(x).sum()).backward()
    scaler.step(optimizer)
    scaler.update()
    assert scaler.get_scale() > 0


def test_npu_rms_norm_matches_its_reference_and_its_gradient():
    x = torch.randn(3, 16, dtype=torch.float64)
    gamma = torch.rand(16, dtype=torch.float64)
    y, rstd = torch_npu.npu_rms_norm(x.npu(), gamma.npu(), 1e-6)
    expected_rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    assert_close(y.cpu(), x * expected_rstd * gamma)
    assert_close(rstd.cpu().reshape(expected_rstd.shape), expected_rstd)
    leaf = x.npu().requires_grad_()
    assert torch.autograd.gradcheck(lambda t: torch_npu.npu_rms_norm(t, gamma.npu())[0], (leaf,))


def test_an_operator_nobody_declared_is_named():
    with pytest.raises(AttributeError, match="no operator npu::npu_no_such_op is declared"):
        torch_npu.npu_no_such_op
    torch.npu.synchronize()
    assert torch.ones(2, device="npu").sum().item() == 2


def test_contrib_drop_path_and_dropout_with_byte_mask_modules():
    from torch_npu.contrib.function import npu_functional
    from torch_npu.contrib.module import DropoutWithByteMask, NpuDropPath
    torch.manual_seed(0)
    x = torch.randn(400, 8, device="npu")
    drop_path = NpuDropPath(0.5).npu()
    out = drop_path(x).cpu()
    zeroed = (out == 0).all(1)
    assert 0.35 < zeroed.float().mean() < 0.65  # whole samples dropped
    torch.testing.assert_close(out[~zeroed], x.cpu()[~zeroed] * 2)
    drop_path.eval()
    assert torch.equal(drop_path(x).cpu(), x.cpu())
    dropout = DropoutWithByteMask(p=0.2).npu()
    kept = dropout(x).cpu() != 0
    assert 0.7 < kept.float().mean() < 0.9
    dropout.eval()
    assert torch.equal(dropout(x).cpu(), x.cpu())
    assert npu_functional.dropout_with_byte_mask(x, 0.2).shape == x.shape
    with pytest.raises(ValueError, match="NpuDropPath: drop_prob must be in"):
        NpuDropPath(1.5)


def test_npu_get_option_reads_the_settings_and_what_a_program_writes_back():
    saved = torch_npu._C._npu_getOption("ALLOW_INTERNAL_FORMAT")
    try:
        torch.npu.config.allow_internal_format = True
        assert torch_npu._C._npu_getOption("ALLOW_INTERNAL_FORMAT") == b"enable"
        torch.npu.config.allow_internal_format = b"disable"  # (op-plugin's tests restore what they read)
        assert torch_npu._C._npu_getOption("ALLOW_INTERNAL_FORMAT") == b"disable"
        torch_npu._C._npu_setOption({"ACL_OP_COMPILER_CACHE_MODE": "disable"})
        assert torch_npu._C._npu_getOption("ACL_OP_COMPILER_CACHE_MODE") == b"disable"
        assert torch_npu._C._npu_getOption("NEVER_SET") is None
    finally:
        torch.npu.config.allow_internal_format = saved


def test_copy_memory_copies_in_stream_order_and_refuses_what_is_not_a_memory_copy():
    a, b = torch.arange(6.0, device="npu").view(2, 3), torch.ones(2, 3, device="npu")
    product = a * b
    assert torch_npu.copy_memory_(product, a + b) is product
    assert torch.equal(product.cpu(), torch.arange(6.0).view(2, 3) + 1)
    with pytest.raises(RuntimeError, match=r"copy_memory_: self \(torch.float32, \[2, 3\]\) and src \(torch.int64"):
        torch_npu.copy_memory_(product, torch.ones(2, 3, dtype=torch.long, device="npu"))
    with pytest.raises(RuntimeError, match="copy_memory_: src must be a tensor on the npu, got cpu"):
        torch_npu.copy_memory_(product, torch.ones(2, 3))
    assert torch.ones(3, device="npu").sum().item() == 3


@pytest.mark.parametrize("dtype,gamma_dtype", [(torch.float16, torch.float16), (torch.float16, torch.float32),
                                               (torch.bfloat16, torch.float32), (torch.float32, torch.float32)])
def test_npu_rms_norm_in_ascends_dtypes_computed_at_float32(dtype, gamma_dtype):
    x = torch.randn(4, 32).to(dtype)
    gamma = torch.rand(32).to(gamma_dtype)
    y, rstd = torch_npu.npu_rms_norm(x.npu(), gamma.npu(), epsilon=1e-5)
    expected_rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)
    assert y.dtype == dtype and rstd.dtype == torch.float32
    assert_close(y.cpu(), (x.float() * expected_rstd * gamma.float()).to(dtype))  # rounded once
    assert_close(rstd.cpu(), expected_rstd)

    residual = torch.randn(4, 32).to(dtype)
    y2, rstd2, total = torch_npu.npu_add_rms_norm(x.npu(), residual.npu(), gamma.npu(), epsilon=1e-5)
    summed = x + residual
    assert total.dtype == dtype and torch.equal(total.cpu(), summed) and rstd2.dtype == torch.float32
    assert_close(y2.cpu(), (summed.float() * torch.rsqrt(summed.float().pow(2).mean(-1, keepdim=True) + 1e-5)
                            * gamma.float()).to(dtype))


def test_npu_rms_norm_gradient_through_its_float32_computation_and_a_gamma_it_refuses():
    x = torch.randn(3, 8, dtype=torch.float16).npu().requires_grad_()
    gamma = torch.rand(8).npu().requires_grad_()
    y, _ = torch_npu.npu_rms_norm(x, gamma)
    y.float().sum().backward()
    assert x.grad.dtype == torch.float16 and gamma.grad.dtype == torch.float32
    with pytest.raises(RuntimeError, match=r"npu::npu_rms_norm: gamma must have x's dtype \(torch.float32\) or "
                                           r"float32, got torch.float16"):
        torch_npu.npu_rms_norm(torch.ones(2, 8).npu(), torch.ones(8, dtype=torch.float16).npu())
    assert torch.ones(3, device="npu").sum().item() == 3
