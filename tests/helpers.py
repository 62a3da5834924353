"""Helpers the device tests share, so a tolerance or a subprocess set-up is
written once."""
import os
import re
import subprocess
import sys
import textwrap

import pytest
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


def python_output(code: str, timeout: int = 300) -> str:
    """The standard output of `code` (dedented) run by run_python outside the source tree; a non-zero
    exit fails the calling test with its error output. For what lasts the whole process (an
    import's cost, registrations, a loaded extension)."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd="/", capture_output=True,
                            text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def side_stream():
    """A new simhpu stream that has waited for what the current stream launched so
    far (as correct code makes a side stream wait before it reads the inputs)."""
    s = torch.simhpu.Stream()
    s.wait_stream(torch.simhpu.current_stream())
    return s


def race(fragments=()):
    """Expects the stream sanitizer to raise inside the block, with each of `fragments` in its message."""
    return pytest.raises(RuntimeError, match=r"simhpu sanitizer: (?s:.*)" + "".join(
        f"(?=(?s:.*){re.escape(f)})" for f in fragments))


def line_of(path, marker):
    """The number of the line of file `path` that ends with `marker`."""
    with open(path) as f:
        return next(n for n, line in enumerate(f, 1) if line.rstrip().endswith(marker))


@pytest.fixture
def sanitizer_left_off():
    """Starts from a drained device, and leaves the sanitizer off with no reports kept."""
    torch.simhpu.synchronize()
    yield
    torch.simhpu.sanitizer.disable()
    torch.simhpu.sanitizer.clear_reports()
    torch.simhpu.synchronize()
