"""Which meta kernels shape their outputs otherwise than the CPU kernels do.

The reference path sizes outputs with meta kernels and runs CPU kernels into them, so an operator
whose two kernels disagree must run synchronised (csrc/aten/reference_op.cpp, meta_differs_for);
otherwise its call fails on the worker. This sweep runs PyTorch's own samples (op_db forward and
backward, module_db forward) on the CPU, asks the meta kernel of every aten call the same question,
and fails for any disagreement the device does not know of — so a new torch release's differences
are found here, not by a user."""
from __future__ import annotations

import collections
import warnings

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_modules import module_db
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

import torch_simhpu

SKIPPED_TAGS = (torch.Tag.dynamic_output_shape, torch.Tag.data_dependent_output, torch.Tag.nondeterministic_seeded)


class CompareWithMeta(TorchDispatchMode):
    """Runs each aten call, then its meta kernel on meta copies; records disagreeing outputs."""

    def __init__(self):
        super().__init__()
        self.disagreements = collections.defaultdict(set)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func._schema.is_mutable or any(tag in func.tags for tag in SKIPPED_TAGS):
            return out  # synchronised on the device anyway, or written in place
        as_meta = lambda x: x.to("meta") if isinstance(x, torch.Tensor) else x  # noqa: E731
        try:
            meta_out = func(*tree_map(as_meta, args), **tree_map(as_meta, kwargs))
        except Exception:  # noqa: BLE001 - no meta kernel: the device synchronises such calls
            return out
        for cpu, meta in zip(tree_flatten(out)[0], tree_flatten(meta_out)[0]):
            if isinstance(cpu, torch.Tensor) and (cpu.shape, cpu.dtype) != (meta.shape, meta.dtype):
                self.disagreements[func._schema.name].add((tuple(cpu.shape), tuple(meta.shape)))
        return out


def run_quietly(mode, fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with mode:
                fn()
        except Exception:  # noqa: BLE001 - samples the CPU itself refuses say nothing here
            pass


def op_db_forward(mode):
    for op in op_db:
        if op.supports_dtype(torch.float32, "cpu"):
            for s in op.sample_inputs("cpu", torch.float32):
                run_quietly(mode, lambda: op(s.input, *s.args, **s.kwargs))


def op_db_backward(mode):
    for op in op_db:
        if not (op.supports_autograd and op.supports_dtype(torch.float32, "cpu")):
            continue
        for s in list(op.sample_inputs("cpu", torch.float32, requires_grad=True))[:8]:
            try:
                outs = [o for o in tree_flatten(op(s.input, *s.args, **s.kwargs))[0]
                        if isinstance(o, torch.Tensor) and o.requires_grad]
            except Exception:  # noqa: BLE001
                continue
            if outs:
                run_quietly(mode, lambda: torch.autograd.backward(outs, [torch.ones_like(o) for o in outs]))


def module_db_forward(mode):
    for info in module_db:
        for mi in info.module_inputs_func(info, device="cpu", dtype=torch.float32, requires_grad=False,
                                          training=True):
            if mi.forward_input is not None:
                def forward():
                    module = info.module_cls(*mi.constructor_input.args, **mi.constructor_input.kwargs)
                    module(*mi.forward_input.args, **mi.forward_input.kwargs)
                run_quietly(mode, forward)


@pytest.mark.parametrize("sweep", [op_db_forward, op_db_backward, module_db_forward])
def test_every_meta_kernel_that_shapes_unlike_its_cpu_kernel_is_known_to_the_device(sweep):
    mode = CompareWithMeta()
    sweep(mode)
    unknown = {name: sorted(shapes)[:3] for name, shapes in mode.disagreements.items()
               if not torch_simhpu._C._meta_known_to_differ(name)}
    assert not unknown, f"(cpu shape, meta shape) of ops the device trusts the meta kernel of: {unknown}"


def test_the_sweep_finds_a_known_disagreement():
    """The sweep can fail: a 1-D multilabel_margin_loss is 0-dim on the CPU, [1] by its meta kernel."""
    mode = CompareWithMeta()
    run_quietly(mode, lambda: torch.nn.functional.multilabel_margin_loss(
        torch.randn(4), torch.tensor([1, 0, -1, 2]), reduction="none"))
    assert mode.disagreements == {"aten::multilabel_margin_loss_forward": {((), (1,))}}


def test_multilabel_margin_loss_of_a_1d_input_matches_the_cpu_forward_and_backward():
    x, target = torch.randn(4, dtype=torch.float64), torch.tensor([1, 0, -1, 2])
    for reduction in ("none", "mean", "sum"):
        xc, xd = x.clone().requires_grad_(), x.to("simhpu").requires_grad_()
        cpu = torch.nn.functional.multilabel_margin_loss(xc, target, reduction=reduction)
        dev = torch.nn.functional.multilabel_margin_loss(xd, target.to("simhpu"), reduction=reduction)
        assert dev.shape == cpu.shape
        cpu.sum().backward()
        dev.sum().backward()
        torch.testing.assert_close(dev.cpu(), cpu)
        torch.testing.assert_close(xd.grad.cpu(), xc.grad)
