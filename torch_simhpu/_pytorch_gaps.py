"""Where PyTorch names its devices by hand, the device is added: the one place for it.

PyTorch 2.13 has a few allow-lists of device types written into its Python code,
with no registration hook for PrivateUse1. Each function below fills one, for the
version in ../requirements.txt, and says what it touches; when PyTorch grows a hook
(or a newer release lists PrivateUse1), the function goes. Nothing else in the
package reaches into PyTorch's private modules for this purpose.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

import torch
from torch._C import DispatchKey
from torch_simhpu._device_name import DEVICE_TYPE


def install() -> None:
    _autocast_passes_higher_order_operators()
    _rng_state_operators()
    _fake_process_group()
    _flex_attention_devices()
    _flex_attention_training_graphs()
    _after_import("torch._inductor.lowering", _flex_attention_lowering)


def _autocast_passes_higher_order_operators() -> None:
    """torch._ops: the dispatch keys a higher-order operator passes through by default.

    They include AutocastCPU, AutocastCUDA and AutocastXPU, so a higher-order
    operator under autocast on those devices runs its body, whose operators
    autocast one by one; AutocastPrivateUse1 is missing, and every such operator
    fails under torch.autocast("simhpu") (flex_attention_backward in a compiled
    training step, for one). Added for the operators made from now on and for
    those that exist.
    """
    import torch._ops as ops

    key = DispatchKey.AutocastPrivateUse1
    if key not in ops._HIGHER_ORDER_OP_DEFAULT_FALLTHROUGH_DISPATCH_KEYS:
        ops._HIGHER_ORDER_OP_DEFAULT_FALLTHROUGH_DISPATCH_KEYS.append(key)
    for hop in ops._higher_order_ops.values():
        if key not in hop.py_kernels:
            hop.fallthrough(key)
            hop._dispatch_cache.clear()


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


def gloo_groups_without_peers() -> None:
    """torch.distributed.distributed_c10d._new_process_group_helper: gloo's groups under simulated ranks.

    Called by torch_simhpu/simulation/simulated_ranks.py only. A gloo group ("gloo", "cpu:gloo,simhpu:simccl",
    new_group(backend="gloo"): CPU offload, async checkpointing) connects to every member before it
    returns, and the members of a simulated world are not there: init_process_group would wait until
    its timeout. PyTorch builds gloo groups by name, with no hook, so the name is changed on the way
    in: simccl serves the group's CPU tensors too, over a transport that completes at once
    (torch_simhpu/distributed.py), as it serves the device's.
    """
    if not torch.distributed.is_available():
        return
    from torch.distributed import distributed_c10d

    helper = distributed_c10d._new_process_group_helper
    if getattr(helper, "_simhpu_without_gloo", False):
        return

    def without_gloo(group_size, group_rank, global_ranks_in_group, backend, *args, **kwargs):
        return helper(group_size, group_rank, global_ranks_in_group, _gloo_to_simccl(backend), *args, **kwargs)

    without_gloo._simhpu_without_gloo = True
    distributed_c10d._new_process_group_helper = without_gloo


def _gloo_to_simccl(backend):
    if not isinstance(backend, str) or "gloo" not in backend.lower():
        return backend
    pairs = [part.strip() for part in backend.split(",")]
    return ",".join(part.rpartition(":")[0] + (":" if ":" in part else "") + "simccl"
                    if part.rpartition(":")[2].lower() == "gloo" else part for part in pairs)


def _flex_attention_devices() -> None:
    """torch.nn.attention.flex_attention._validate_device: the devices flex_attention accepts.

    flex_attention refuses every device not in its list (cuda, cpu, xpu, hpu,
    mps) before it reaches its higher-order operator, whose eager kernels (the
    dense forward and backward, CompositeExplicitAutograd) serve any device. The
    device is let through there, forward and backward, as cuda is.
    """
    from torch.nn.attention import flex_attention as module

    validate = module._validate_device

    def validate_device(query, key, value):
        if query.device.type != DEVICE_TYPE:
            validate(query, key, value)

    module._validate_device = validate_device
    _flex_attention_autocast()


def _flex_attention_autocast() -> None:
    """torch._higher_order_ops.flex_attention: its autocast kernels, for AutocastCPU and AutocastCUDA.

    Under torch.autocast("simhpu") the operator needs one for AutocastPrivateUse1:
    as theirs, it casts query, key and value to the autocast dtype and runs the
    operator with autocast off (torchtitan autocasts a model it does not shard).
    """
    module = importlib.import_module("torch._higher_order_ops.flex_attention")
    hop = module.flex_attention
    autocast_key = torch._C.DispatchKeySet(DispatchKey.AutocastPrivateUse1)

    def autocast_kernel(query, key, value, score_mod, block_mask, scale, kernel_options, *buffers):
        dtype = torch.get_autocast_dtype(DEVICE_TYPE)
        query, key, value = (module._autocast_cast(t, DEVICE_TYPE, dtype) for t in (query, key, value))
        with torch._C._ExcludeDispatchKeyGuard(autocast_key):
            return hop(query, key, value, score_mod, block_mask, scale, kernel_options, *buffers)

    hop.py_impl(DispatchKey.AutocastPrivateUse1)(autocast_kernel)


def _flex_attention_training_graphs() -> None:
    """torch._higher_order_ops.flex_attention: how compiled training graphs hold flex_attention.

    Inductor lowers flex_attention's operators with Triton templates, or on the
    CPU with a C++ template that serves inference only (no logsumexp, no
    backward). The device's kernels are the host's, so where the C++ template
    cannot serve (a training graph: the forward keeps its logsumexp, and the
    backward), the operators are traced as their dense implementation, whose
    aten operators Inductor compiles like any other. This happens at
    functionalization, so the traced graph stays functional.
    """
    from torch._higher_order_ops.flex_attention import (
        flex_attention,
        flex_attention_backward,
        sdpa_dense,
        sdpa_dense_backward,
    )
    from torch._subclasses.functional_tensor import FunctionalTensorMode

    forward_elsewhere = flex_attention.python_key_table[FunctionalTensorMode]
    backward_elsewhere = flex_attention_backward.python_key_table[FunctionalTensorMode]

    def forward(mode, query, key, value, score_mod, block_mask, scale, kernel_options, *buffers):
        if query.device.type == DEVICE_TYPE and kernel_options.get("OUTPUT_LOGSUMEXP"):
            with mode:
                return sdpa_dense(query, key, value, score_mod, block_mask, scale, kernel_options, *buffers)
        return forward_elsewhere(mode, query, key, value, score_mod, block_mask, scale, kernel_options, *buffers)

    def backward(mode, query, *rest):
        if query.device.type == DEVICE_TYPE:
            with mode:
                return sdpa_dense_backward(query, *rest)
        return backward_elsewhere(mode, query, *rest)

    flex_attention.python_key_table[FunctionalTensorMode] = forward
    flex_attention_backward.python_key_table[FunctionalTensorMode] = backward
    for hop in (flex_attention, flex_attention_backward):
        hop._dispatch_cache.clear()


def _flex_attention_lowering(lowering) -> None:
    """torch._inductor.kernel.flex: the template Inductor lowers flex_attention to.

    Its lowering takes the C++ template for "cpu" and a Triton template for any
    other device; the device's kernels are Inductor's C++ ones, so it takes the
    C++ template too (inference; see _flex_attention_training_graphs).
    """
    from torch._inductor.kernel.flex.flex_cpu import lower_cpu

    operator = torch.ops.higher_order.flex_attention
    lower_elsewhere = lowering.lowerings[operator]

    def lower(query, *args, **kwargs):
        if query.get_device().type == DEVICE_TYPE:
            return lower_cpu(query, *args, **kwargs)
        return lower_elsewhere(query, *args, **kwargs)

    lowering.lowerings[operator] = lower


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `then(module)` once `name` has been imported (Inductor's modules are
    imported at the first compile, and are too slow to import with the device)."""

    def __init__(self, name: str, then) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        run_module, then = spec.loader.exec_module, self.then

        class Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return None

            def exec_module(self, module):
                run_module(module)
                then(module)

        spec.loader = Loader()
        return spec


def _after_import(name: str, then) -> None:
    if name in sys.modules:
        then(sys.modules[name])
    else:
        sys.meta_path.insert(0, _AfterImport(name, then))
