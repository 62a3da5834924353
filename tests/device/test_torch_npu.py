"""The torch_npu package (compat/torch_npu): the device's name each kind of program gets, and the
package's own suite, which runs in a process of its own because its device is called "npu"."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import run_python

COMPAT = Path(__file__).resolve().parents[2] / "compat" / "torch_npu"


def name_printed(code: str, **env) -> str:
    done = run_python(code, cwd="/", **env)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("program,name", [
    ("import torch\nimport torch_npu\nprint(torch.ones(1).npu().device.type)", "npu"),
    ("import torch_npu\nimport torch\nprint(torch.ones(1, device='npu').device.type)", "npu"),
    ("import torch\nfrom torch_npu.testing.testcase import TestCase\nprint(torch.ones(1).npu().device.type)", "npu"),
    ("import torch\nprint(torch.ones(1, device='simhpu').device.type)", "simhpu"),
    ("import torch\nimport torch_simhpu\nprint(torch.ones(1).simhpu().device.type)", "simhpu"),
])
def test_the_program_names_the_device(program, name):
    assert name_printed(program) == name


def test_a_chosen_name_is_what_child_processes_get():
    code = ("import subprocess, sys\nimport torch\nimport torch_npu\n"
            "print(subprocess.run([sys.executable, '-c', 'import torch; print(torch.ones(1, device=\"npu\").device)'],"
            " capture_output=True, text=True).stdout)")
    assert name_printed(code) == "npu:0"


def test_the_setting_names_the_device_and_torch_simhpu_keeps_its_api():
    code = "import torch\nprint(torch.ones(1, device='npu').device.type, torch.simhpu.get_device_name())"
    assert name_printed(code, SIMHPU_DEVICE_NAME="npu") == "npu simhpu"


def test_importing_torch_npu_after_the_device_was_named_simhpu_says_how_to_choose():
    done = run_python("import torch\nimport importlib\nimportlib.import_module('torch_' + 'npu')", cwd="/")
    assert done.returncode != 0
    assert "torch_npu: this process's device is already named 'simhpu'" in done.stderr
    assert "SIMHPU_DEVICE_NAME=npu" in done.stderr
    done = run_python("import torch_npu", cwd="/", SIMHPU_DEVICE_NAME="simhpu")
    assert "already named 'simhpu'" in done.stderr


def test_a_name_the_device_cannot_have_is_refused():
    done = run_python("import torch", cwd="/", SIMHPU_DEVICE_NAME="cuda")
    assert done.returncode != 0 and "SIMHPU_DEVICE_NAME='cuda': the device's name must be one of simhpu, npu" in done.stderr


def test_the_torch_npu_package_passes_its_own_tests():
    """compat/torch_npu/tests: the face, formats, torch_npu.testing and the op-plugin suite's runner."""
    pytest_command = [str(Path(sys.executable).with_name("pytest")), "-q", "-p", "no:cacheprovider", "tests"]
    done = subprocess.run(pytest_command, cwd=COMPAT, capture_output=True, text=True, timeout=1200,
                          env=dict(os.environ, SIMHPU_DEVICE_NAME="npu"))
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
