"""custom_topk: torch.ops.custom_op.custom_topk(x, k, axis, bottom) -> (values, indices)
on simhpu, registered when its library loads (registerUserCustomOp). Its fake
kernel for torch.compile is the C++ output-meta function; the backward is
registered here."""
import torch
import torch_simhpu  # noqa: F401  (the device, and the library the extension links)
from torch_simhpu.utils import built_library

LIBRARY = built_library(__name__, "libcustom_topk*.so")
torch.ops.load_library(LIBRARY)


def _setup_context(ctx, inputs, output):
    self, _, axis, _ = inputs
    ctx.shape, ctx.axis = self.shape, int(axis)
    ctx.save_for_backward(output[1])


def _backward(ctx, grad_values, grad_indices):
    (indices,) = ctx.saved_tensors
    grad = grad_values.new_zeros(ctx.shape).scatter(ctx.axis, indices, grad_values)
    return grad, None, None, None


torch.library.register_autograd("custom_op::custom_topk", _backward, setup_context=_setup_context)


def custom_topk(x: torch.Tensor, k: int, axis: int = -1, bottom: bool = False):
    """The k largest (bottom=True: smallest) values of x along axis, and their indices."""
    return torch.ops.custom_op.custom_topk(x, k, axis, bottom)
