"""python -m torch_npu.op_plugin_suite on a checkout laid out as op-plugin's, written here: each outcome
and each reason it classifies, from files that fail for that reason."""
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[3] / "tests" / "codegen" / "op_plugin_dialect" / "op_plugin_functions.yaml"

HEADER = """\
import numpy as np
import torch
import torch_npu
from torch_npu.testing.testcase import TestCase, run_tests
from torch_npu.testing.common_utils import create_common_tensor, SupportedDevices


class TestThis(TestCase):
"""
FILES = {
    "test_abs.py": """\
    def test_abs(self):
        cpu, npu = create_common_tensor([np.float32, 29, (4, 5)], -3, 3)
        self.assertRtolEqual(torch.abs(cpu).numpy(), torch.abs(npu).cpu().numpy())
""",
    "test_wrong.py": """\
    def test_wrong(self):
        cpu, npu = create_common_tensor([np.float32, 0, (4, 5)], 1, 3)
        self.assertRtolEqual(torch.abs(cpu).numpy(), (torch.abs(npu) + 1).cpu().numpy())
""",
    "test_other_part.py": """\
    @SupportedDevices(["Ascend950"])
    def test_only_there(self):
        pass
""",
    "test_custom.py": """\
    def test_scaled_mask(self):
        x = torch.ones(2, 2).npu()
        torch_npu.npu_scaled_mask(x, x > 0, 0.5)
""",
    "test_undeclared.py": """\
    def test_undeclared(self):
        torch_npu.npu_not_in_any_yaml(torch.ones(1).npu())
""",
    "test_api.py": """\
    def test_api(self):
        torch.npu.graph_task_group_begin()
""",
    "test_module.py": """\
    def test_module(self):
        import a_package_nobody_installed
""",
    "test_raises.py": """\
    def test_raises(self):
        torch.ones(2, 3).npu() @ torch.ones(2, 3).npu()
""",
}
EXPECTED = {"test_abs.py": ("passed", ""), "test_wrong.py": ("failed", "mismatch"),
            "test_other_part.py": ("skipped", ""), "test_custom.py": ("failed", "no kernel yet"),
            "test_undeclared.py": ("failed", "no kernel yet"), "test_api.py": ("failed", "torch_npu API"),
            "test_module.py": ("failed", "missing module"), "test_raises.py": ("failed", "error")}


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    root = tmp_path_factory.mktemp("op-plugin")
    tests = root / "test" / "test_base_ops"
    tests.mkdir(parents=True)
    for name, body in FILES.items():
        (tests / name).write_text(HEADER + body + "\n\nif __name__ == '__main__':\n    run_tests()\n")
    (root / "op_plugin" / "config").mkdir(parents=True)
    shutil.copy(CORPUS, root / "op_plugin" / "config" / "op_plugin_functions.yaml")
    return root


def test_each_file_gets_its_outcome_and_reason(checkout, tmp_path):
    from torch_npu import op_plugin_suite

    env = op_plugin_suite.environment(checkout)
    assert env["SIMHPU_OP_PLUGIN_YAML"].endswith("op_plugin_functions.yaml")
    for name, (outcome, reason) in EXPECTED.items():
        result = op_plugin_suite.run_file(checkout / "test" / "test_base_ops" / name, env, timeout=120)
        assert (result.outcome, result.reason) == (outcome, reason), (name, result.detail)
    custom = op_plugin_suite.run_file(checkout / "test" / "test_base_ops" / "test_custom.py", env, 120)
    assert "npu_scaled_mask" in custom.detail and "op_plugin_functions.yaml" in custom.detail


@pytest.mark.parametrize("output", [
    "Traceback ...\nAttributeError: torch_npu.fast_thing: no operator npu::fast_thing is declared here\n",
    "ERROR\nNotImplementedError: npu::npu_x (f.yaml:3): its kernel is torch_npu's\n",
])
def test_an_operator_without_kernel_is_classified_whatever_its_name(output):
    from torch_npu import op_plugin_suite

    reason, detail = op_plugin_suite.classify(output)
    assert reason == "no kernel yet" and "npu" in detail


def test_a_file_without_a_main_block_runs_its_tests_through_pytest(checkout):
    from torch_npu import op_plugin_suite

    env = op_plugin_suite.environment(checkout)
    folder = checkout / "test" / "test_base_ops"
    # (op-plugin has such files, whose test class is not a TestCase: run as scripts, they run nothing)
    plain = HEADER.replace("class TestThis(TestCase):", "class TestThis:")
    wrong = """\
    def test_wrong(self):
        assert torch.equal(torch.ones(2).npu().cpu(), torch.zeros(2)), "result error"
"""
    for name, text, outcome in (("test_bare.py", HEADER + FILES["test_abs.py"], ("passed", "")),
                                ("test_bare_wrong.py", plain + wrong, ("failed", "mismatch"))):
        (folder / name).write_text(text)
        try:
            result = op_plugin_suite.run_file(folder / name, env, timeout=120)
        finally:
            (folder / name).unlink()
        assert (result.outcome, result.reason) == outcome and result.ran == 1, (name, result.detail)


def test_a_file_past_its_time_is_a_timeout(checkout):
    from torch_npu import op_plugin_suite

    slow = checkout / "test" / "test_base_ops" / "test_slow.py"
    slow.write_text("import time\ntime.sleep(30)\n")
    try:
        result = op_plugin_suite.run_file(slow, op_plugin_suite.environment(checkout), timeout=2)
    finally:
        slow.unlink()
    assert (result.outcome, result.reason) == ("failed", "timeout")


def test_the_command_prints_the_table_by_folder(checkout, tmp_path):
    table = tmp_path / "table.md"
    done = subprocess.run([sys.executable, "-m", "torch_npu.op_plugin_suite", str(checkout), "--folder",
                           "test/test_base_ops", "-k", "test_a", "--jobs", "2", "--markdown", str(table)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = table.read_text()
    assert "| test/test_base_ops | 2 | 1 | 1 | 0 | 50.0 % | 0 | 0 | 1 |" in text, text
    assert "| test/test_base_ops/test_api.py | torch_npu API |" in text


def test_a_folder_that_is_not_there_is_named(tmp_path):
    done = subprocess.run([sys.executable, "-m", "torch_npu.op_plugin_suite", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2 and "no such test folder" in done.stderr and "checkout of op-plugin" in done.stderr
