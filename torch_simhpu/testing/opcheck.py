"""torch.library.opcheck for operators on simhpu tensors.

PyTorch's opcheck runs four checks. One of them, test_autograd_registration,
supports only CPU, CUDA and XPU tensors once an input requires grad: on any
other device it raises "NYI devices other than CPU/CUDA/XPU" whatever the
operator. `opcheck` here runs the other three in that case (gradients are
gradcheck's to judge) and all four otherwise.
"""
from __future__ import annotations

import torch
from torch.utils._pytree import tree_leaves

DEVICE_UTILS = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")


def opcheck(op, args: tuple, kwargs: dict | None = None, **options) -> dict[str, str]:
    """torch.library.opcheck(op, args, kwargs) with the checks that can judge
    simhpu inputs; returns opcheck's {check: "SUCCESS"}."""
    if "test_utils" not in options and any(isinstance(leaf, torch.Tensor) and leaf.requires_grad
                                           for leaf in tree_leaves((args, kwargs or {}))):
        options["test_utils"] = DEVICE_UTILS
    return torch.library.opcheck(op, args, kwargs, **options)
