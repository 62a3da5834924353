import importlib
import os
import sys

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



ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Helper modules next to the tests (yaml_edit.py); --import-mode=importlib does not add this folder.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _import_from_source(module: str):
    """A module of the source tree's codegen package (it is not part of the wheel)."""
    sys.path.insert(0, ROOT)
    try:
        return importlib.import_module(module)
    finally:
        sys.path.remove(ROOT)


@pytest.fixture(scope="session")
def codegen():
    return _import_from_source("codegen.project")


@pytest.fixture(scope="session")
def scaffold():
    return _import_from_source("codegen.scaffold")
