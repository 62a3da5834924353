"""Operators registered at run time from Python: a schema, the name of a device
kernel some loaded library registered (SIMHPU_KERNEL), and an output-meta
function. The Python twin of simhpu::custom_op::registerUserCustomOp (custom_op/custom_op.h):

    torch_simhpu.library.register_user_custom_op(
        "my_lib::topk(Tensor x, int k) -> (Tensor, Tensor)",
        kernel="custom_topk_f32",
        output_meta=lambda x, k: [(x.dtype, [*x.shape[:-1], k]), (torch.int64, [*x.shape[:-1], k])],
        params=lambda x, k: struct.pack("<qqq", k, -1, 0))

The kernel receives (inputs, outputs, params): the tensor arguments, the
outputs output_meta shaped, and the bytes `params` returned. output_meta is the
operator's fake kernel too, so torch.compile needs nothing more (and, being
Python, it sees symbolic shapes as they are).
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from torch_simhpu import _C

OutputMeta = Callable[..., Sequence[tuple[torch.dtype, Sequence[int]]]]

# Keeps the torch.library.Library objects (and so the registrations) alive.
_libraries: dict[str, torch.library.Library] = {}


def register_user_custom_op(schema: str, kernel: str, output_meta: OutputMeta,
                            params: Callable[..., bytes] | None = None) -> None:
    """Defines `schema` ("namespace::name(args) -> returns") and runs it on simhpu
    as device kernel `kernel`; output_meta(*args) -> [(dtype, shape), ...], one
    per return; params(*args) -> bytes, the kernel's parameter blob."""
    qualname, _, signature = schema.partition("(")
    namespace, sep, name = qualname.strip().partition("::")
    if not sep or not namespace.isidentifier() or not name.isidentifier() or not signature:
        raise ValueError(f"register_user_custom_op: expected 'namespace::name(args) -> returns', got {schema!r}")
    if not callable(output_meta):
        raise TypeError(f"register_user_custom_op({qualname}): output_meta must be callable")
    op_name = f"{namespace}::{name}"
    if op_name in _libraries:
        raise RuntimeError(f"register_user_custom_op: '{op_name}' is registered twice")
    library = torch.library.Library(namespace, "FRAGMENT")
    library.define(f"{name}({signature}")

    def metas(args):
        try:
            result = [(dtype, list(shape)) for dtype, shape in output_meta(*args)]
        except Exception as e:
            raise RuntimeError(f"{op_name}: its output_meta failed: {type(e).__name__}: {e}") from e
        for i, (dtype, shape) in enumerate(result):
            if not isinstance(dtype, torch.dtype):
                raise TypeError(f"{op_name}: output_meta gave output {i} the dtype {dtype!r}, expected a torch.dtype")
        return result

    def fake(*args):
        device = _first_tensor(op_name, args).device
        outs = [torch.empty(shape, dtype=dtype, device=device) for dtype, shape in metas(args)]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def run_on_device(*args):
        inputs = [a for a in args if isinstance(a, torch.Tensor)]
        device = _first_tensor(op_name, args).device
        outs = [torch.empty(shape, dtype=dtype, device=device) for dtype, shape in metas(args)]
        blob = b"" if params is None else params(*args)
        if not isinstance(blob, (bytes, bytearray)):
            raise TypeError(f"{op_name}: params must return bytes, got {type(blob).__name__}")
        _C._launch_user_kernel(op_name, kernel, inputs, outs, bytes(blob))
        return outs[0] if len(outs) == 1 else tuple(outs)

    library.impl(name, run_on_device, "PrivateUse1")
    torch.library.register_fake(op_name, fake, lib=library)
    _libraries[op_name] = library


def _first_tensor(op_name: str, args) -> torch.Tensor:
    for a in args:
        if isinstance(a, torch.Tensor):
            return a
    raise ValueError(f"{op_name}: needs at least one tensor argument to run on")
