import pytest
import torch

import torch_simhpu  # noqa: F401  (registers the simhpu device; strict mode: see ../conftest.py)


@pytest.fixture
def device():
    return torch.device("simhpu", 0)


@pytest.fixture(autouse=True)
def _device_drained():
    """Every test leaves the queue drained and its errors reported."""
    yield
    torch.simhpu.synchronize(0)
