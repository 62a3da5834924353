"""Tests instantiated per dtype: @Dtypes on a method `test_x(self, device, dtype)`, @instantiate_tests on
its class, make one test per dtype (`test_x_float32`, ...) run on the npu device."""
from __future__ import annotations

import functools
import inspect

import torch


def Dtypes(*dtypes):  # noqa: N802 - torch_npu's name
    def decorator(test):
        test._npu_dtypes = dtypes
        return test
    return decorator


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).split(".")[-1]


def instantiate_tests(cls):
    """Replaces each test taking `device` or `dtype` (with @Dtypes) by tests that pass them."""
    for name, test in list(vars(cls).items()):
        if not name.startswith("test") or not callable(test):
            continue
        parameters = inspect.signature(test).parameters
        if "device" not in parameters and "dtype" not in parameters:
            continue
        delattr(cls, name)
        takes_device = "device" in parameters
        for dtype in getattr(test, "_npu_dtypes", (None,)):
            def run(self, test=test, dtype=dtype, takes_device=takes_device):
                kwargs = {"device": "npu"} if takes_device else {}
                if dtype is not None:
                    kwargs["dtype"] = dtype
                return test(self, **kwargs)
            instance = name if dtype is None else f"{name}_{_dtype_name(dtype)}"
            setattr(cls, instance, functools.wraps(test)(run))
            getattr(cls, instance).__name__ = instance
    return cls
