"""Shape checks and output shapes for the generated fake kernels: the Python
twin of csrc/aten/op_rules.h, with the same messages."""
from __future__ import annotations
from torch_simhpu._device_name import DEVICE_TYPE


def promote_types(tensors: list):
    """The dtype PyTorch's type promotion gives `tensors`, as rules::promote_types."""
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes
    return elementwise_dtypes(*tensors, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)[1]


def _torch():
    import torch
    return torch


def _dtype_name(dtype) -> str:
    """A dtype as C++ prints a c10::ScalarType (Float, BFloat16, ...), so both sides' messages read alike."""
    torch = _torch()
    names = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
             torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
             torch.bool: "Bool", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble"}
    return names.get(dtype, str(dtype).removeprefix("torch."))


def check_device(op: str, arg: str, t, first=None) -> None:
    if t is None:
        return
    if isinstance(t, (list, tuple)):
        for i, item in enumerate(t):
            check_device(op, f"{arg}[{i}]", item, first)
        return
    if t.device.type != DEVICE_TYPE:
        raise RuntimeError(f"{op}: expected argument '{arg}' on a simhpu device, but it is on {t.device}; "
                           f"move it with .to('{DEVICE_TYPE}')")
    if first is not None and t.device != first.device:
        raise RuntimeError(f"{op}: expected all tensors on one device, but argument '{arg}' is on {t.device} "
                           f"and the first tensor on {first.device}")


def check_dtype(op: str, arg: str, t, allowed) -> None:
    if t.dtype not in allowed:
        raise TypeError(f"{op}: argument '{arg}' has dtype {_dtype_name(t.dtype)}, which is not supported; "
                        f"supported dtypes: {', '.join(_dtype_name(d) for d in allowed)}")


def check_same_dtype(op: str, arg: str, t, ref_arg: str, ref) -> None:
    if t.dtype != ref.dtype:
        raise TypeError(f"{op}: expected argument '{arg}' to have the dtype of '{ref_arg}' "
                        f"({_dtype_name(ref.dtype)}), but it has {_dtype_name(t.dtype)}")


def check_compute_dtype(op: str, args, dtype, allowed) -> None:
    if dtype not in allowed:
        names = ", ".join(f"'{a}'" for a in args)
        raise TypeError(f"{op}: arguments {names} promote to dtype {_dtype_name(dtype)}, which is not supported; "
                        f"supported dtypes: {', '.join(_dtype_name(d) for d in allowed)}")


def _shape(t) -> list:
    return list(t.shape)


def broadcast_shapes(op: str, names: list[str], tensors: list) -> list:
    shape: list = []
    shaped_by: list[str] = []
    for name, t in zip(names, tensors):
        sizes = _shape(t)
        ndim = max(len(shape), len(sizes))
        a_full = [1] * (ndim - len(shape)) + shape
        b_full = [1] * (ndim - len(sizes)) + sizes
        nxt = []
        for a, b in zip(a_full, b_full):
            if not (a == b or a == 1 or b == 1):
                with_ = ", ".join(f"'{n}'" for n in shaped_by)
                raise ValueError(f"{op}: cannot broadcast argument '{name}' of shape {sizes} "
                                 f"with {with_} of shape {shape}")
            nxt.append(b if a == 1 else a)
        shape = nxt
        shaped_by.append(name)
    return shape


def reduced_shape(op: str, arg: str, t, dims, keepdim: bool) -> list:
    ndim = t.dim()
    reduce = [len(dims) == 0] * ndim
    bound = max(ndim, 1)
    for d in dims:
        if not -bound <= d < bound:
            raise IndexError(f"{op}: dimension {d} is out of range for argument '{arg}' with {ndim} dimension(s)")
        if ndim:
            wrapped = d % ndim
            if reduce[wrapped] and len(dims):
                raise ValueError(f"{op}: dimension {d} appears more than once in the reduction of '{arg}'")
            reduce[wrapped] = True
    sizes = _shape(t)
    return [1 if r else s for s, r in zip(sizes, reduce) if keepdim or not r]


def check_same_shape(op: str, a_arg: str, a, b_arg: str, b) -> None:
    if isinstance(b, (list, tuple)):
        for i, t in enumerate(b):
            check_same_shape(op, a_arg, a, f"{b_arg}[{i}]", t)
        return
    if _shape(a) != _shape(b):
        raise ValueError(f"{op}: expected '{a_arg}' and '{b_arg}' to have the same shape, "
                         f"but got {_shape(a)} and {_shape(b)}")


def check_trailing_shape(op: str, outer_arg: str, outer, inner_arg: str, inner) -> None:
    o, i = _shape(outer), _shape(inner)
    if not (1 <= len(i) <= len(o) and o[len(o) - len(i):] == i):
        raise ValueError(f"{op}: expected the shape of '{inner_arg}' {i} to equal the trailing "
                         f"dimensions of '{outer_arg}' {o}")


def check_gather_index(op: str, self_arg: str, self, dim: int, index_arg: str, index) -> None:
    if index.dtype != _torch().int64:
        raise TypeError(f"{op}: argument '{index_arg}' must hold int64 indices, but it has dtype {index.dtype}")
    ndim = max(self.dim(), 1)
    if not -ndim <= dim < ndim:
        raise IndexError(f"{op}: dimension {dim} is out of range for argument '{self_arg}' with "
                         f"{self.dim()} dimension(s)")
    if max(index.dim(), 1) != ndim:
        raise ValueError(f"{op}: '{index_arg}' and '{self_arg}' must have the same number of dimensions, "
                         f"got {index.dim()} and {self.dim()}")
    wrapped = dim % ndim
    for d in range(self.dim()):
        if d != wrapped and index.shape[d] > self.shape[d]:
            raise ValueError(f"{op}: '{index_arg}' {_shape(index)} is larger than '{self_arg}' {_shape(self)} "
                             f"in dimension {d} (only dimension {wrapped}, the one gathered from, may differ)")


def check_last_dim(op: str, outer_arg: str, outer, inner_arg: str, inner) -> None:
    o, i = _shape(outer), _shape(inner)
    if not (len(o) >= 1 and len(i) == 1 and i[0] == o[-1]):
        raise ValueError(f"{op}: expected '{inner_arg}' to be 1-D with the size of the last dimension of "
                         f"'{outer_arg}' {o}, got shape {i}")


def check_row_stat(op: str, stat_arg: str, stat, x_arg: str, x) -> None:
    expected = _shape(x)[:-1] + [1] if x.dim() else []
    if _shape(stat) != expected:
        raise ValueError(f"{op}: expected '{stat_arg}' to have shape {expected} (one value per row of "
                         f"'{x_arg}' {_shape(x)}), got {_shape(stat)}")


def check_inplace(op: str, self, shape, dtype) -> None:
    if list(self.shape) != list(shape):
        raise ValueError(f"{op}: the result has shape {list(shape)}, which cannot be written in place into "
                         f"'self' of shape {list(self.shape)}")
    if self.dtype != dtype:
        raise TypeError(f"{op}: the result has dtype {_dtype_name(dtype)}, which cannot be written in place into "
                        f"'self' of dtype {_dtype_name(self.dtype)}")


def check_broadcastable(op: str, arg: str, t, shape) -> None:
    sizes, shape = _shape(t), list(shape)
    offset = len(shape) - len(sizes)
    if offset < 0 or any(s != 1 and s != shape[offset + d] for d, s in enumerate(sizes)):
        raise ValueError(f"{op}: argument '{arg}' of shape {sizes} does not broadcast to the output shape {shape}")


def check_broadcasts_to(op: str, a_arg: str, a, b_arg: str, b) -> None:
    if a is None:
        return
    sizes, to = _shape(a), _shape(b)
    offset = len(to) - len(sizes)
    if offset < 0 or any(s != 1 and s != to[offset + d] for d, s in enumerate(sizes)):
        raise ValueError(f"{op}: argument '{a_arg}' of shape {sizes} does not broadcast to the shape of '{b_arg}', {to}")


def check_scalar_fits(op: str, arg: str, value, dtype) -> None:
    """As the adapter's check: the kernel converts the scalar to the dtype it computes in."""
    import math

    import torch
    if value is None:
        return
    compute = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    parts = [value.real, value.imag] if isinstance(value, complex) else [value]
    lost = isinstance(value, complex) and value.imag != 0 and not compute.is_complex
    if compute.is_floating_point or compute.is_complex:
        limit = torch.finfo(compute).max
        fits = all(not math.isfinite(p) or abs(p) <= limit for p in parts)
    elif compute != torch.bool:
        info = torch.iinfo(compute)
        fits = all(math.isfinite(p) and info.min <= p <= info.max for p in parts)
    else:
        fits = True
    if lost or not fits:
        imaginary = " or losing its imaginary part" if isinstance(value, complex) and not compute.is_complex else ""
        raise ValueError(f"{op}: argument '{arg}' = {value} cannot be converted to {_dtype_name(compute)} "
                         f"(the dtype the kernel computes {_dtype_name(dtype)} in) without overflow{imaginary}")


def check_index_tensor(op: str, arg: str, index) -> None:
    import torch
    if index.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{op}: argument '{arg}' must hold int64 or int32 indices, but it has dtype "
                        f"{_dtype_name(index.dtype)}")
    if index.dim() > 1:
        raise IndexError(f"{op}: argument '{arg}' must be a scalar or 1-D, but it has {index.dim()} dimensions")


def index_shape(op: str, self_arg: str, self, dim: int, index_arg: str, index) -> list:
    ndim = max(self.dim(), 1)
    if not -ndim <= dim < ndim:
        raise IndexError(f"{op}: dimension {dim} is out of range for argument '{self_arg}' with "
                         f"{self.dim()} dimension(s)")
    shape = _shape(self)
    if shape:
        shape[dim % self.dim()] = index.numel()
    elif index.numel() != 1:
        raise IndexError(f"{op}: argument '{index_arg}' must hold one index to select from a 0-dim '{self_arg}'")
    return shape


def check_one_of(op: str, arg: str, value: str, allowed: list) -> None:
    if value not in allowed:
        raise ValueError(f"{op}: argument '{arg}' is {value!r}, expected one of {', '.join(map(repr, allowed))}")
