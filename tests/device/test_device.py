"""The simhpu device as PyTorch sees it."""
import os
import subprocess
import sys

import pytest
import torch

import torch_simhpu
from helpers import run_python


# Subprocesses run from tmp_path: from the repo root, `import torch_simhpu`
# would find the source folder instead of the installed wheel.


def test_privateuse1_is_renamed():
    assert torch._C._get_privateuse1_backend_name() == "simhpu"
    assert torch.device("simhpu:1").type == "simhpu"


def test_device_module():
    assert torch.simhpu is torch_simhpu.device
    assert torch.simhpu.is_available()
    assert torch.simhpu.device_count() == 2
    assert torch.simhpu.current_device() == 0
    torch.simhpu.synchronize()


def test_set_device_and_context():
    try:
        torch.simhpu.set_device(1)
        assert torch.simhpu.current_device() == 1
        assert torch.empty(2, device="simhpu").device == torch.device("simhpu", 1)
    finally:
        torch.simhpu.set_device(0)
    with torch.simhpu.device(1):
        assert torch.simhpu.current_device() == 1
    assert torch.simhpu.current_device() == 0


def test_bad_device_index_is_reported():
    with pytest.raises(RuntimeError, match="device index 5 is out of range; simhpu has 2"):
        torch.simhpu.set_device(5)
    assert torch.simhpu.current_device() == 0


def test_accelerator_set_device_index_out_of_range_is_a_runtime_error_as_on_cuda():
    with pytest.raises(RuntimeError, match="device index 2 is out of range; simhpu has 2"):
        torch.accelerator.set_device_index(2)
    assert torch.accelerator.current_device_index() == 0


def test_init_and_seed_all_as_torch_cuda():
    torch.simhpu.init()
    assert torch.simhpu.is_initialized()
    torch.simhpu.seed_all()
    seeds = {torch.simhpu._default_generator(i).initial_seed() for i in range(torch.simhpu.device_count())}
    assert len(seeds) == 1  # one seed, every device
    torch.simhpu.seed_all()
    assert {torch.simhpu._default_generator(i).initial_seed() for i in range(torch.simhpu.device_count())} != seeds


def test_device_capability_lists_every_dtype_but_quantized_ones():
    capability = torch.accelerator.get_device_capability("simhpu:0")
    supported = capability["supported_dtypes"]
    assert {torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool, torch.complex64} <= set(supported)
    assert not {torch.qint8, torch.quint8, torch.qint32} & set(supported)
    assert torch.accelerator.get_device_capability(1) == capability


def test_tensor_methods_like_cuda():
    x = torch.randn(3)
    d = x.simhpu()
    assert d.is_simhpu and d.device == torch.device("simhpu", 0)
    assert d.cpu().device.type == "cpu"
    torch.testing.assert_close(d.cpu(), x)
    torch.testing.assert_close(x.to("simhpu:1").cpu(), x)
    m = torch.nn.Linear(2, 2).simhpu()
    assert m.weight.device.type == "simhpu"


def test_copies_between_devices():
    x = torch.randn(4, 5)
    on0 = x.to("simhpu:0")
    on1 = on0.to("simhpu:1")
    assert on1.device.index == 1
    torch.testing.assert_close(on1.cpu(), x)


def test_kernel_registry_lists_kernels():
    names = torch_simhpu._C._kernel_names()
    assert {"add_custom", "rms_norm", "copy", "sum_dims"} <= set(names)


@pytest.mark.parametrize("blocking", ["0", "1"])
def test_launch_modes_give_the_same_results(blocking, tmp_path):
    code = (
        "import torch, torch_simhpu\n"
        "x = torch.arange(6.).reshape(2, 3).simhpu()\n"
        "y = torch_simhpu.npu_add_custom(x, x)\n"
        "print(torch_simhpu._C._launch_blocking(), y.cpu().tolist())\n"
    )
    env = dict(os.environ, SIMHPU_LAUNCH_BLOCKING=blocking)
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"{blocking == '1'} [[0.0, 2.0, 4.0], [6.0, 8.0, 10.0]]"


FLAG_SPELLINGS = [("1", True), ("true", True), ("TRUE", True), ("yes", True), ("On", True),
                  ("0", False), ("false", False), ("no", False), ("OFF", False), ("", False)]


@pytest.mark.parametrize("value, on", FLAG_SPELLINGS)
def test_boolean_environment_flags_accept_the_usual_spellings(value, on, tmp_path):
    code = "import torch, torch_simhpu; print(torch_simhpu._C._launch_blocking(), torch_simhpu._C._strict_mode())"
    out = run_python(code, tmp_path, SIMHPU_LAUNCH_BLOCKING=value, SIMHPU_STRICT=value)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(on), str(on)]


@pytest.mark.parametrize("flag", ["SIMHPU_LAUNCH_BLOCKING", "SIMHPU_STRICT"])
@pytest.mark.parametrize("value", ["2", "enabled", "tru"])
def test_a_boolean_environment_flag_spelled_otherwise_is_refused(flag, value, tmp_path):
    code = "import torch, torch_simhpu; torch.ones(2, device='simhpu').sum().item()"
    out = run_python(code, tmp_path, **{flag: value})
    assert out.returncode != 0
    assert f"{flag} must be 1, true, yes or on (to turn it on) or 0, false, no or off, got '{value}'" in out.stderr


def test_device_count_from_environment(tmp_path):
    code = "import torch, torch_simhpu; print(torch.simhpu.device_count())"
    env = dict(os.environ, SIMHPU_DEVICE_COUNT="3")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "3"


def test_exit_with_work_queued_is_clean(tmp_path):
    code = (
        "import torch, torch_simhpu\n"
        "x = torch.randn(256, 256).simhpu()\n"
        "for _ in range(200):\n"
        "    x = torch_simhpu.npu_add_custom(x, x)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_kernel_failure_is_raised_at_the_next_synchronize():
    x = torch.ones(4).simhpu()
    torch_simhpu._C._launch_failing_kernel(x)  # returns at once: the kernel runs later
    after = torch_simhpu.npu_add_custom(x, x)  # reads what the failure left undefined: not run
    launch_line = test_kernel_failure_is_raised_at_the_next_synchronize.__code__.co_firstlineno + 2
    with pytest.raises(RuntimeError, match=rf"simhpu kernel 'fail_on_device' launched by _launch_failing_kernel "
                                           rf"at {__file__}:{launch_line} failed: device-side check failed on a "
                                           rf"tensor of 4 elements"):
        torch.simhpu.synchronize()
    torch.simhpu.synchronize()  # reported once, then the stream is usable again
    fresh = torch.ones(4).simhpu()
    torch.testing.assert_close(torch_simhpu.npu_add_custom(fresh, fresh).cpu(), torch.full((4,), 2.0))
    with pytest.raises(RuntimeError, match="left undefined by a kernel that failed earlier.*fail_on_device"):
        after.cpu()  # ...but what depended on the failure never reads back as data


def test_kernel_failure_surfaces_at_cpu_copy():
    x = torch.ones(3).simhpu()
    torch_simhpu._C._launch_failing_kernel(x)
    with pytest.raises(RuntimeError, match="fail_on_device"):
        x.cpu()
    # What the failed kernel was given is undefined from now on, whoever reads it.
    with pytest.raises(RuntimeError, match="left undefined by a kernel that failed earlier.*fail_on_device"):
        x.cpu()
    assert torch.ones(3).simhpu().cpu().tolist() == [1.0, 1.0, 1.0]


def test_kernel_failure_in_blocking_mode_raises_at_the_call(tmp_path):
    code = (
        "import torch, torch_simhpu\n"
        "x = torch.ones(2).simhpu()\n"
        "try:\n"
        "    torch_simhpu._C._launch_failing_kernel(x)\n"
        "except RuntimeError as e:\n"
        "    print('raised:', 'fail_on_device' in str(e))\n"
        "y = torch.ones(2).simhpu()\n"
        "print(torch_simhpu.npu_add_custom(y, y).cpu().tolist())\n"
    )
    env = dict(os.environ, SIMHPU_LAUNCH_BLOCKING="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                         check=True)
    assert out.stdout.split("\n")[:2] == ["raised: True", "[2.0, 2.0]"]


def test_python_scalars_and_non_blocking_copies_do_not_wait_for_the_queue():
    x = torch.ones(3).simhpu()
    torch_simhpu._C._launch_failing_kernel(x)
    # Neither call synchronises, so the pending failure is not reported here...
    y = torch.full((3,), 2.0).to("simhpu", non_blocking=True)
    z = x * 2  # the wrapped scalar 2 is the kernel's argument, not a transfer
    # ...but at the next synchronising call.
    with pytest.raises(RuntimeError, match="fail_on_device"):
        torch.simhpu.synchronize()
    del y, z


def test_a_blocking_copy_to_the_device_waits_for_its_stream():
    # As CUDA's copy does (a memcpy, then the stream synchronised): the data is
    # there when it returns, so a side stream may read it without waiting; and
    # the stream's pending failure is reported by the copy.
    x = torch.ones(3).simhpu()
    torch_simhpu._C._launch_failing_kernel(x)
    with pytest.raises(RuntimeError, match="fail_on_device"):
        torch.full((3,), 2.0).to("simhpu")
    torch_simhpu._C._sleep_on_device(torch.empty(1, device="simhpu"), 50_000)
    side = torch.simhpu.Stream()
    wrong = 0
    with torch.simhpu.sanitizer.enabled("raise"):  # a program right on CUDA is clean here
        for i in range(20):
            y = torch.full((1000,), float(i)).to("simhpu")  # the default stream is busy for 50 ms at first
            with torch.simhpu.stream(side):
                doubled = y * 2  # nothing orders it after the copy but the copy's own wait
            torch.simhpu.current_stream().wait_stream(side)  # (.item() waits for the current stream only)
            wrong += int(doubled[0].item() != 2 * i)
    assert wrong == 0


@pytest.mark.parametrize("value", ["0", "two", "65"])
def test_bad_device_count_is_reported(tmp_path, value):
    code = "import torch, torch_simhpu; torch.empty(1, device='simhpu')"
    env = dict(os.environ, SIMHPU_DEVICE_COUNT=value)
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode != 0
    assert f"SIMHPU_DEVICE_COUNT must be a whole number from 1 to 64, got '{value}'" in out.stderr


def test_custom_ops_leave_the_cpu_keys_free():
    """No stand-in CPU kernels: a CPU tensor gets PyTorch's own error naming the
    op and the backend, and anyone may register a CPU reference kernel."""
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("npu::npu_swish", "CPU")
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("npu::npu_swish", "AutogradCPU")
    with pytest.raises(NotImplementedError, match="npu::npu_swish.*'CPU' backend"):
        torch_simhpu.npu_swish(torch.randn(3))
    assert torch_simhpu.npu_swish(torch.ones(3, device="simhpu")).device.type == "simhpu"


def test_forward_mode_ad_is_refused_not_dropped():
    x, tangent = torch.randn(4, device="simhpu"), torch.ones(4, device="simhpu")
    with pytest.raises(NotImplementedError, match="npu_swish: forward-mode AD .* argument 'self' carries a tangent"):
        torch.func.jvp(torch_simhpu.npu_swish, (x,), (tangent,))
    _, grad = torch.func.vjp(torch_simhpu.npu_swish, x)
    assert grad(tangent)[0].shape == (4,)


def test_device_of_a_pointer_is_the_device_owning_it():
    on_one = torch.empty(3, device="simhpu:1")
    with torch.simhpu.device(0):
        assert torch_simhpu._C._device_of_pointer(on_one.data_ptr()) == 1
    with pytest.raises(RuntimeError, match="is not in the memory of any simhpu device"):
        torch_simhpu._C._device_of_pointer(torch.empty(3).data_ptr())


def test_kernels_run_under_a_fixed_aten_state():
    """Kernels that call ATen (the reference path) never record autograd, whatever the worker's defaults."""
    state = torch.ones(4, dtype=torch.int64, device="simhpu")
    with torch.enable_grad():
        torch_simhpu._C._report_worker_state(state)
    assert state.tolist() == [0, 0, 0, 0]  # grad mode, forward grad mode, autograd keys, keys included
