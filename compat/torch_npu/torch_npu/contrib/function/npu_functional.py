"""Functions over op-plugin's operators, as torch_npu.contrib.function.npu_functional has them."""
import torch


def dropout_with_byte_mask(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Dropout whose keep mask the part stores as bytes (npu::_dropout_with_byte_mask)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout_with_byte_mask: p must be in [0, 1], got {p}")
    result = torch.ops.npu.dropout_with_byte_mask(input, p, training)
    return input.copy_(result) if inplace else result
