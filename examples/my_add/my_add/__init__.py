"""my_add: torch.ops.npu.my_add(x, y, alpha=1.0) = x + alpha * y on simhpu.

Importing the package loads its kernel library and registers the operator's
fake kernel (torch.compile) and backward."""
import torch
import torch_simhpu  # noqa: F401  (the device, and the library the kernels link)
from torch_simhpu.utils import built_library

torch.ops.load_library(built_library(__name__, "_kernels*.so"))


@torch.library.register_fake("npu::my_add")
def _my_add_fake(x, y, alpha=1.0):
    torch._check(x.dtype == y.dtype, lambda: f"npu::my_add: y has dtype {y.dtype}, expected x's dtype {x.dtype}")
    return x.new_empty(torch.broadcast_shapes(x.shape, y.shape))


def _setup_context(ctx, inputs, output):
    x, y, alpha = inputs
    ctx.alpha = alpha
    ctx.shapes = (x.shape, y.shape)


def _sum_to(grad, shape):
    """grad reduced to `shape` where it was broadcast."""
    extra = grad.dim() - len(shape)
    dims = [i for i in range(grad.dim()) if i < extra or (shape[i - extra] == 1 and grad.shape[i] != 1)]
    return grad.sum(dims, keepdim=True).reshape(shape) if dims else grad


def _backward(ctx, grad):
    x_shape, y_shape = ctx.shapes
    return _sum_to(grad, x_shape), _sum_to(grad * ctx.alpha, y_shape), None


torch.library.register_autograd("npu::my_add", _backward, setup_context=_setup_context)


def my_add(x: torch.Tensor, y: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    """x + alpha * y (torch.ops.npu.my_add)."""
    return torch.ops.npu.my_add(x, y, alpha)


__all__ = ["my_add"]
