"""The codegen package from the source tree (it is not part of the wheel).
Nothing here imports torch_simhpu: these tests run without a build."""
import importlib
import sys

import pytest
from yaml_edit import ROOT, copy_project


def _import_from_source(module: str):
    sys.path.insert(0, ROOT)
    try:
        return importlib.import_module(module)
    finally:
        sys.path.remove(ROOT)


@pytest.fixture(scope="session")
def codegen():
    return _import_from_source("codegen.project")


@pytest.fixture(scope="session")
def dialect():
    return _import_from_source("codegen.op_plugin.dialect")


@pytest.fixture(scope="session")
def rule_language():
    return _import_from_source("codegen.model.op_plugin_rules")


@pytest.fixture(scope="session")
def rule_checks():
    return _import_from_source("codegen.op_plugin.check")


@pytest.fixture(scope="session")
def yaml_loader():
    return _import_from_source("codegen.yaml_loader")


@pytest.fixture(scope="session")
def codegen_errors():
    return _import_from_source("codegen.errors")


@pytest.fixture(scope="session")
def types():
    return _import_from_source("codegen.model.types")


@pytest.fixture(scope="session")
def emit():
    return _import_from_source("codegen.emit")


@pytest.fixture(scope="session")
def scaffold():
    return _import_from_source("codegen.scaffold")


@pytest.fixture
def project_dir(tmp_path):
    """A copy of the project's YAML files, kernels and op_plugin adapters to break."""
    copy_project(tmp_path)
    return tmp_path
