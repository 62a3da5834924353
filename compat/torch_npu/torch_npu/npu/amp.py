"""torch.npu.amp: autocast and GradScaler on the npu device."""
from __future__ import annotations

import functools

import torch

autocast = functools.partial(torch.autocast, "npu")


class GradScaler(torch.amp.GradScaler):
    def __init__(self, *args, **kwargs):
        super().__init__("npu", *args, **kwargs)
