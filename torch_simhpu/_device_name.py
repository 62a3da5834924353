"""The name PyTorch knows the device by in this process: "simhpu", or "npu" for code written against torch_npu.

PyTorch lets a process name its PrivateUse1 device once, when the device registers, and a
device string ("npu:0") can only name that one name. The name is chosen then, in this order:

1. SIMHPU_DEVICE_NAME, "simhpu" or "npu", when it is set;
2. "npu" when torch_npu (the package in compat/torch_npu) is being imported: it imported torch
   (and so this device) itself;
3. "npu" when the code whose `import torch` loaded this device also imports torch_npu: the
   `import torch` / `import torch_npu` pair at the top of every Ascend program and test file.
   Its compiled code names the module, so this is read from that code, not guessed;
4. "simhpu" otherwise, and torch_npu refuses to be imported later in the process, saying how to
   choose "npu".

A choice made by 2 or 3 is written to SIMHPU_DEVICE_NAME, so processes this one starts (spawned
workers, torchrun's) agree with it.
"""
from __future__ import annotations

import os
import sys
import types

SETTING = "SIMHPU_DEVICE_NAME"
NAMES = ("simhpu", "npu")
_COMPAT_MODULE = "torch_npu"


def choose() -> str:
    """The device's name for this process (the module doc's rules)."""
    setting = os.environ.get(SETTING)
    if setting:
        if setting not in NAMES:
            raise ValueError(f"{SETTING}={setting!r}: the device's name must be one of {', '.join(NAMES)}")
        return setting
    if _COMPAT_MODULE in sys.modules or _importer_names_compat_module():
        os.environ[SETTING] = "npu"
        return "npu"
    return "simhpu"


def _importer_names_compat_module() -> bool:
    """Whether the code that ran the `import torch` loading this device imports torch_npu too."""
    frame = sys._getframe(1)
    while frame is not None and _is_machinery(frame.f_code.co_filename):
        frame = frame.f_back
    return frame is not None and _names_compat_module(frame.f_code)


def _is_machinery(filename: str) -> bool:
    """Frames of the import itself: importlib, torch's own __init__ and backend loading, this package."""
    if filename.startswith("<frozen importlib"):
        return True
    for package in ("importlib", "torch", "torch_simhpu"):
        module = sys.modules.get(package)
        root = os.path.dirname(getattr(module, "__file__", None) or "") if module else ""
        if root and filename.startswith(root + os.sep):
            return True
    return False


def _names_compat_module(code: types.CodeType) -> bool:
    """Whether `code` (or a function defined in it) imports torch_npu or one of its modules."""
    if any(name == _COMPAT_MODULE or name.startswith(_COMPAT_MODULE + ".") for name in code.co_names):
        return True
    return any(isinstance(const, types.CodeType) and _names_compat_module(const) for const in code.co_consts)


DEVICE_TYPE = choose()
