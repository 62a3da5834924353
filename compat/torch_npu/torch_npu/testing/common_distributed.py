"""Skips for tests that need several devices."""
from __future__ import annotations

import functools
import unittest

import torch


def skipIfUnsupportMultiNPU(count: int):  # noqa: N802 - torch_npu's name
    """Runs the test only with at least `count` devices (SIMHPU_DEVICE_COUNT sets simhpu's)."""
    def decorator(test):
        @functools.wraps(test)
        def run(*args, **kwargs):
            if torch.npu.device_count() < count:
                raise unittest.SkipTest(f"needs {count} devices; there are {torch.npu.device_count()}")
            return test(*args, **kwargs)
        return run
    return decorator
