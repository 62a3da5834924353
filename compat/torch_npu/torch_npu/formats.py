"""Ascend's internal formats as a tensor's format: its values, and what operators compute from them, unchanged.

On an NPU a tensor's storage may be laid out in a private format (NC1HWC0 blocks, FRACTAL_NZ
tiles) that operators read and write as it is. simhpu keeps the format a program asked for as a
property of the tensor (get_npu_format answers it) and its values in PyTorch's layout, so results
match the CPU whatever format an input carries; what changes on the part (padding, speed) is
not simulated.
"""
from __future__ import annotations

import enum

import torch


class Format(enum.IntEnum):
    """aclFormat's ids (CANN's acl_base.h; https://gitcode.com/Ascend/pytorch, torch_npu.Format)."""
    UNDEFINED = -1
    NCHW = 0
    NHWC = 1
    ND = 2
    NC1HWC0 = 3
    FRACTAL_Z = 4
    NC1HWC0_C04 = 12
    HWCN = 16
    NDHWC = 27
    FRACTAL_NZ = 29
    NCDHW = 30
    NDC1HWC0 = 32
    FRACTAL_Z_3D = 33
    NC = 35
    NCL = 47


_ATTRIBUTE = "_npu_format"
_BLOCKED_NCHW = (Format.NC1HWC0, Format.NC1HWC0_C04)


def base_format(tensor: torch.Tensor) -> Format:
    """The format a tensor the program did not cast has: as torch_npu guesses it from the dimensions."""
    return {4: Format.NCHW, 5: Format.NCDHW}.get(tensor.dim(), Format.ND)


def _checked(op: str, tensor, acl_format) -> Format:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{op}: expected a Tensor, got {type(tensor).__name__}")
    if tensor.device.type != "npu":
        raise RuntimeError(f"{op}: expected a tensor on npu, got one on {tensor.device}; move it with .npu()")
    if isinstance(acl_format, torch.Tensor):
        return get_npu_format(acl_format)
    if isinstance(acl_format, bool) or not isinstance(acl_format, int):
        raise TypeError(f"{op}: acl_format must be an int (torch_npu.Format), got {type(acl_format).__name__}")
    try:
        format_ = Format(acl_format)
    except ValueError:
        known = ", ".join(f"{f.value} ({f.name})" for f in Format if f is not Format.UNDEFINED)
        raise RuntimeError(f"{op}: unknown format id {acl_format}; the formats are {known}") from None
    if format_ is Format.UNDEFINED:
        raise RuntimeError(f"{op}: cannot cast to format -1 (UNDEFINED); name a format, e.g. 2 (ND)")
    return format_


def _target(tensor: torch.Tensor, format_: Format) -> Format:
    """The format a cast to `format_` gives: back from NCHW's blocked layouts to ND, a 4-d tensor is NCHW
    again (torch_npu does so; op-plugin's test_format_cast holds it to that)."""
    if format_ is Format.ND and get_npu_format(tensor) in _BLOCKED_NCHW and tensor.dim() == 4:
        return Format.NCHW
    return format_


def get_npu_format(tensor: torch.Tensor) -> int:
    """The tensor's format id: the one npu_format_cast gave it, or its dimensions' base format."""
    if not isinstance(tensor, torch.Tensor) or tensor.device.type != "npu":
        where = tensor.device if isinstance(tensor, torch.Tensor) else type(tensor).__name__
        raise RuntimeError(f"get_npu_format: expected a tensor on npu, got {where}")
    format_ = getattr(tensor, _ATTRIBUTE, None)
    return base_format(tensor) if format_ is None else format_


def npu_format_cast(tensor: torch.Tensor, acl_format, customize_dtype=None) -> torch.Tensor:
    """A tensor of the same values in format `acl_format` (an id or torch_npu.Format); itself if it has it."""
    format_ = _checked("npu_format_cast", tensor, acl_format)
    if customize_dtype is not None and not isinstance(customize_dtype, (int, torch.dtype)):
        raise TypeError(f"npu_format_cast: customize_dtype must be a dtype or None, got {customize_dtype!r}")
    format_ = _target(tensor, format_)
    if get_npu_format(tensor) == format_:
        return tensor
    result = tensor.clone()  # a cast writes a new storage on the part; autograd passes through
    setattr(result, _ATTRIBUTE, format_)
    return result


def npu_format_cast_(tensor: torch.Tensor, acl_format) -> torch.Tensor:
    """In place: the tensor now has format `acl_format` (an id, a torch_npu.Format, or another tensor's)."""
    setattr(tensor, _ATTRIBUTE, _target(tensor, _checked("npu_format_cast_", tensor, acl_format)))
    return tensor


def install_tensor_methods() -> None:
    """tensor.npu_format_cast(...) and its in-place form, as torch_npu adds them to Tensor."""
    torch.Tensor.npu_format_cast = npu_format_cast
    torch.Tensor.npu_format_cast_ = npu_format_cast_
