"""Where PyTorch names its devices by hand, the device is added: the one place for it.

PyTorch 2.13 has a few allow-lists of device types written into its Python code,
with no registration hook for PrivateUse1. Each function below fills one, for the
version in ../requirements.txt, and says what it touches; when PyTorch grows a hook
(or a newer release lists PrivateUse1), the function goes. Nothing else in the
package reaches into PyTorch's private modules for this purpose.
"""
from __future__ import annotations

import torch
from torch._C import DispatchKey

DEVICE_TYPE = "simhpu"


def install() -> None:
    _rng_state_operators()
    _fake_process_group()


def _fake_process_group() -> None:
    """torch.testing._internal.distributed.fake_pg: the "fake" backend's devices.

    PyTorch's fake process group (dry runs, memory planning: torchtitan's
    comm.mode="fake_backend") registers itself for cpu, cuda, hpu and xpu only.
    Its module is imported here, so that its registration, done at import, is not
    done again over this one later.
    """
    if not torch.distributed.is_available():
        return
    from torch.testing._internal.distributed import fake_pg  # noqa: F401  (registers "fake")

    capable = torch.distributed.Backend.backend_capability["fake"]
    if DEVICE_TYPE not in capable:
        capable.append(DEVICE_TYPE)


def _rng_state_operators() -> None:
    """torch._prims.rng_prims: run_and_save_rng_state and run_with_rng_state.

    AOTAutograd wraps the random operators of a compiled, activation-checkpointed
    region in these (so recomputation draws the same numbers); their kernels pick
    the device's RNG functions from a map of cuda, cpu, hpu and xpu.
    """
    from torch._higher_order_ops.utils import registered_hop_fake_fns
    from torch._prims import rng_prims
    from torch.fx.experimental.proxy_tensor import ProxyTorchDispatchMode, track_tensor_tree

    device_module = getattr(torch, DEVICE_TYPE)
    save, run = rng_prims.run_and_save_rng_state, rng_prims.run_with_rng_state

    def save_on_device(op, *args, **kwargs):
        return device_module.get_rng_state(), op(*args, **kwargs)

    def run_on_device(rng_state, op, *args, **kwargs):
        current = device_module.get_rng_state()
        device_module.set_rng_state(rng_state.cpu())
        try:
            return op(*args, **kwargs)
        finally:
            device_module.set_rng_state(current)

    save_elsewhere = save.py_kernels[DispatchKey.BackendSelect]
    run_elsewhere = run.py_kernels[DispatchKey.BackendSelect]

    def save_selecting(op, *args, **kwargs):
        if rng_prims.get_device(args, kwargs) == DEVICE_TYPE:
            return save_on_device(op, *args, **kwargs)
        return save_elsewhere(op, *args, **kwargs)

    def run_selecting(rng_state, op, *args, **kwargs):
        if rng_prims.get_device(args, kwargs) == DEVICE_TYPE:
            return run_on_device(rng_state, op, *args, **kwargs)
        return run_elsewhere(rng_state, op, *args, **kwargs)

    def save_traced(mode, op, *args, **kwargs):
        out = save_selecting(op, *args, **kwargs)
        proxy_args = torch.utils._pytree.tree_map(mode.tracer.unwrap_proxy, (op, *args))
        proxy_kwargs = torch.utils._pytree.tree_map(mode.tracer.unwrap_proxy, kwargs)
        out_proxy = mode.tracer.create_proxy("call_function", save, proxy_args, proxy_kwargs)
        return track_tensor_tree(out, out_proxy, constant=None, tracer=mode.tracer)

    save.py_kernels[DispatchKey.PrivateUse1] = save_on_device
    run.py_kernels[DispatchKey.PrivateUse1] = run_on_device
    save.py_kernels[DispatchKey.BackendSelect] = save_selecting
    run.py_kernels[DispatchKey.BackendSelect] = run_selecting
    save.python_key_table[ProxyTorchDispatchMode] = save_traced
    registered_hop_fake_fns[save] = save_selecting
    for hop in (save, run):
        hop._dispatch_cache.clear()
