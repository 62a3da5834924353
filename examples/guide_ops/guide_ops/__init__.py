"""guide_ops: scale (forward only), square (forward + backward operators) and
cube (torch.autograd.Function) on simhpu."""
import torch
import torch_simhpu  # noqa: F401  (the device, and the library the extension links)
from torch_simhpu.utils import built_library

torch.ops.load_library(built_library(__name__, "_C*.so"))


def scale(x: torch.Tensor, s: float) -> torch.Tensor:
    """s * x. Forward only: backward through it raises."""
    return torch.ops.guide_ops.scale(x, s)


def square(x: torch.Tensor) -> torch.Tensor:
    """x * x; its backward is the operator guide_ops::square_backward."""
    return torch.ops.guide_ops.square(x)


class Cube(torch.autograd.Function):
    """x ** 3: the device operator forward, its gradient 3 x^2 from aten operators."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.ops.guide_ops.cube(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 * x * x


def cube(x: torch.Tensor) -> torch.Tensor:
    return Cube.apply(x)


__all__ = ["scale", "square", "cube", "Cube"]
