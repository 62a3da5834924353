"""torchtitan's training entry point on the CPU, the reference simhpu runs are compared with.

torchtitan runs on an accelerator only (with none it falls back to "cuda"), so this
runner, started by torchrun in place of `-m torchtitan.train`, makes it choose the
CPU: it answers torchtitan's device queries with a device module for the CPU. It
changes nothing torchtitan computes. Run with TORCH_DEVICE_BACKEND_AUTOLOAD=0, so
the simhpu device is not loaded at all.
"""
import runpy
import sys
import types

import torch
import torch._utils


def _cpu_device_module() -> types.ModuleType:
    module = types.ModuleType("cpu_device_module")
    module.__dict__.update({name: getattr(torch.cpu, name) for name in dir(torch.cpu) if not name.startswith("__")})
    module.set_device = lambda device: None
    module.current_device = lambda: 0
    module.device_count = lambda: 1
    module.get_device_name = lambda device=None: "cpu"
    module.get_device_properties = lambda device=None: types.SimpleNamespace(total_memory=1 << 40)
    module.memory_stats = lambda device=None: {}
    module.reset_peak_memory_stats = lambda device=None: None
    module.empty_cache = lambda: None
    module.set_rng_state = torch.set_rng_state
    module.get_rng_state = torch.get_rng_state
    return module


def _sum_reductions_for_gloo() -> None:
    """FSDP2 reduces gradients with PREMUL_SUM(1 / factor), which gloo lacks; on gloo, SUM and then a
    division by factor. torchtitan's factor is 1.0, so both compute the same bits (and with 2 ranks,
    a + b is b + a exactly)."""
    from torch.distributed.fsdp._fully_shard import _fsdp_collectives

    original = _fsdp_collectives._get_gradient_divide_factors

    def divide_factors(reduce_scatter_group, all_reduce_group, reduce_dtype, device_type="", factor=None,
                       force_sum_reduction_for_comms=False):
        return original(reduce_scatter_group, all_reduce_group, reduce_dtype, device_type, factor, True)

    _fsdp_collectives._get_gradient_divide_factors = divide_factors


_CPU = _cpu_device_module()
_sum_reductions_for_gloo()
torch._utils._get_available_device_type = lambda: "cpu"
_real_get_device_module = torch._utils._get_device_module
torch._utils._get_device_module = lambda device_type=None: _CPU if device_type in (None, "cpu") \
    else _real_get_device_module(device_type)

if __name__ == "__main__":
    sys.argv[0] = "torchtitan.train"
    runpy.run_module("torchtitan.train", run_name="__main__", alter_sys=True)
