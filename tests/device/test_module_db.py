"""PyTorch's module database (common_modules.module_db, shipped in the torch
wheel) on simhpu, against the CPU from the same start.

Each ModuleInfo's module inputs, in training and in eval mode: the module is
built on the CPU, copied to the device, and both run the same inputs (tensors
that are one object on the CPU stay one object on the device). Outputs,
buffers after the call (running statistics), and the gradients of inputs and
parameters under the same output weights must be the CPU's.
"""
import copy
import re
import warnings

import pytest
import torch
from torch.testing._internal.common_modules import module_db
from torch.utils._pytree import tree_flatten, tree_map

DEVICE = "simhpu"
DTYPE = torch.float32
TOLERANCE = dict(atol=1e-4, rtol=1e-4, equal_nan=True)


def _on_device(structure):
    """The structure with each tensor moved, keeping which are the same tensor."""
    moved = {}

    def move(v):
        if not isinstance(v, torch.Tensor):
            return v
        if id(v) not in moved:
            moved[id(v)] = v.detach().to(DEVICE).requires_grad_(v.requires_grad)
        return moved[id(v)]

    return tree_map(move, structure)


def _close(actual, expected, what):
    torch.testing.assert_close(actual.cpu(), expected, **TOLERANCE, msg=lambda m: f"{what}: {m}")


def _grad_targets(structure):
    seen, targets = set(), []
    for t in tree_flatten(structure)[0]:
        if isinstance(t, torch.Tensor) and t.requires_grad and id(t) not in seen:
            seen.add(id(t))
            targets.append(t)
    return targets


def _check_module_input(info, module_input, training):
    args, kwargs = module_input.constructor_input.args, module_input.constructor_input.kwargs
    forward_args, forward_kwargs = module_input.forward_input.args, module_input.forward_input.kwargs
    torch.manual_seed(0)
    cpu = info.module_cls(*args, **kwargs).to(DTYPE)
    cpu.train(training)
    if isinstance(cpu, torch.nn.modules.lazy.LazyModuleMixin):
        with torch.no_grad():  # its parameters exist once it has seen an input
            cpu(*forward_args, **forward_kwargs)
    device = copy.deepcopy(cpu).to(DEVICE)
    device_args, device_kwargs = _on_device((forward_args, forward_kwargs))

    torch.manual_seed(1)
    expected = cpu(*forward_args, **forward_kwargs)
    torch.manual_seed(1)
    torch.simhpu.manual_seed(1)
    actual = device(*device_args, **device_kwargs)
    expected_leaves, actual_leaves = tree_flatten(expected)[0], tree_flatten(actual)[0]
    assert len(expected_leaves) == len(actual_leaves)
    for i, (e, a) in enumerate(zip(expected_leaves, actual_leaves)):
        if isinstance(e, torch.Tensor):
            assert a.device.type == DEVICE
            _close(a, e, f"output {i}")
    for (name, e), (_, a) in zip(cpu.named_buffers(), device.named_buffers()):
        _close(a, e, f"buffer {name}")

    outputs = [(e, a) for e, a in zip(expected_leaves, actual_leaves)
               if isinstance(e, torch.Tensor) and e.requires_grad and e.dtype.is_floating_point]
    if not outputs:
        return
    torch.manual_seed(2)
    weights = [torch.randn_like(e) for e, _ in outputs]
    cpu_targets = _grad_targets((forward_args, forward_kwargs)) + [p for p in cpu.parameters() if p.requires_grad]
    device_targets = _grad_targets((device_args, device_kwargs)) + [p for p in device.parameters() if p.requires_grad]
    expected_grads = torch.autograd.grad([(e * w).sum() for (e, _), w in zip(outputs, weights)], cpu_targets,
                                         allow_unused=True)
    actual_grads = torch.autograd.grad([(a * w.to(DEVICE)).sum() for (_, a), w in zip(outputs, weights)],
                                       device_targets, allow_unused=True)
    for i, (e, a) in enumerate(zip(expected_grads, actual_grads)):
        assert (e is None) == (a is None), f"gradient {i} is defined on one side only"
        if e is not None:
            _close(a, e, f"gradient {i}")


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("info", [i for i in module_db if DTYPE in i.dtypes], ids=lambda i: i.formatted_name)
def test_module_db_matches_the_cpu(info, training):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module_inputs = [m for m in info.module_inputs_func(info, device="cpu", dtype=DTYPE, requires_grad=True,
                                                            training=training) if m.forward_input is not None]
        if not module_inputs:
            pytest.skip("no module inputs")
        for number, module_input in enumerate(module_inputs):
            try:
                _check_module_input(info, module_input, training)
            except AssertionError as e:
                raise AssertionError(f"module input {number} ({module_input.constructor_input.kwargs}): {e}") from e


@pytest.mark.parametrize("info", [i for i in module_db if i.module_error_inputs_func is not None],
                         ids=lambda i: i.formatted_name)
def test_module_db_error_inputs_are_refused_as_on_the_cpu(info):
    from torch.testing._internal.common_modules import ModuleErrorEnum

    refused = 0
    for error_input in info.module_error_inputs_func(info, device="cpu", dtype=DTYPE, requires_grad=False,
                                                     training=True):
        if error_input.error_on != ModuleErrorEnum.FORWARD_ERROR:
            continue  # construction never reaches the device
        module_input = error_input.module_error_input
        constructor = module_input.constructor_input
        module = info.module_cls(*constructor.args, **constructor.kwargs).to(DEVICE)
        args, kwargs = _on_device((module_input.forward_input.args, module_input.forward_input.kwargs))
        # Refused at the call, or (a check inside the CPU kernel the device
        # runs asynchronously, as an index out of range on CUDA) by the kernel,
        # at the next synchronisation: with the CPU's message either way.
        try:
            module(*args, **kwargs)
        except error_input.error_type as e:
            assert re.search(error_input.error_regex, str(e)), str(e)
        else:
            with pytest.raises(RuntimeError, match=error_input.error_regex):
                torch.simhpu.synchronize()
        refused += 1
    if not refused:
        pytest.skip("no forward error inputs")
    torch.testing.assert_close((torch.ones(2, device=DEVICE) * 2).cpu(), torch.full((2,), 2.0))
