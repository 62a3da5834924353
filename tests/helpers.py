"""Helpers the device tests share, so a tolerance or a subprocess set-up is
written once."""
import os
import subprocess
import sys

import torch


def tol(dtype) -> dict:
    """assert_close tolerances for results computed in `dtype` on the device and in float32 on the CPU."""
    return {torch.float16: dict(atol=2e-3, rtol=2e-3), torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}.get(dtype, {})


def f64(*shape, positive=False):
    """A float64 simhpu leaf requiring grad (for gradcheck); `positive` keeps it in [0.5, 1.5)."""
    t = torch.rand(*shape, dtype=torch.float64) + 0.5 if positive else torch.randn(*shape, dtype=torch.float64)
    return t.to("simhpu").requires_grad_()


def has_device_kernel(op: str) -> bool:
    """True if `op` has a kernel of its own for simhpu (not the fallback)."""
    return torch._C._dispatch_has_kernel_for_dispatch_key(op, "PrivateUse1")


def run_python(code: str, cwd, **env) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter, in `cwd` (outside the source tree), with extra environment."""
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                          env=dict(os.environ, **env), timeout=120)
