"""torch_npu's own tests run in a process whose device is "npu" (torch_simhpu._device_name): the
README's test command runs them as a pytest process of their own (tests/device/test_torch_npu.py)."""
import os

os.environ.setdefault("SIMHPU_DEVICE_NAME", "npu")
os.environ.setdefault("SIMHPU_STRICT", "1")
