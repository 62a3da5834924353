"""torch.simhpu next to torch.cuda: what a device module offers, and what programs read from it."""
import pytest
import torch

# What torch.cuda has and torch.simhpu has not, each with its reason. The test
# below fails when either list changes: a new torch.cuda name must be added to the
# device or explained here, and a name the device gains must leave this list.
NOT_ON_SIMHPU = {
    **{f"{kind}{suffix}": "legacy typed constructors; torch.tensor(..., device='simhpu') replaces them"
       for kind in ("BFloat16", "Bool", "Byte", "Char", "Double", "Float", "Half", "Int", "Long", "Short")
       for suffix in ("Storage", "Tensor")},
    "ComplexDoubleStorage": "legacy typed storage", "ComplexFloatStorage": "legacy typed storage",
    "CUDAGraph": "named for CUDA; torch.simhpu.Graph is the same class for this device",
    "make_graphed_callables": "not built: it needs autograd-aware graph capture of forward and backward",
    "amp": "torch.cuda.amp is deprecated; torch.amp with device_type='simhpu' serves the device",
    "CUDAPluggableAllocator": "the device's allocator is its own; no pluggable allocator",
    "change_current_allocator": "the device's allocator is its own; no pluggable allocator",
    "caching_allocator_alloc": "raw allocator access is not offered; allocate tensors",
    "caching_allocator_delete": "raw allocator access is not offered; allocate tensors",
    "caching_allocator_enable": "the caching allocator is always on",
    "caching_allocator_disabled": "the caching allocator is always on",
    "MemPool": "no user memory pools (graphs keep their memory themselves)",
    "use_mem_pool": "no user memory pools (graphs keep their memory themselves)",
    "set_per_process_memory_fraction": "the capacity is fixed at start (SIMHPU_MEMORY_LIMIT or the profile)",
    "get_per_process_memory_fraction": "the capacity is fixed at start (SIMHPU_MEMORY_LIMIT or the profile)",
    "host_memory_stats": "pinned host memory keeps no statistics yet",
    "host_memory_stats_as_nested_dict": "pinned host memory keeps no statistics yet",
    "reset_accumulated_host_memory_stats": "pinned host memory keeps no statistics yet",
    "reset_peak_host_memory_stats": "pinned host memory keeps no statistics yet",
    "get_sync_debug_mode": "not built; torch_simhpu._C._device_wide_waits() counts the host's device-wide waits",
    "set_sync_debug_mode": "not built; torch_simhpu._C._device_wide_waits() counts the host's device-wide waits",
    "ipc_collect": "device memory is not shared between processes",
    "list_gpu_processes": "a simulated device is private to its process",
    "memory_usage": "no hardware counters (memory_stats() has the allocator's figures)",
    "utilization": "no hardware counters (torch.simhpu.simulate reports simulated busy time)",
    "temperature": "no sensors on a simulated part",
    "power_draw": "no sensors on a simulated part",
    "clock_rate": "no clock of its own (get_device_properties().clock_rate is 0)",
    "ExternalStream": "no foreign stream handles to adopt",
    "get_stream_from_external": "no foreign stream handles to adopt",
    "GreenContext": "CUDA green contexts (SM partitions) have no counterpart",
    "CudaError": "CUDA runtime error type; the device raises torch.AcceleratorError",
    "DeferredCudaCallError": "CUDA lazy-init error type; the device needs no lazy initialisation",
    "check_error": "CUDA runtime status codes", "cudaStatus": "CUDA runtime status codes",
    "cudart": "the CUDA runtime library", "current_blas_handle": "cuBLAS handles",
    "current_solver_handle": "cuSOLVER handles", "jiterator": "CUDA runtime-compiled kernels",
    "nccl": "NCCL bindings (simccl is the device's torch.distributed backend)",
    "nvtx": "NVIDIA's range markers (torch.profiler records the device's launches)",
    "profiler": "CUDA profiler start/stop", "sparse": "cuSPARSE helpers", "tunable": "TunableOp (GEMM tuning)",
    "random": "the RNG functions are torch.simhpu's own (manual_seed, get_rng_state, ...), not a submodule",
}


def test_torch_simhpu_has_what_torch_cuda_has_or_says_why_not():
    missing = {name for name in torch.cuda.__all__ if not hasattr(torch.simhpu, name)}
    unexplained = sorted(missing - NOT_ON_SIMHPU.keys())
    no_longer_missing = sorted(NOT_ON_SIMHPU.keys() - missing)
    assert not unexplained, f"torch.cuda names the device lacks with no reason given: {unexplained}"
    assert not no_longer_missing, f"names the device now has, still listed as missing: {no_longer_missing}"


def test_device_properties_carry_torch_cudas_fields_and_the_device_capacity():
    props = torch.simhpu.get_device_properties(0)
    for field in ("name", "major", "minor", "total_memory", "multi_processor_count", "is_integrated",
                  "is_multi_gpu_board", "warp_size", "max_threads_per_multi_processor", "L2_cache_size",
                  "shared_memory_per_block", "shared_memory_per_block_optin", "regs_per_multiprocessor",
                  "uuid", "pci_bus_id", "pci_device_id", "pci_domain_id", "gcnArchName"):
        assert hasattr(props, field), field
    assert props.total_memory == torch.simhpu.mem_get_info(0)[1] > 0
    assert torch.simhpu.get_device_name(0) == props.name == "simhpu"
    assert torch.simhpu.get_device_capability(0) == (props.major, props.minor)
    assert torch.simhpu.get_device_properties("simhpu:1").pci_device_id == 1
    assert torch.simhpu.get_device_properties(0).uuid != torch.simhpu.get_device_properties(1).uuid


def test_the_device_name_tells_the_profile_in_use():
    with torch.simhpu.simulate("h100-sxm"):
        assert torch.simhpu.get_device_name() == "simhpu (h100-sxm)"
    assert torch.simhpu.get_device_name() == "simhpu"


def test_a_bad_device_index_names_the_function():
    with pytest.raises((RuntimeError, ValueError), match="simhpu"):
        torch.simhpu.get_device_properties(99)
    torch.ones(1, device="simhpu").add_(1)  # the device is still usable


def test_memory_summary_reports_the_allocators_figures():
    torch.simhpu.synchronize()
    x = torch.empty(1 << 20, device="simhpu")  # 4 MiB
    summary = torch.simhpu.memory_summary()
    nested = torch.simhpu.memory_stats_as_nested_dict()
    assert "Allocated memory" in summary and "simhpu:0" in summary
    assert nested["allocated_bytes"]["all"]["current"] == torch.simhpu.memory_allocated() >= x.nbytes
    assert len(torch.simhpu.memory_summary(abbreviated=True).splitlines()) < len(summary.splitlines())
    del x


def test_device_of_makes_the_tensors_device_current():
    x = torch.ones(1, device="simhpu:1")
    with torch.simhpu.device_of(x):
        assert torch.simhpu.current_device() == 1
    assert torch.simhpu.current_device() == 0
    with torch.simhpu.device_of(torch.ones(1)):
        assert torch.simhpu.current_device() == 0


def test_the_lenses_faces_are_on_torch_simhpu():
    """The device module names no lens (tests/codegen/test_python_layering.py): registration attaches them."""
    from torch_simhpu import chaos, sanitizer, simulation
    from torch_simhpu.simulation import pricing

    assert (torch.simhpu.simulate, torch.simhpu.set_profile, torch.simhpu.profiles) == \
        (simulation.simulate, simulation.set_profile, simulation.profiles)
    assert (torch.simhpu.price, torch.simhpu.price_collective) == (pricing.price, pricing.price_collective)
    assert (torch.simhpu.sanitizer, torch.simhpu.chaos, torch.simhpu.simulation) == (sanitizer, chaos, simulation)
