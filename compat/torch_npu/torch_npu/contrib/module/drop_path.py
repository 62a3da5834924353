"""Stochastic depth: a residual branch dropped for whole samples while training."""
import torch


class NpuDropPath(torch.nn.Module):
    """Zeroes the branch for each sample with probability drop_prob while training, scaling the
    samples kept by 1 / (1 - drop_prob); the input itself in eval mode or at drop_prob 0."""

    def __init__(self, drop_prob: float = 0.0):
        super().__init__()
        if not 0.0 <= drop_prob < 1.0:
            raise ValueError(f"NpuDropPath: drop_prob must be in [0, 1), got {drop_prob}")
        self.drop_prob = drop_prob

    def forward(self, x):
        if not self.training or self.drop_prob == 0.0:
            return x
        keep = 1.0 - self.drop_prob
        shape = (x.size(0),) + (1,) * (x.dim() - 1)
        kept = torch.rand(shape, dtype=torch.float32, device=x.device) < keep
        return x * kept.to(x.dtype) / keep

    def extra_repr(self) -> str:
        return f"drop_prob={self.drop_prob}"
