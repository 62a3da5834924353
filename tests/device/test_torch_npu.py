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


def test_torch_npu_imported_where_the_device_is_simhpu_stays_out_of_the_way_and_says_how_to_choose():
    """Libraries probe for an NPU by importing torch_npu: in a simhpu process the import works, torch.npu
    does not exist, and using torch_npu says how to name the device npu."""
    code = ("import torch\nimport importlib\nmodule = importlib.import_module('torch_' + 'npu')\n"
            "print(module.ACTIVE, hasattr(torch, 'npu'), torch.ones(1, device='simhpu').device)\n"
            "module.npu_swiglu\n")
    done = run_python(code, cwd="/")
    assert done.stdout.split() == ["False", "False", "simhpu:0"], done.stderr[-2000:]
    assert "torch_npu.npu_swiglu: torch_npu is inactive in this process: its device is already named 'simhpu'" in done.stderr
    assert "SIMHPU_DEVICE_NAME=npu" in done.stderr
    done = run_python("import torch_npu\nprint(torch_npu.ACTIVE)", cwd="/", SIMHPU_DEVICE_NAME="simhpu")
    assert done.stdout.strip() == "False", done.stderr[-2000:]


def test_transformers_probe_finds_no_npu_in_a_simhpu_process_and_the_model_runs():
    code = ("import torch\nfrom transformers.utils import is_torch_npu_available\n"
            "from transformers import GPT2Config, GPT2LMHeadModel\n"
            "model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=32)).to('simhpu')\n"
            "print(is_torch_npu_available(), model(torch.tensor([[1, 2, 3]], device='simhpu')).logits.shape)")
    assert name_printed(code) == "False torch.Size([1, 3, 32])"


def test_a_name_the_device_cannot_have_is_refused():
    done = run_python("import torch", cwd="/", SIMHPU_DEVICE_NAME="cuda")
    assert done.returncode != 0 and "SIMHPU_DEVICE_NAME='cuda': the device's name must be one of simhpu, npu" in done.stderr


def test_the_torch_npu_package_passes_its_own_tests():
    """compat/torch_npu/tests: the face, formats, torch_npu.testing and the op-plugin suite's runner."""
    pytest_command = [str(Path(sys.executable).with_name("pytest")), "-q", "-p", "no:cacheprovider", "tests"]
    done = subprocess.run(pytest_command, cwd=COMPAT, capture_output=True, text=True, timeout=1200,
                          env=dict(os.environ, SIMHPU_DEVICE_NAME="npu"))
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
