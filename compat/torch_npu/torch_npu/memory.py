"""torch_npu's functions over device memory itself."""
import torch


def copy_memory_(self: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """src's memory copied into self's, on the device, in stream order: both on the device, of one
    dtype and one size (a copy of memory converts and broadcasts nothing)."""
    for name, tensor in (("self", self), ("src", src)):
        if not isinstance(tensor, torch.Tensor) or tensor.device.type != "npu":
            where = tensor.device if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise RuntimeError(f"torch_npu.copy_memory_: {name} must be a tensor on the npu, got {where}")
    if self.dtype != src.dtype or self.shape != src.shape:
        raise RuntimeError(f"torch_npu.copy_memory_: self ({self.dtype}, {list(self.shape)}) and src ({src.dtype}, "
                           f"{list(src.shape)}) must have one dtype and one size")
    return self.copy_(src, non_blocking=non_blocking)
