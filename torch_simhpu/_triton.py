"""Triton kernels a program launches on simhpu tensors (torchtitan's MoE token permutation,
a user's own @triton.jit kernel).

Triton compiles a kernel for its GPU driver, and a machine without a GPU has none: the
first launch fails ("0 active drivers"). Triton's interpreter runs a kernel's program
over tensors of any torch device instead (through host copies, so each launch
synchronises). Where Triton has no GPU to compile for, simhpu has it interpret:
TRITON_INTERPRET=1, unless the program set TRITON_INTERPRET itself. A kernel is made
interpreted or compiled when its module decorates it, which is after `import torch`
has imported simhpu; the setting is inherited by the program's subprocesses.
"""
from __future__ import annotations

import os

import torch


def interpret_where_no_gpu() -> None:
    if "TRITON_INTERPRET" in os.environ:
        return
    if torch.cuda.is_available() or (hasattr(torch, "xpu") and torch.xpu.is_available()):
        return  # (Triton compiles for that GPU, as it would without simhpu)
    os.environ["TRITON_INTERPRET"] = "1"
