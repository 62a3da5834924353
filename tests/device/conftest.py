import os

# Strict mode (host code touching device memory faults) for the whole suite,
# subprocesses included, unless the caller chose a mode (test_default_mode.py
# runs part of the suite in the default one); it must be set before torch_simhpu loads.
os.environ.setdefault("SIMHPU_STRICT", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

import torch_simhpu  # noqa: F401,E402  (registers the simhpu device)


@pytest.fixture
def device():
    return torch.device("simhpu", 0)


@pytest.fixture(autouse=True)
def _device_drained():
    """Every test leaves the queue drained and its errors reported."""
    yield
    torch.simhpu.synchronize(0)
