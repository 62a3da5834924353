import importlib.util
import os
import sys

import pytest
import torch

import torch_simhpu  # noqa: F401  (registers the simhpu device; strict mode: see ../conftest.py)

# op_db's harness (opdb/harness.py), one module for every file that runs op_db: `import opdb_harness`.
_spec = importlib.util.spec_from_file_location("opdb_harness", os.path.join(os.path.dirname(__file__), "opdb", "harness.py"))
sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)  # (dataclasses look their module up there)
_spec.loader.exec_module(sys.modules[_spec.name])


@pytest.fixture
def device():
    return torch.device("simhpu", 0)


@pytest.fixture(autouse=True)
def _device_drained():
    """Every test leaves the queue drained and its errors reported."""
    yield
    torch.simhpu.synchronize(0)
