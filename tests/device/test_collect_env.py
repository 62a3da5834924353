"""python -m torch_simhpu: the environment report a bug report needs (torch_simhpu/collect_env.py)."""
import os
import re
import subprocess
import sys

import torch_simhpu
from torch_simhpu.collect_env import SETTINGS

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_report_names_versions_devices_lenses_and_each_setting_in_force():
    env = dict(os.environ, SIMHPU_CHAOS="7", SIMHPU_DEVICE_CONT="3", SIMHPU_DEVICE_COUNT="3")
    result = subprocess.run([sys.executable, "-m", "torch_simhpu"], capture_output=True, text=True, env=env,
                            timeout=120, cwd="/")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"torch_simhpu: {torch_simhpu.__version__}" in out and re.search(r"SDK stamp: [0-9a-f]{12}", out)
    assert "devices: 3" in out and "simhpu:2: simhpu" in out
    assert "chaos scheduling: seed 7" in out and "stream sanitizer: off" in out and "simulated time: off" in out
    assert "SIMHPU_CHAOS=7: a seed: stream workers are held back" in out
    assert "SIMHPU_DEVICE_CONT=3: not a setting torch_simhpu reads (did you mean SIMHPU_DEVICE_COUNT?)" in out


def test_every_variable_the_sources_read_is_described():
    read = set()
    for folder in ("csrc", "torch_simhpu", os.path.join("compat", "torch_npu", "torch_npu")):
        for root, _, files in os.walk(os.path.join(REPOSITORY, folder)):
            for name in files:
                if name.endswith((".py", ".cpp", ".h")) and name != "collect_env.py":
                    with open(os.path.join(root, name), errors="replace") as f:
                        read |= set(re.findall(r"[\"'](SIMHPU_[A-Z0-9_]+)[\"']", f.read()))
    assert read == set(SETTINGS), (read - set(SETTINGS), set(SETTINGS) - read)
